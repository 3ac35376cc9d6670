"""The Inductor seed's convolution layout (GPU): each op made into a dynamic seed twice, its
convolutions in the layout Inductor chooses at the op's own sizes (okgit.inductor.layout, what a
run makes) and in the one its dynamic compile chooses (NCHW wherever a convolution has a free
size), each checked against the reference at the op's own shape and at a second batch size (train
and eval mode, Triton launches counted: 0 means the reference's forward ran), then timed at the
own shape in eval mode against eager and torch.compile (default mode) with the evaluator's timer
(CUDA events, L2 flushed, warm-up, interleaved rounds, median).

    python bench/seed_layout.py                                   # GPU: conv_bias_relu and conv_bn of bench/newuser/
    python bench/seed_layout.py bench/newuser/conv_bias_relu.py
    python bench/seed_layout.py --smoke                           # CPU, scaled-down sizes, interpreter, no timing

On a CPU the seeds are made with mkldnn off: with it, Inductor runs every CPU convolution
channels-last whatever its sizes, so the two seeds would not differ. Prints a table; writes
seed_layout.json under $OUT (default /tmp/out). Exit 1 where a seed launched nothing at some shape
or disagreed with the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from seed_shapes import CHILD_PRELUDE, ROUNDS, SAMPLES, run_json, scaled

ROOT = Path(__file__).resolve().parents[1]
OPS = [Path(__file__).resolve().parent / "newuser" / f"{name}.py" for name in ("conv_bias_relu", "conv_bn")]
SEEDS = {"seed_own_sizes": True, "seed_dynamic": False}  # the seed's name -> own_layout

MAKE = r'''
import json, sys, torch
from okgit.inductor.capture import capture
from okgit.inductor.standalone import standalone_file

job = json.loads(sys.argv[1])
out = {}
for name, own in job["seeds"].items():
    with torch.backends.mkldnn.flags(enabled=job["device"] != "cpu"):
        cap = capture(job["ref"], job["knobs"], job["device"], own_layout=own)
    path = f"{job['tmp']}/{name}.py"
    with open(path, "w") as f:
        f.write(standalone_file(open(job["ref"]).read(), cap, job["device"]))
    out[name] = {"path": path, "kernels": sum(len(g["kernels"]) for g in cap["graphs"]),
                 "layout": "; ".join(dict.fromkeys(g["layout"] for g in cap["graphs"]))}
print("RESULT " + json.dumps(out))
'''

RUN = CHILD_PRELUDE + r'''
rows = {}
for shape, knobs in job["shapes"].items():
    ref_module, ref = arm(job["ref"], f"ref_{shape}", knobs)
    seeds = {name: arm(path, f"{name}_{shape}", knobs)[1] for name, path in job["seeds"].items()}
    for model in seeds.values():
        model.load_state_dict(ref.state_dict())
    torch.manual_seed(1)
    with torch.device(device):
        inputs = list(ref_module.get_inputs())
    for mode in ("train", "eval"):
        ref.train(mode == "train")
        with torch.no_grad():
            want = outputs(ref(*inputs))
        for name, model in seeds.items():
            model.train(mode == "train")
            counter.reset()
            try:
                with torch.no_grad():
                    got = outputs(model(*inputs))
                rows.setdefault(name, {})[f"{shape} {mode}"] = {"launches": counter.total(), "rel_err": rel_err(got, want)}
            except Exception as e:
                rows.setdefault(name, {})[f"{shape} {mode}"] = {"launches": counter.total(), "error": f"{type(e).__name__}: {str(e)[:200]}"}
    if shape != "own" or device != "cuda":
        continue
    for model in (ref, *seeds.values()):
        model.eval()
    rows["time_us"] = time_arms({"eager": ref, "compile": torch.compile(ref), **seeds}, inputs)
print("RESULT " + json.dumps(rows))
'''


def shapes(path: Path, smoke: bool) -> dict[str, dict[str, int]]:
    """The op's own knobs (scaled down on a CPU) and a second batch size."""
    sys.path.insert(0, str(ROOT))
    from okgit.problem import shape_knobs

    own = shape_knobs(path.read_text(), str(path))
    if smoke:
        own = scaled(path, own)
    batch = next((k for k in own if "batch" in k.lower()), None)
    if batch is None:
        return {"own": own}
    return {"own": own, "batch": {**own, batch: own[batch] // 2 + 1 if own[batch] > 2 else own[batch] + 2}}


def one(path: Path, tmp: Path, smoke: bool, env: dict[str, str]) -> dict:
    device = "cpu" if smoke else "cuda"
    found = shapes(path, smoke)
    work = tmp / path.stem
    work.mkdir()
    t0 = time.monotonic()
    job = {"ref": str(path), "knobs": found["own"], "device": device, "seeds": SEEDS, "tmp": str(work)}
    made, err = run_json([sys.executable, "-c", MAKE, json.dumps(job)], 600, env, prefix="RESULT ")
    row: dict = {"op": path.stem, "shapes": found, "seeds_s": round(time.monotonic() - t0, 1)}
    if made is None:
        row["error"] = err
        return row
    row["made"] = made
    job = {"ref": str(path), "seeds": {name: m["path"] for name, m in made.items()}, "shapes": found,
           "device": device, "rounds": ROUNDS, "samples": SAMPLES}
    result, err = run_json([sys.executable, "-c", RUN, json.dumps(job)], 600, env, prefix="RESULT ")
    if result is None:
        row["error"] = err
    else:
        row.update(result)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| op | arm | layout | kernels | launches (each shape and mode) | rel err (worst) | us (own, eval) | x torch.compile |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['op']} | - | {row['error']} | | | | | |")
            continue
        times = row.get("time_us", {})
        compiled = times.get("compile")
        for name, made in row["made"].items():
            per = row.get(name, {})
            launches = " / ".join(str(r.get("launches", "-")) for r in per.values())
            errs = [r["rel_err"] for r in per.values() if r.get("rel_err") is not None]
            worst = f"{max(errs):.1e}" if errs else next((r["error"] for r in per.values() if "error" in r), "-")
            us = times.get(name)
            ratio = f"{compiled / us:.2f}" if us and compiled else "-"
            lines.append(f"| {row['op']} | {name} | {made['layout'] or '-'} | {made['kernels']} | {launches} | {worst} | "
                         f"{f'{us:.1f}' if us else '-'} | {ratio} |")
        for name in ("eager", "compile"):
            if times.get(name):
                lines.append(f"| {row['op']} | {name} | | | | | {times[name]:.1f} | |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*", type=Path, default=OPS, help="op files (default: conv_bias_relu and conv_bn)")
    parser.add_argument("--smoke", action="store_true", help="CPU, scaled-down sizes, Triton's interpreter, no timing")
    parser.add_argument("--time-limit", type=float, default=180.0, help="stop starting new ops after this many seconds")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if args.smoke:
        env["TRITON_INTERPRET"] = "1"
    deadline = time.monotonic() + args.time_limit
    rows = []
    with tempfile.TemporaryDirectory(prefix="okgit-seed-layout-") as tmp:
        for path in args.ops:
            if time.monotonic() > deadline:
                rows.append({"op": path.stem, "error": "skipped: time limit"})
                continue
            rows.append(one(path.resolve(), Path(tmp), args.smoke, env))
            print(f"{path.stem}: done in {rows[-1].get('seeds_s', '-')} s of seeds", flush=True)
    print(table(rows))
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "seed_layout.json").write_text(json.dumps(rows, indent=1))
    bad = [f"{row['op']} {name}" for row in rows for name in SEEDS if "error" in row or any(
        r.get("launches", 0) == 0 or "error" in r or r.get("rel_err", 0) > 1e-3 for r in row.get(name, {}).values())]
    if bad:
        print(f"a seed not running or not matching at some shape: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
