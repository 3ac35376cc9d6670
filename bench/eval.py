"""Evaluator benchmark for the GPU machine: one call, one table.

For each example op (examples/**/*.py defining Model; tests/ops when there are none): wall time
of a fast and a thorough evaluation with a warm worker (median of --repeats; each timed
evaluation starts once the pool's pre-started workers are ready), the A/A ratio of
the baseline timed against itself in fresh processes, and the reference's time against the
roofline floor. The candidate of an op is `<stem>_triton.py` beside it when there is one, else
the op itself (rejected at backend_kernel, but every call and the timing still run).
Writes bench_eval.json under $OUT when set, after every op (a call cut short keeps its rows).

    python bench/eval.py [--ops DIR_OR_FILE ...] [--range 1-10] [--repeats 3] [--limit 20] [--time-limit 500]
    python bench/eval.py --smoke   # CPU, Triton interpreter, 2 tiny ops: no GPU figure, every time "-"

--smoke exercises every step but the GPU timing: the evaluator runs on the CPU (shapes scaled
down by the evaluator), the A/A rounds (CUDA events) are skipped, and no wall time of a CPU
evaluation is shown as if it were a GPU figure (the CPU walls stay in the JSON, cpu_*_s).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from okgit.errors import OkgitError  # noqa: E402
from okgit.eval.parent.local import LocalEvaluator  # noqa: E402
from okgit.problem import load_problem, top_level_names  # noqa: E402

SMOKE_OPS = [ROOT / "tests" / "ops" / "relu.py", ROOT / "examples" / "01_relu_bias_scale.py"]
SMOKE_SKIPPED = ["A/A timing rounds (CUDA events, GPU only)",
                 "reference time and roofline floor (the evaluator times nothing on a CPU)",
                 "evaluation walls as GPU figures (CPU walls kept as cpu_fast_s / cpu_thorough_s)",
                 "the warm-up evaluation before each mode (nothing is timed)"]


class _Stop(BaseException):  # not swallowed by an `except Exception`
    """SIGTERM (e.g. the device call's `timeout`): finish the table with the rows done."""


def is_op(path: Path) -> bool:
    try:
        return {"Model", "get_inputs", "get_init_inputs"} <= top_level_names(path.read_text(), str(path))
    except OkgitError:
        return False


def find_ops(ops: list[Path] | None) -> list[Path]:
    """Op files under the given files/folders (default: examples/, else tests/ops)."""
    if ops:
        found: list[Path] = []
        for p in ops:
            p = p.resolve()
            files = [p] if p.is_file() else sorted(p.rglob("*.py")) if p.is_dir() else []
            found += [f for f in files if not f.stem.endswith("_triton") and not f.name.startswith("_") and is_op(f)]
        return found
    for d in (ROOT / "examples", ROOT / "tests" / "ops"):
        found = [f for f in (sorted(d.rglob("*.py")) if d.is_dir() else [])
                 if not f.stem.endswith("_triton") and not f.name.startswith("_") and is_op(f)]
        if found:
            return found
    return []


def select(ops: list[Path], span: str | None, limit: int) -> list[Path]:
    """--range A-B (1-based, inclusive, over the sorted ops), then --limit."""
    if span:
        a, _, b = span.partition("-")
        lo, hi = int(a), int(b or a)
        ops = ops[lo - 1: hi]
    return ops[:limit]


def _rel(p: Path) -> str:
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


def bench_op(ev: LocalEvaluator, op: Path, args, smoke: bool) -> dict:
    cand = op.with_name(f"{op.stem}_triton.py")
    problem = load_problem(op, root=str(op.parent))
    source = cand.read_text() if cand.is_file() else problem.source
    row: dict = {"op": _rel(op), "candidate": cand.name if cand.is_file() else "(itself)"}
    t0 = time.monotonic()
    ref = ev.reference(problem)
    prep_s = time.monotonic() - t0
    row["reference_prepare_s"] = None if smoke else prep_s
    row["ref_us"] = ref.runtime_us  # None on a CPU: the evaluator times nothing there
    row["floor_us"] = ref.profile.floor_us if ref.profile else None
    row["degenerate"] = ref.degenerate
    if smoke:
        row["cpu_reference_prepare_s"] = round(prep_s, 2)
    for mode in ("fast", "thorough"):
        if not smoke:  # nothing is timed in a smoke run: its one evaluation needs no warm-up
            ev.evaluate(problem, source, mode=mode)  # warm: reference prepared, kernels compiled
        walls, last = [], None
        for _ in range(args.repeats):
            ev.wait_warm()  # "once workers are warm": a pre-started worker is ready, as in a steady search
            last = ev.evaluate(problem, source, mode=mode)
            walls.append(last.wall_s)
        row[f"{mode}_s"] = None if smoke else statistics.median(walls)
        if smoke:
            row[f"cpu_{mode}_s"] = round(statistics.median(walls), 2)
        row[f"{mode}_status"] = last.status.value + (f"@{last.error.gate}" if last.error else "")
        row[f"{mode}_us"] = last.runtime_us
        row[f"{mode}_speedup"] = last.speedup
        row[f"{mode}_breakdown_s"] = None if smoke else last.phase_s
    if smoke:
        row["aa_ratio"], row["aa_a_us"], row["aa_b_us"] = None, None, None  # skipped: GPU only
    else:
        prep = ev.prepared(problem)
        a, b = [], []
        ev.prestart_for(2 * args.aa_rounds)
        for _ in range(args.aa_rounds):
            a.append(ev.time_once(problem, prep, problem.source, "triton"))
            b.append(ev.time_once(problem, prep, problem.source, "triton"))
        row["aa_ratio"] = statistics.median(a) / statistics.median(b)
        row["aa_a_us"], row["aa_b_us"] = a, b
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=Path, nargs="+", help="op files or folders (default: examples/)")
    ap.add_argument("--range", dest="span", metavar="A-B", help="only ops A..B (1-based) of the sorted list")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=int, default=30)
    ap.add_argument("--aa-rounds", type=int, default=3)
    ap.add_argument("--time-limit", type=float, metavar="S",
                    help="start no op that would likely end past S seconds (rows so far are kept)")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU + Triton interpreter on 2 tiny ops: every step but the GPU timing")
    args = ap.parse_args()
    started = time.monotonic()
    if args.smoke:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # workers inherit it: nothing touches a GPU
        args.repeats = min(args.repeats, 1)
        ops = select(find_ops(args.ops) if args.ops else SMOKE_OPS, args.span, min(args.limit, 2))
        device = "cpu (smoke: Triton interpreter, no timing)"
    else:
        ops = select(find_ops(args.ops), args.span, args.limit)
        device = _device_facts()
    if not ops:
        print("no op files found", file=sys.stderr)
        return 1
    print(f"device: {device}; {len(ops)} ops", flush=True)
    if args.smoke:
        print("smoke: skipped " + "; ".join(SMOKE_SKIPPED), flush=True)

    def on_term(signum, frame):
        raise _Stop()

    signal.signal(signal.SIGTERM, on_term)
    try:
        ev = LocalEvaluator(device="cpu" if args.smoke else "cuda")
    except OkgitError as e:  # no GPU: say so in one line (or use --smoke)
        print(f"bench/eval.py: {e}", file=sys.stderr)
        return 1
    rows: list[dict] = []
    notes: list[str] = []
    op_times: list[float] = []
    try:
        for i, op in enumerate(ops):
            elapsed = time.monotonic() - started
            if args.time_limit and op_times and elapsed + max(op_times) > args.time_limit:
                notes.append(f"time limit {args.time_limit:.0f} s: stopped before {_rel(op)}, "
                             f"{len(ops) - i} op(s) not run")
                break
            t0 = time.monotonic()
            try:
                row = bench_op(ev, op, args, args.smoke)
            except _Stop:
                raise
            except Exception as e:  # noqa: BLE001 - one op's failure is its row, the table goes on
                row = {"op": _rel(op), "error": (str(e) if isinstance(e, OkgitError) else f"{type(e).__name__}: {e}")[:500]}
            op_times.append(time.monotonic() - t0)
            rows.append(row)
            print(json.dumps(row), flush=True)
            _write(rows, device, args.smoke, notes)
    except _Stop:
        notes.append(f"SIGTERM after {len(rows)} of {len(ops)} ops (the op in flight is not in the table)")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        ev.close()
    print(table(rows, device, args.smoke, notes))
    _write(rows, device, args.smoke, notes)
    return 0


