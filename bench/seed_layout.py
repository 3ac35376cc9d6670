"""The Inductor seed's convolution layout (GPU): each op made into a dynamic seed twice, its
convolutions in the layout Inductor chooses at the op's own sizes (okgit.inductor.layout, what a
run makes) and in the one its dynamic compile chooses (NCHW wherever a convolution has a free
size), and into a static one (every size as compiled: what the specialised seed runs at the op's
own shape; Inductor tiles a pointwise kernel that reads a channels-last convolution and writes NCHW
in 2D there, in 1D where the spatial sizes are free), each checked against the reference at the op's own shape and at a second batch size (train
and eval mode, Triton launches counted: 0 means the reference's forward ran), then timed at the
own shape in eval and in training mode against eager and torch.compile (default mode) with the
evaluator's timer (CUDA events, L2 flushed, warm-up, interleaved rounds, median), and each arm's
kernels by device time (torch.profiler) in both modes. The seeds' code is kept under
$OUT/seed_layout/<op>/.

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
# the seed's name -> (own_layout, dynamic); seed_static is what the specialised seed runs at the op's own shape
SEEDS = {"seed_own_sizes": (True, True), "seed_dynamic": (False, True), "seed_static": (True, False)}

MAKE = r'''
import json, sys, torch
from okgit.inductor.capture import capture
from okgit.inductor.standalone import standalone_file

job = json.loads(sys.argv[1])
out = {}
for name, (own, dynamic) in job["seeds"].items():
    with torch.backends.mkldnn.flags(enabled=job["device"] != "cpu"):
        cap = capture(job["ref"], job["knobs"], job["device"], dynamic=dynamic, own_layout=own)
    path = f"{job['tmp']}/{name}.py"
    with open(path, "w") as f:
        f.write(standalone_file(open(job["ref"]).read(), cap, job["device"]))
    out[name] = {"path": path, "kernels": sum(len(g["kernels"]) for g in cap["graphs"]),
                 "layout": "; ".join(dict.fromkeys(g["layout"] for g in cap["graphs"]))}
print("RESULT " + json.dumps(out))
'''

RUN = CHILD_PRELUDE + r'''
def kernels(fn, inputs, calls=5):
    """Each kernel's device time per call (us), the largest first: where an arm's time goes."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        fn(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(*inputs)
            torch.cuda.synchronize()
    per = [(e.key, getattr(e, "device_time_total", 0.0) / calls) for e in prof.key_averages()]
    return [[key[:90], round(us, 1)] for key, us in sorted(per, key=lambda r: -r[1]) if us > 0][:8]

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
    arms = {"eager": ref, "compile": torch.compile(ref), **seeds}
    for mode in ("eval", "train"):  # eval first: the figures of the earlier runs of this script
        for model in (ref, *seeds.values()):
            model.train(mode == "train")
        rows["time_us" if mode == "eval" else "time_us_train"] = time_arms(arms, inputs)
        rows["kernels_" + mode] = {name: kernels(fn, inputs) for name, fn in arms.items()}
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
    kept = Path(os.environ.get("OUT", "/tmp/out")) / "seed_layout" / path.stem
    kept.mkdir(parents=True, exist_ok=True)
    for name, m in made.items():  # the seeds' code, to read what each kernel does
        (kept / f"{name}.py").write_text(Path(m["path"]).read_text())
    job = {"ref": str(path), "seeds": {name: m["path"] for name, m in made.items()}, "shapes": found,
           "device": device, "rounds": ROUNDS, "samples": SAMPLES}
    result, err = run_json([sys.executable, "-c", RUN, json.dumps(job)], 600, env, prefix="RESULT ")
    if result is None:
        row["error"] = err
    else:
        row.update(result)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| op | arm | layout | kernels | launches (each shape and mode) | rel err (worst) | us (own, eval) | "
             "x torch.compile | us (own, train) | x torch.compile |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['op']} | - | {row['error']} | | | | | | | |")
            continue
        modes = (row.get("time_us", {}), row.get("time_us_train", {}))

        def timed(name: str) -> str:
            cells = []
            for times in modes:
                us, compiled = times.get(name), times.get("compile")
                cells += [f"{us:.1f}" if us else "-", f"{compiled / us:.2f}" if us and compiled else "-"]
            return " | ".join(cells)

        for name, made in row["made"].items():
            per = row.get(name, {})
            launches = " / ".join(str(r.get("launches", "-")) for r in per.values())
            errs = [r["rel_err"] for r in per.values() if r.get("rel_err") is not None]
            worst = f"{max(errs):.1e}" if errs else next((r["error"] for r in per.values() if "error" in r), "-")
            lines.append(f"| {row['op']} | {name} | {made['layout'] or '-'} | {made['kernels']} | {launches} | {worst} | "
                         f"{timed(name)} |")
        for name in ("eager", "compile"):
            if any(times.get(name) for times in modes):
                lines.append(f"| {row['op']} | {name} | | | | | {timed(name)} |")
    for row in rows:  # where each arm's time goes
        for mode in ("eval", "train"):
            for name, top in row.get("kernels_" + mode, {}).items():
                lines.append(f"{row['op']} {mode} {name}: " + "; ".join(f"{us} us {key}" for key, us in top))
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
    # a static seed runs the reference's forward at any other shape (0 launches there, as it should)
    bad = [f"{row['op']} {name}" for row in rows for name, (_, dynamic) in SEEDS.items() if "error" in row or any(
        (r.get("launches", 0) == 0 and (dynamic or key.startswith("own"))) or "error" in r or r.get("rel_err", 0) > 1e-3
        for key, r in row.get(name, {}).items())]
    if bad:
        print(f"a seed not running or not matching at some shape: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
