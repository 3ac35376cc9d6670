"""The Inductor seed at the user's shapes (GPU): do its kernels run at other shapes, and does
compiling sizes dynamic cost time?

For each development problem: the seed made as a run makes it on a GPU (`python -m
okgit.inductor REF cuda OUT default {} both`: the dynamic file, the static one for comparison,
and the specialised one where Inductor's static kernels differ in kind). Then, in one child
process per problem, each file is run at the op file's own shape, at a second batch size and at
the evaluator's first extra shape (every knob >= 8 made odd), counting its Triton launches (a
count of 0 means the reference's own forward ran) and comparing its output with the reference's;
and eager, the static, dynamic and specialised seeds are timed at the op's own shape with the
evaluator's timer (CUDA events, L2 flushed, warm-up, interleaved rounds, median).

    python bench/seed_shapes.py .kb/KernelBench --problems 1:36,48 2:99
    python bench/seed_shapes.py /work/shared/kernelbench/KernelBench --smoke   # CPU, interpreter, no timing

Prints a table; writes seed_shapes.json under $OUT (default /tmp/out). Exit 1 where a dynamic
seed launched nothing at some shape or disagreed with the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROUNDS, SAMPLES = 3, 10
SMOKE_ELEMENTS = 4096  # inputs scaled down to this many elements for the interpreter

# What a child process of this script and of bench/newuser.py starts with: the job (argv[1]), the
# evaluator's flags, a launch counter, an op file's model at some knobs, an output's worst relative
# error, and arms timed with the evaluator's timer (interleaved rounds, medians in us).
CHILD_PRELUDE = r'''
import json, sys, statistics, torch
from okgit.backends.triton import install_launch_counter
from okgit.eval.worker.calls import build, init_args, load_op, pin_flags
from okgit.eval.worker import timing

job = json.loads(sys.argv[1])
device = job["device"]
pin_flags(torch)
counter = install_launch_counter()

def arm(path, name, knobs):
    module = load_op(path, name, knobs)
    model, _ = build(torch, module.Model, init_args(torch, module, 0, device), device)
    return module, model

def outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]

def rel_err(got, want):
    return max(float((g.double() - w.double()).abs().max() / max(float(w.abs().max()), 1e-30)) for g, w in zip(got, want))

def time_arms(arms, inputs):
    timing.bind()
    flush = timing.l2_flush_buffer(device)
    samples = {name: [] for name in arms}
    with torch.no_grad():
        for r in range(job["rounds"]):
            for name, fn in arms.items():
                samples[name] += timing.time_calls(fn, [inputs], warmup=3 if r == 0 else 1, samples=job["samples"], flush=flush).samples_us
    return {name: statistics.median(s) for name, s in samples.items()}
'''

CHILD = CHILD_PRELUDE + r'''
rows = {}
for shape, knobs in job["shapes"].items():
    ref_module, ref = arm(job["ref"], f"ref_{shape}", knobs)
    torch.manual_seed(1)
    with torch.device(device):
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_module.get_inputs()]
    state = {k: v.clone() for k, v in ref.state_dict().items()}  # as the seeds start: before the reference's call
    with torch.no_grad():
        want = outputs(ref(*inputs))
    for name, path in job["seeds"].items():
        _, model = arm(path, f"{name}_{shape}", knobs)
        model.load_state_dict(state)
        counter.reset()
        try:
            with torch.no_grad():
                got = outputs(model(*inputs))
            if device == "cuda":
                torch.cuda.synchronize()
            rows.setdefault(name, {})[shape] = {"launches": counter.total(), "rel_err": rel_err(got, want)}
        except Exception as e:
            rows.setdefault(name, {})[shape] = {"launches": counter.total(), "error": f"{type(e).__name__}: {str(e)[:200]}"}
        del model
    if shape != "own" or device != "cuda":
        continue
    arms = {"eager": ref}
    for name, path in job["seeds"].items():
        arms[name] = arm(path, f"{name}_timed", knobs)[1]
    rows["time_us"] = time_arms(arms, inputs)
print("RESULT " + json.dumps(rows))
'''


def problem_files(kb: Path, spec: list[str]) -> list[tuple[str, Path]]:
    kb = kb / "KernelBench" if (kb / "KernelBench").is_dir() else kb
    out = []
    for item in spec:
        level, ids = item.split(":")
        for i in ids.split(","):
            hits = sorted((kb / f"level{level}").glob(f"{i}_*.py"))
            if hits:
                out.append((f"L{level}/{i}", hits[0]))
    return out


def shapes(path: Path, smoke: bool) -> dict[str, dict[str, int]]:
    """The op's own knobs, a second batch size and the evaluator's first extra shape (every knob
    >= 8 made odd); on the CPU each scaled down first."""
    sys.path.insert(0, str(ROOT))
    from okgit.problem import shape_knobs

    own = shape_knobs(path.read_text(), str(path))
    if smoke:
        own = scaled(path, own)
    out = {"own": own}
    batch = next((k for k in own if "batch" in k.lower()), None)
    if batch is not None:
        out["batch"] = {**own, batch: own[batch] // 2 + 1 if own[batch] > 2 else own[batch] + 2}
    odd = {k: v - 1 if v % 2 == 0 else v - 2 for k, v in own.items() if v >= 8}
    if odd:
        out["odd"] = {**own, **odd}
    return out


def scaled(path: Path, knobs: dict[str, int]) -> dict[str, int]:
    import torch

    from okgit.eval.worker.calls import load_op

    current = dict(knobs)
    while True:
        module = load_op(str(path), "okgit_scaled", current)
        with torch.device("meta"):
            n = sum(x.numel() for x in module.get_inputs() if isinstance(x, torch.Tensor))
        smaller = {k: v // 2 for k, v in current.items() if v >= 16}
        if n <= SMOKE_ELEMENTS or not smaller:
            return current
        current.update(smaller)


def run_json(cmd: list[str], timeout: float, env: dict[str, str], prefix: str = "{") -> tuple[dict | None, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout:.0f} s"
    lines = [line.removeprefix("RESULT ") for line in p.stdout.splitlines() if line.startswith(prefix)]
    if not lines:
        return None, (p.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return json.loads(lines[-1]), ""


def one(key: str, path: Path, tmp: Path, smoke: bool, env: dict[str, str]) -> dict:
    device = "cpu" if smoke else "cuda"
    found = shapes(path, smoke)
    out = tmp / (key.replace("/", "_") + ".py")
    t0 = time.monotonic()
    answer, err = run_json([sys.executable, "-m", "okgit.inductor", str(path), device, str(out), "default",
                            json.dumps(found["own"]), "both"], 600, env)
    row: dict = {"key": key, "shapes": found, "seed_s": round(time.monotonic() - t0, 1)}
    if answer is None or not answer.get("ok"):
        row["error"] = err or answer.get("why") if answer else err
        return row
    seeds = {"dynamic": str(out), "static": answer["static"]}
    if answer.get("specialised"):
        seeds["specialised"] = answer["specialised"]
    row.update(free_sizes=answer["dynamic"], differs=answer["differs"])
    job = {"ref": str(path), "seeds": seeds, "shapes": found, "device": device, "rounds": ROUNDS, "samples": SAMPLES}
    result, err = run_json([sys.executable, "-c", CHILD, json.dumps(job)], 600, env, prefix="RESULT ")
    if result is None:
        row["error"] = err
    else:
        row.update(result)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| problem | seed | launches own / batch / odd | rel err (worst) | us (own shape) | x static |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['key']} | - | {row['error']} | | | |")
            continue
        times = row.get("time_us", {})
        for seed in ("dynamic", "static", "specialised"):
            per = row.get(seed)
            if per is None:
                continue
            launches = " / ".join(str(per.get(s, {}).get("launches", "-")) for s in ("own", "batch", "odd"))
            errs = [r.get("rel_err") for r in per.values() if r.get("rel_err") is not None]
            worst = f"{max(errs):.1e}" if errs else next((r["error"] for r in per.values() if "error" in r), "-")
            us = times.get(seed)
            ratio = f"{times['static'] / us:.3f}" if us and times.get("static") else "-"
            lines.append(f"| {row['key']} | {seed} | {launches} | {worst} | {f'{us:.1f}' if us else '-'} | {ratio} |")
        if times.get("eager"):
            lines.append(f"| {row['key']} | eager | | | {times['eager']:.1f} | |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", type=Path, help="a KernelBench checkout (or its KernelBench folder)")
    parser.add_argument("--problems", nargs="+", default=["1:36,48", "2:99"], help="LEVEL:ID,ID ... (development problems)")
    parser.add_argument("--smoke", action="store_true", help="CPU, scaled-down sizes, Triton's interpreter, no timing")
    parser.add_argument("--time-limit", type=float, default=200.0, help="stop starting new problems after this many seconds")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if args.smoke:
        env["TRITON_INTERPRET"] = "1"
    deadline = time.monotonic() + args.time_limit
    rows = []
    with tempfile.TemporaryDirectory(prefix="okgit-seed-shapes-") as tmp:
        for key, path in problem_files(args.kb, args.problems):
            if time.monotonic() > deadline:
                rows.append({"key": key, "error": "skipped: time limit"})
                continue
            rows.append(one(key, path, Path(tmp), args.smoke, env))
            print(f"{key}: done", flush=True)
    print(table(rows))
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "seed_shapes.json").write_text(json.dumps(rows, indent=1))
    bad = [row["key"] for row in rows if "dynamic" in row and any(
        r.get("launches", 0) == 0 or "error" in r or r.get("rel_err", 0) > 1e-3 for r in row["dynamic"].values())]
    if bad:
        print(f"dynamic seed not running or not matching at some shape: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
