"""Offline okgit vs eager PyTorch vs torch.compile on the example ops (run on the GPU machine).

    PYTHONPATH=. python bench/offline.py [--ops 'examples/*.py'] [--jobs 3] [--iterations 8]

For each op, in its own process: okgit's offline search (templates, then autotune) through
the LocalEvaluator and the shared search driver; then the three arms timed alike in this
process at the op's default shapes: CUDA events, L2 flushed (2x its size) before every
sample, warm-up excluded, median of the samples, PyTorch flags pinned as the evaluator pins
them. Ops run concurrently (--jobs) but every GPU measurement, the evaluator's included,
holds the evaluator's device lock, so no two processes time kernels at the same moment;
compilation overlaps. okgit's result counts as correct only when the evaluator judged it so
and it matches eager at the default shape too.

Prints one row per op (op, shape, dtype, eager us, compile us, okgit us, speedups, correct)
and a closing line with the geomeans and fast_1 (share of ops where okgit is correct and
faster); writes $OUT/offline.json when OUT is set.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# One op (child process)


def run_one(path: str, iterations: int, op_seconds: float) -> dict:
    import torch

    from okgit.eval.jobs import PINNED_FLAGS
    from okgit.eval.devices import device_lock
    from okgit.eval.local import LocalEvaluator
    from okgit.problem import load_problem
    from okgit.search.driver import Budget, Search
    from okgit.search.proposers.autotune import AutotuneProposer
    from okgit.search.proposers.templates import TemplatesProposer
    from okgit.search.types import Context

    for flag, value in PINNED_FLAGS.items():
        owner, attr = flag.rsplit(".", 1)
        setattr(eval(owner, {"torch": torch}), attr, value)

    t0 = time.monotonic()
    problem = load_problem(path)
    evaluator = LocalEvaluator(device="cuda")
    events: list[dict] = []
    ctx = Context(problem=problem, reference=evaluator.reference(problem), backend="triton", device="cuda",
                  log=lambda type, **f: events.append({"type": type, **f}))
    budget = Budget(iterations=iterations, patience=iterations, time_s=op_seconds)
    search = Search(ctx, evaluator, budget, accept=lambda attempt: None, mode="fast")
    stop = search.run([TemplatesProposer(), AutotuneProposer()])
    evaluator.close()
    search_s = time.monotonic() - t0
    best = ctx.best

    ref = _load(Path(path), "reference")
    torch.manual_seed(0)
    init = ref.get_init_inputs()
    torch.manual_seed(1)
    model = ref.Model(*init).cuda()
    torch.manual_seed(2)
    inputs = [x.cuda() for x in ref.get_inputs()]
    row = {
        "op": Path(path).stem,
        "shape": " ".join("x".join(map(str, x.shape)) for x in inputs),
        "dtype": str(inputs[0].dtype).replace("torch.", ""),
        "candidates": len(ctx.attempts),
        "correct_candidates": sum(a.result.correct for a in ctx.attempts),
        "stop": stop,
        "search_s": round(search_s, 1),
    }
    with torch.no_grad():
        want = model(*inputs)
        with device_lock("cuda:0"):
            row["eager_us"] = _time(lambda: model(*inputs))
        t1 = time.monotonic()
        compiled = torch.compile(model)
        compiled(*inputs)  # compile outside the lock
        row["compile_s"] = round(time.monotonic() - t1, 1)
        with device_lock("cuda:0"):
            row["compile_us"] = _time(lambda: compiled(*inputs))
        row.update(okgit_us=None, correct=False, best=None, origin=None)
        if best is not None and best.result.correct:
            cand = _load_source(best.proposal.source)
            torch.manual_seed(1)
            fast = getattr(cand, "ModelNew", cand.Model)(*init).cuda()
            fast.load_state_dict(model.state_dict())
            got = fast(*inputs)
            row["correct"] = _close(got, want)
            with device_lock("cuda:0"):
                row["okgit_us"] = _time(lambda: fast(*inputs))
            row.update(best=best.cand, origin=best.proposal.origin, evaluator_speedup=best.result.speedup)
    row["gpu_s"] = round(sum(e.get("wall_s") or 0.0 for e in events if e["type"] == "evaluated"), 1)
    row["wall_s"] = round(time.monotonic() - t0, 1)
    return row


def _load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_source(source: str):
    import tempfile

    tmp = Path(tempfile.mkdtemp()) / "okgit_best.py"  # a real file: @triton.jit reads its source
    tmp.write_text(source)
    return _load(tmp, "okgit_best")


def _close(got, want) -> bool:
    import torch

    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    for g, w in zip(got, want):
        if g.shape != w.shape or g.dtype != w.dtype:
            return False
        if w.is_floating_point():
            atol = 1e-3 * float(w.abs().max()) if w.numel() else 0.0
            if not torch.allclose(g, w, rtol=1e-3, atol=atol):
                return False
        elif not torch.equal(g, w):
            return False
    return len(got) == len(want)


def _time(fn, warmup: int = 5, samples: int = 30) -> float:
    """Median microseconds of fn, L2 flushed before each sample."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20) or (64 << 20)
    flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return round(statistics.median(times), 2)


