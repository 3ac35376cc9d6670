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
faster); writes $OUT/offline.json when OUT is set, again after every finished op. With
--time-limit S no op starts or runs past S seconds: the ops not run are listed, not guessed.

    PYTHONPATH=. python bench/offline.py --smoke   # CPU, Triton interpreter, one tiny op

--smoke runs the same steps on the CPU: the search through the LocalEvaluator (device cpu),
then okgit's result checked against eager at the op's shapes scaled down as the evaluator
scales them on a CPU. Skipped there, and said so: CUDA-event timing with the L2 flush, the
device lock, and torch.compile (compiled and timed on the GPU only). Every time is "-";
speedups, geomeans and fast_1 are not claimed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOKE_OPS = str(ROOT / "tests" / "ops" / "relu.py")
SMOKE_SKIPPED = ["CUDA-event timing with the L2 flush (eager, torch.compile, okgit)",
                 "torch.compile (compiled and timed on the GPU only)",
                 "the device lock", "speedups, geomeans and fast_1 (nothing timed)"]
CPU_INPUT_LIMIT = 65536  # elements, as okgit.eval.jobs.Job.cpu_input_limit


# ---------------------------------------------------------------------------------------------
# One op (child process)


def run_one(path: str, iterations: int, op_seconds: float, smoke: bool = False) -> dict:
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
    dev = "cpu" if smoke else "cuda"
    evaluator = LocalEvaluator(device=dev)
    events: list[dict] = []
    reference = evaluator.reference(problem)
    ctx = Context(problem=problem, reference=reference, backend="triton", device=evaluator.device,
                  hardware=reference.hardware, log=lambda type, **f: events.append({"type": type, **f}))
    budget = Budget(iterations=iterations, patience=iterations, time_s=op_seconds)
    search = Search(ctx, evaluator, budget, accept=lambda attempt: None, mode="fast")
    stop = search.run([TemplatesProposer(), AutotuneProposer()])
    evaluator.close()
    search_s = time.monotonic() - t0
    best = ctx.best

    ref = _load(Path(path), "reference")
    if smoke:  # the interpreter is slow: the op's shapes scaled down as the evaluator does on a CPU
        _scale_for_cpu(ref, problem.knobs)
    torch.manual_seed(0)
    init = ref.get_init_inputs()
    torch.manual_seed(1)
    model = ref.Model(*init).to(dev)
    torch.manual_seed(2)
    inputs = [x.to(dev) for x in ref.get_inputs()]
    row = {
        "op": Path(path).stem,
        "shape": " ".join("x".join(map(str, x.shape)) for x in inputs),
        "dtype": str(inputs[0].dtype).replace("torch.", ""),
        "candidates": len(ctx.attempts),
        "correct_candidates": sum(a.result.correct for a in ctx.attempts),
        "stop": stop,
        "search_s": None if smoke else round(search_s, 1),
    }
    with torch.no_grad():
        want = model(*inputs)
        if smoke:  # GPU only: CUDA events, the L2 flush, the device lock, torch.compile
            row.update(eager_us=None, compile_s=None, compile_us=None)
        else:
            with device_lock("cuda:0"):
                row["eager_us"] = _time(model, inputs)
            t1 = time.monotonic()
            try:
                compiled = torch.compile(model)
                compiled(*inputs)  # compile outside the lock
                row["compile_s"] = round(time.monotonic() - t1, 1)
                with device_lock("cuda:0"):
                    row["compile_us"] = _time(compiled, inputs)
            except Exception as e:  # noqa: BLE001 - torch.compile failing on an op is a finding, not a crash
                row.update(compile_s=None, compile_us=None, compile_error=_why(e))
        row.update(okgit_us=None, correct=False, best=None, origin=None)
        if best is not None and best.result.correct:
            row.update(best=best.cand, origin=best.proposal.origin, evaluator_speedup=best.result.speedup)
            try:
                cand = _load_source(best.proposal.source)
                torch.manual_seed(1)
                fast = getattr(cand, "ModelNew", cand.Model)(*init).to(dev)
                fast.load_state_dict(model.state_dict())
                got = fast(*inputs)
                row["correct"] = _close(got, want)
                if not smoke and row["correct"]:
                    with device_lock("cuda:0"):
                        row["okgit_us"] = _time(fast, inputs)
            except Exception as e:  # noqa: BLE001 - counted as not correct, with the reason
                row.update(correct=False, okgit_us=None, check_error=_why(e))
    gpu_s = round(sum(e.get("wall_s") or 0.0 for e in events if e["type"] == "evaluated"), 1)
    wall_s = round(time.monotonic() - t0, 1)
    row["gpu_s"], row["wall_s"] = (None, None) if smoke else (gpu_s, wall_s)
    if smoke:
        row["cpu_wall_s"] = wall_s  # the CPU walls, not GPU figures
    return row