def _device_facts() -> str:
    import torch

    if not torch.cuda.is_available():
        return f"no CUDA GPU (torch {torch.__version__})"
    import triton

    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}"


def summary(rows: list[dict]) -> dict:
    fast = [r["fast_s"] for r in rows if r.get("fast_s") is not None]
    thor = [r["thorough_s"] for r in rows if r.get("thorough_s") is not None]
    aa = [r["aa_ratio"] for r in rows if r.get("aa_ratio") is not None]
    return {
        "ops": len(rows),
        "errors": sum("error" in r for r in rows),
        "median_fast_s": statistics.median(fast) if fast else None,
        "median_thorough_s": statistics.median(thor) if thor else None,
        "aa_within_1pct": sum(abs(x - 1) <= 0.01 for x in aa) if aa else None,
        "aa_rows": len(aa),
    }


def _write(rows: list[dict], device: str, smoke: bool, notes: list[str]) -> None:
    out = os.environ.get("OUT")
    if not out:
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    data = {"device": device, "smoke": smoke, "skipped": SMOKE_SKIPPED if smoke else [], "notes": notes,
            "rows": rows, "summary": summary(rows)}
    tmp = Path(out, "bench_eval.json.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(Path(out, "bench_eval.json"))


HEADER = f"{'op':40} {'fast s':>7} {'thor s':>7} {'A/A':>6} {'ref us':>9} {'floor us':>9} {'ref/floor':>9}  status"


def table(rows: list[dict], device: str, smoke: bool, notes: list[str]) -> str:
    def f(v, fmt):  # "-" where nothing was measured, in the column's width
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return format(v, fmt)
        return "-".rjust(int(fmt.split(".")[0] or 0))

    out = [f"\ndevice: {device}", HEADER]
    for r in rows:
        ratio = r["ref_us"] / r["floor_us"] if r.get("ref_us") and r.get("floor_us") else None
        out.append(f"{r['op'][-40:]:40} {f(r.get('fast_s'), '7.2f')} {f(r.get('thorough_s'), '7.2f')} "
                   f"{f(r.get('aa_ratio'), '6.3f')} {f(r.get('ref_us'), '9.2f')} {f(r.get('floor_us'), '9.2f')} "
                   f"{f(ratio, '9.2f')}  {(r.get('fast_status') or 'error: ' + r.get('error', ''))[:60]}")
    s = summary(rows)
    if s["median_fast_s"] is not None:
        out.append(f"\nmedian fast {s['median_fast_s']:.2f} s, thorough {f(s['median_thorough_s'], '.2f')} s; "
                   f"A/A within 1%: {s['aa_within_1pct'] or 0}/{s['aa_rows']}")
    if smoke:
        out.append("\nsmoke run: no GPU figure; skipped " + "; ".join(SMOKE_SKIPPED))
    out += [f"note: {n}" for n in notes]
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
