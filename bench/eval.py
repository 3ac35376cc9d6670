"""Evaluator benchmark for the GPU machine: one call, one table.

For each example op (examples/**/*.py defining Model; tests/ops when there are none): wall time
of a fast and a thorough evaluation with a warm worker (median of --repeats), the A/A ratio of
the baseline timed against itself in fresh processes, and the reference's time against the
roofline floor. The candidate of an op is `<stem>_triton.py` beside it when there is one, else
the op itself (rejected at backend_kernel, but every call and the timing still run).
Writes bench_eval.json under $OUT when set.

    python bench/eval.py [--ops DIR] [--repeats 3] [--limit 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from okgit.errors import OkgitError  # noqa: E402
from okgit.eval.local import LocalEvaluator  # noqa: E402
from okgit.problem import load_problem, top_level_names  # noqa: E402


def find_ops(ops_dir: Path | None) -> list[Path]:
    dirs = [ops_dir] if ops_dir else [ROOT / "examples", ROOT / "tests" / "ops"]
    for d in dirs:
        found = []
        for path in sorted(d.rglob("*.py")) if d.is_dir() else []:
            if path.stem.endswith("_triton") or path.name.startswith("_"):
                continue
            try:
                if {"Model", "get_inputs", "get_init_inputs"} <= top_level_names(path.read_text(), str(path)):
                    found.append(path)
            except OkgitError:
                continue
        if found:
            return found
    return []


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--aa-rounds", type=int, default=3)
    args = ap.parse_args()
    ev = LocalEvaluator(device="cuda")
    rows = []
    for op in find_ops(args.ops)[: args.limit]:
        cand = op.with_name(f"{op.stem}_triton.py")
        problem = load_problem(op, root=str(op.parent))
        source = cand.read_text() if cand.is_file() else problem.source
        row: dict = {"op": str(op.relative_to(ROOT)), "candidate": cand.name if cand.is_file() else "(itself)"}
        try:
            t0 = time.monotonic()
            ref = ev.reference(problem)
            row["reference_prepare_s"] = time.monotonic() - t0
            row["ref_us"] = ref.runtime_us
            row["floor_us"] = ref.profile.floor_us if ref.profile else None
            row["degenerate"] = ref.degenerate
            for mode in ("fast", "thorough"):
                ev.evaluate(problem, source, mode=mode)  # warm: reference prepared, kernels compiled
                walls, last = [], None
                for _ in range(args.repeats):
                    last = ev.evaluate(problem, source, mode=mode)
                    walls.append(last.wall_s)
                row[f"{mode}_s"] = statistics.median(walls)
                row[f"{mode}_status"] = last.status.value + (f"@{last.error.gate}" if last.error else "")
                row[f"{mode}_us"] = last.runtime_us
                row[f"{mode}_speedup"] = last.speedup
                row[f"{mode}_breakdown_s"] = last.profile.raw.get("eval_s") if last.profile else None
            prep = ev.prepared(problem)
            a, b = [], []
            for _ in range(args.aa_rounds):
                a.append(ev.time_once(problem, prep, problem.source, "triton"))
                b.append(ev.time_once(problem, prep, problem.source, "triton"))
            row["aa_ratio"] = statistics.median(a) / statistics.median(b)
            row["aa_a_us"], row["aa_b_us"] = a, b
        except OkgitError as e:
            row["error"] = str(e)[:500]
        rows.append(row)
        print(json.dumps(row), flush=True)
    ev.close()
    _table(rows)
    out = os.environ.get("OUT")
    if out:
        Path(out, "bench_eval.json").write_text(json.dumps(rows, indent=1))
    return 0


def _table(rows: list[dict]) -> None:
    def f(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    print(f"\n{'op':40} {'fast s':>7} {'thor s':>7} {'A/A':>6} {'ref us':>9} {'floor us':>9} {'ref/floor':>9}  status")
    for r in rows:
        ratio = r["ref_us"] / r["floor_us"] if r.get("ref_us") and r.get("floor_us") else None
        print(f"{r['op'][-40:]:40} {f(r.get('fast_s'), '7.2f')} {f(r.get('thorough_s'), '7.2f')} "
              f"{f(r.get('aa_ratio'), '6.3f')} {f(r.get('ref_us'), '9.2f')} {f(r.get('floor_us'), '9.2f')} "
              f"{f(ratio, '9.2f')}  {r.get('fast_status', r.get('error', ''))[:60]}")
    fast = [r["fast_s"] for r in rows if "fast_s" in r]
    thor = [r["thorough_s"] for r in rows if "thorough_s" in r]
    aa = [r["aa_ratio"] for r in rows if "aa_ratio" in r]
    if fast:
        print(f"\nmedian fast {statistics.median(fast):.2f} s, thorough {statistics.median(thor):.2f} s; "
              f"A/A within 1%: {sum(abs(x - 1) <= 0.01 for x in aa)}/{len(aa)}")


if __name__ == "__main__":
    raise SystemExit(main())