def _why(e: BaseException) -> str:
    lines = [line for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300]


def _scale_for_cpu(module, knobs: dict[str, int]) -> None:
    """Halve every knob >= 16 until the inputs hold <= CPU_INPUT_LIMIT elements (the worker's rule)."""
    import torch

    current = {k: v for k, v in knobs.items() if hasattr(module, k)}
    while True:
        for k, v in current.items():
            setattr(module, k, v)
        torch.manual_seed(0)
        n = sum(x.numel() for x in module.get_inputs() if isinstance(x, torch.Tensor))
        smaller = {k: v // 2 for k, v in current.items() if v >= 16}
        if n <= CPU_INPUT_LIMIT or not smaller:
            return
        current.update(smaller)


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


def _time(fn, inputs, warmup: int = 5, samples: int = 30) -> float:
    """Median microseconds of fn(*inputs) by the evaluator's own timer (CUDA events, L2 flushed
    before each sample, warm-up excluded), so the three arms are timed exactly as okgit times."""
    from okgit.eval import timing

    timing.bind()
    timed = timing.time_calls(fn, [list(inputs)], warmup=warmup, samples=samples,
                              flush=timing.l2_flush_buffer("cuda:0"))
    return round(timed.median_us, 2)


# ---------------------------------------------------------------------------------------------
# All ops (parent process)


def child(path: str, args, deadline: float | None = None) -> dict:
    timeout = args.op_timeout
    if deadline is not None:
        timeout = min(timeout, deadline - time.monotonic())
        if timeout < 10:
            return {"op": Path(path).stem, "not_run": f"time limit {args.time_limit:.0f} s reached before it started"}
    cmd = [sys.executable, __file__, "--one", path, "--iterations", str(args.iterations), "--op-seconds", str(args.op_seconds)]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if args.smoke:
        cmd.append("--smoke")
        env.update(CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1")  # the check of okgit's kernel runs on the CPU
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return {"op": Path(path).stem, "error": f"timed out after {timeout:.0f}s"}
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("ROW "):
            return json.loads(line[4:])
    return {"op": Path(path).stem, "error": (proc.stderr or proc.stdout).strip()[-800:]}


def summarize(rows: list[dict]) -> dict:
    from okgit.kernelbench.scoring import geomean

    vs_eager, vs_compile, fast_eager, fast_compile = [], [], 0, 0
    for r in rows:
        ok = bool(r.get("correct") and r.get("okgit_us"))
        eager, comp = r.get("eager_us"), r.get("compile_us")
        # an op without a correct okgit result keeps the baseline: speedup 1 against eager
        r["vs_eager"] = (round(eager / r["okgit_us"], 3) if ok else 1.0) if eager else None
        mine = r["okgit_us"] if ok else eager
        r["vs_compile"] = round(comp / mine, 3) if comp and mine else None
        if r["vs_eager"]:
            vs_eager.append(r["vs_eager"])
        if r["vs_compile"]:
            vs_compile.append(r["vs_compile"])
        fast_eager += bool(ok and r["vs_eager"] and r["vs_eager"] > 1.0)
        fast_compile += bool(ok and r["vs_compile"] and r["vs_compile"] > 1.0)
    n = len(rows)
    return {
        "ops": n,
        "geomean_vs_eager": geomean(vs_eager),
        "geomean_vs_compile": geomean(vs_compile),
        # a share over ops that were not timed would be a guess: None without timing
        "fast_1_vs_eager": fast_eager / n if n and vs_eager else None,
        "fast_1_vs_compile": fast_compile / n if n and vs_compile else None,
        "correct": sum(bool(r.get("correct")) for r in rows),
    }


HEADER = (f"{'op':34} {'shape':24} {'dtype':8} {'eager us':>10} {'compile us':>10} {'okgit us':>10} "
          f"{'vs eager':>8} {'vs comp':>8} {'correct':>7} {'wall s':>6}")


def table(rows: list[dict], summary: dict, device: str, notes: list[str] = ()) -> str:
    head = HEADER
    out = [f"device: {device}", head, "-" * len(head)]
    for r in rows:
        if "error" in r or "not_run" in r:
            why = r.get("error") or ""
            out.append(f"{r['op']:34} " + (f"not run: {r['not_run']}" if "not_run" in r
                                           else f"error: {why.splitlines()[-1] if why.strip() else ''}"))
            continue
        fmt = lambda v, spec: format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-".rjust(int(spec.split(".")[0]))
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
    out += [f"note: {n}" for n in notes]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", help="glob of op files (default: examples/*.py; with --smoke tests/ops/relu.py)")
    ap.add_argument("--range", dest="span", metavar="A-B", help="only ops A..B (1-based) of the sorted glob")
    ap.add_argument("--jobs", type=int, default=3, help="ops in flight (GPU timing is serialized by a lock)")
    ap.add_argument("--iterations", type=int, help="candidates evaluated per op (default 8; 2 with --smoke)")
    ap.add_argument("--op-seconds", type=float, default=100.0, help="search time budget per op")
    ap.add_argument("--op-timeout", type=float, default=240.0, help="hard limit per op process")
    ap.add_argument("--time-limit", type=float, metavar="S", help="no op starts or runs past S seconds from now")
    ap.add_argument("--smoke", action="store_true", help="CPU + Triton interpreter, one tiny op, nothing timed")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.iterations is None:
        args.iterations = 2 if args.smoke else 8
    if args.one:
        import signal

        # the device call's `timeout` signals the whole group: exit through atexit, which closes the evaluator's workers
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
        print("ROW " + json.dumps(run_one(args.one, args.iterations, args.op_seconds, smoke=args.smoke)))
        return 0
    started = time.monotonic()
    deadline = started + args.time_limit if args.time_limit else None
    if args.smoke:
        device = "cpu (smoke: Triton interpreter, no timing)"
        print("smoke: skipped " + "; ".join(SMOKE_SKIPPED), flush=True)
    else:
        import torch

        if not torch.cuda.is_available():
            print("bench/offline.py needs a CUDA GPU (or --smoke for the CPU path)", file=sys.stderr)
            return 1
        device = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
        try:
            import triton

            device += f", triton {triton.__version__}"
        except ImportError:
            pass
    paths = sorted(glob.glob(args.ops or (SMOKE_OPS if args.smoke else str(ROOT / "examples" / "*.py"))))
    if args.span:
        a, _, b = args.span.partition("-")
        paths = paths[int(a) - 1: int(b or a)]
    if not paths:
        print(f"no op files match {args.ops}", file=sys.stderr)
        return 1
    print(f"device: {device}; {len(paths)} ops, --jobs {args.jobs}, --iterations {args.iterations}", flush=True)
    done: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(child, p, args, deadline): p for p in paths}
        for fut in as_completed(futures):
            done[futures[fut]] = row = fut.result()
            print("ROW " + json.dumps(row), flush=True)
            _write(device, [done[p] for p in paths if p in done], args, started, partial=True)
    rows = [done[p] for p in paths]
    summary = _write(device, rows, args, started, partial=False)
    notes = [f"not run (time limit): {', '.join(summary['not_run'])}"] if summary["not_run"] else []
    if args.smoke:
        notes.append("smoke run: no GPU figure; skipped " + "; ".join(SMOKE_SKIPPED))
    print(table(rows, summary, device, notes))
    print(f"total wall {summary['wall_s']:.0f} s")
    return 0


def _write(device: str, rows: list[dict], args, started: float, partial: bool) -> dict:
    good = [r for r in rows if "error" not in r and "not_run" not in r]
    summary = summarize(good)
    summary["failed_ops"] = [r["op"] for r in rows if "error" in r]
    summary["not_run"] = [r["op"] for r in rows if "not_run" in r]
    summary["wall_s"] = round(time.monotonic() - started, 1)
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        data = {"device": device, "smoke": args.smoke, "skipped": SMOKE_SKIPPED if args.smoke else [],
                "partial": partial, "settings": {"iterations": args.iterations, "op_seconds": args.op_seconds,
                                                 "jobs": args.jobs},
                "rows": rows, "summary": summary}
        tmp = Path(out) / "offline.json.tmp"
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(Path(out) / "offline.json")
    return summary


if __name__ == "__main__":
    sys.exit(main())