# ---------------------------------------------------------------------------------------------
# All ops (parent process)


def child(path: str, args) -> dict:
    cmd = [sys.executable, __file__, "--one", path, "--iterations", str(args.iterations), "--op-seconds", str(args.op_seconds)]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.op_timeout, env=env, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return {"op": Path(path).stem, "error": f"timed out after {args.op_timeout}s"}
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("ROW "):
            return json.loads(line[4:])
    return {"op": Path(path).stem, "error": (proc.stderr or proc.stdout).strip()[-800:]}


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def summarize(rows: list[dict]) -> dict:
    vs_eager, vs_compile, fast_eager, fast_compile = [], [], 0, 0
    for r in rows:
        ok = r.get("correct") and r.get("okgit_us")
        # an op without a correct okgit result keeps the baseline: speedup 1 against eager
        r["vs_eager"] = round(r["eager_us"] / r["okgit_us"], 3) if ok else (1.0 if "eager_us" in r else None)
        r["vs_compile"] = round(r["compile_us"] / (r["okgit_us"] if ok else r["eager_us"]), 3) if "compile_us" in r else None
        if r["vs_eager"]:
            vs_eager.append(r["vs_eager"])
        if r["vs_compile"]:
            vs_compile.append(r["vs_compile"])
        fast_eager += bool(ok and r["vs_eager"] > 1.0)
        fast_compile += bool(ok and r["vs_compile"] > 1.0)
    n = len(rows)
    return {
        "ops": n,
        "geomean_vs_eager": geomean(vs_eager),
        "geomean_vs_compile": geomean(vs_compile),
        "fast_1_vs_eager": fast_eager / n if n else None,
        "fast_1_vs_compile": fast_compile / n if n else None,
        "correct": sum(bool(r.get("correct")) for r in rows),
    }


def table(rows: list[dict], summary: dict, device: str) -> str:
    head = f"{'op':34} {'shape':24} {'dtype':8} {'eager us':>10} {'compile us':>10} {'okgit us':>10} {'vs eager':>8} {'vs comp':>8} {'correct':>7} {'wall s':>6}"
    out = [f"device: {device}", head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            out.append(f"{r['op']:34} error: {r['error'].splitlines()[-1] if r['error'] else ''}")
            continue
        fmt = lambda v, spec: format(v, spec) if isinstance(v, (int, float)) else "-"
        out.append(
            f"{r['op'][:34]:34} {r['shape'][:24]:24} {r['dtype']:8} {fmt(r['eager_us'], '10.1f')} {fmt(r['compile_us'], '10.1f')} "
            f"{fmt(r['okgit_us'], '10.1f')} {fmt(r['vs_eager'], '8.2f')} {fmt(r['vs_compile'], '8.2f')} {bool(r['correct'])!s:>7} {fmt(r['wall_s'], '6.0f')}"
        )
    s = summary
    g = lambda v: f"{v:.3f}" if v is not None else "-"
    out.append(
        f"geomean vs eager {g(s['geomean_vs_eager'])}, vs torch.compile {g(s['geomean_vs_compile'])}; "
        f"fast_1 vs eager {g(s['fast_1_vs_eager'])}, vs torch.compile {g(s['fast_1_vs_compile'])}; "
        f"correct {s['correct']}/{s['ops']}"
    )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default=str(ROOT / "examples" / "*.py"), help="glob of op files")
    ap.add_argument("--jobs", type=int, default=3, help="ops in flight (GPU timing is serialized by a lock)")
    ap.add_argument("--iterations", type=int, default=8, help="candidates evaluated per op")
    ap.add_argument("--op-seconds", type=float, default=100.0, help="search time budget per op")
    ap.add_argument("--op-timeout", type=float, default=240.0, help="hard limit per op process")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print("ROW " + json.dumps(run_one(args.one, args.iterations, args.op_seconds)))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("bench/offline.py needs a CUDA GPU", file=sys.stderr)
        return 1
    device = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    try:
        import triton

        device += f", triton {triton.__version__}"
    except ImportError:
        pass
    paths = sorted(glob.glob(args.ops))
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda p: child(p, args), paths))
    good = [r for r in rows if "error" not in r]
    summary = summarize(good)
    summary["failed_ops"] = [r["op"] for r in rows if "error" in r]
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    print(table(rows, summary, device))
    print(f"total wall {summary['wall_s']:.0f} s")
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "offline.json").write_text(json.dumps({"device": device, "rows": rows, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
