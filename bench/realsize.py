"""The evaluator at the field's real sizes: every KernelBench problem of the development set.

Per problem, at its default (upstream) size, no model: the largest case's bytes (inputs +
outputs), the reference's preparation wall (fast and thorough), a warm fast and a warm
thorough evaluation of the reference as its own candidate (it launches no Triton kernel, so it
ends `rejected` at backend_kernel, but every call, every check in the judge and the timing
run), the peak host memory (VmHWM) of each okgit process (the parent, the judge, the
candidate's workers) and their peak device memory, and the same problem through a minimal
KernelBench-style evaluation in a fresh process (5 allclose trials on the GPU, 100 timed
calls) for the ratio. Each problem runs in a subprocess of its own, so a problem that takes the
machine down takes only its row.

    python bench/realsize.py --kb DIR [--level 1 2] [--problems A-B] [--resume FILE] [--time-limit S]
    python bench/realsize.py --smoke   # CPU: two small problems, no GPU figure (every time "-")

Rows land in $OUT/realsize.json after every problem; --resume skips problems already there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GiB = 2**30

MINIMAL = r'''
import importlib.util, json, resource, sys, time
import torch
t0 = time.monotonic()
spec = importlib.util.spec_from_file_location("m", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
torch.manual_seed(0)
init = m.get_init_inputs()
torch.manual_seed(1); ref = m.Model(*init).cuda()
torch.manual_seed(1); new = m.Model(*init).cuda()
with torch.no_grad():
    for trial in range(5):
        torch.manual_seed(trial)
        with torch.device("cuda"):
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in m.get_inputs()]
        a, b = ref(*inputs), new(*inputs)
        assert torch.allclose(a, b, atol=1e-2, rtol=1e-2, equal_nan=True)
        del a, b
    times = []
    for _ in range(100):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); new(*inputs); e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"wall_s": time.monotonic() - t0, "host_peak": peak, "median_ms": sorted(times)[50],
                  "device_peak": torch.cuda.max_memory_allocated()}))
'''

ONE = r'''
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from okgit.eval.parent.local import LocalEvaluator
from okgit.problem import load_problem
path, device = sys.argv[1], sys.argv[2]
problem = load_problem(path, root=str(__import__("pathlib").Path(path).parent))
row = {}
ev = LocalEvaluator(device=device)
try:
    for mode in ("fast", "thorough"):
        t0 = time.monotonic()
        prep = ev.prepared(problem)  # one preparation serves both modes: the second is a cache hit
        row[f"prepare_{mode}_s"] = time.monotonic() - t0
        row["case_bytes"] = prep.case_bytes
        row["judge_host_peak"] = max(row.get("judge_host_peak", 0), prep.judge.peak_rss())
        ev.wait_warm(300)
        t0 = time.monotonic()
        result = ev.evaluate(problem, problem.source, mode=mode, backend="triton")
        row[f"{mode}_s"] = time.monotonic() - t0
        row[f"{mode}_status"] = result.status.value
        row[f"{mode}_gate"] = result.error.gate if result.error else None
        row[f"{mode}_message"] = (result.error.message.splitlines() or [""])[0][:200] if result.error else ""
        row["judge_host_peak"] = max(row["judge_host_peak"], prep.judge.peak_rss())
        row[f"{mode}_phases"] = result.phase_s
finally:
    ev.close()
row["parent_host_peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
row["worker_host_peak"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print("ROW " + json.dumps(row))
'''


def problems(kb: Path, levels: list[int], ranges: str | None) -> list[Path]:
    from okgit.kernelbench.reader import parse_ids

    wanted = parse_ids(ranges)
    out = []
    for level in levels:
        for path in sorted((kb / "KernelBench" / f"level{level}").glob("*.py"), key=lambda p: int(p.name.split("_")[0])):
            if wanted is None or int(path.name.split("_")[0]) in wanted:
                out.append(path)
    return out


def run_one(path: Path, device: str, limit_s: float) -> dict:
    row: dict = {"problem": f"level{path.parent.name[-1]}/{path.stem}"}
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    try:
        done = subprocess.run([sys.executable, "-c", ONE, str(path), device, str(ROOT)], capture_output=True,
                              text=True, timeout=limit_s, env=env)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("ROW ")]
        if lines:
            row.update(json.loads(lines[-1][4:]))
        else:
            tail = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
            row["error"] = (tail[-1] if tail else f"exit {done.returncode}")[:300]
    except subprocess.TimeoutExpired:
        row["error"] = f"over the bench's {limit_s:.0f} s per problem"
    if device == "cuda":
        try:
            done = subprocess.run([sys.executable, "-c", MINIMAL, str(path)], capture_output=True, text=True,
                                  timeout=limit_s, env=env)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            row["minimal"] = json.loads(lines[-1]) if lines else {"error": (done.stderr.splitlines() or ["?"])[-1][:200]}
        except subprocess.TimeoutExpired:
            row["minimal"] = {"error": "timed out"}
    return row


def table(rows: list[dict], gpu: bool) -> str:
    def s(x: float | None) -> str:
        return "-" if x is None or not gpu else f"{x:.1f}"

    def g(x: float | None) -> str:
        return "-" if not x else f"{x / GiB:.1f}"

    head = ("| problem | case GiB | prepare fast s | fast s | thorough s | minimal s | fast / minimal | "
            "host peak GiB (parent/judge/worker) | fast status |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        m = r.get("minimal") or {}
        ratio = (f"{r['fast_s'] / m['wall_s']:.1f}" if gpu and r.get("fast_s") and m.get("wall_s") else "-")
        status = r.get("error") or f"{r.get('fast_status')} ({r.get('fast_gate')})"
        lines.append(f"| {r['problem']} | {g(r.get('case_bytes'))} | {s(r.get('prepare_fast_s'))} | {s(r.get('fast_s'))} "
                     f"| {s(r.get('thorough_s'))} | {s(m.get('wall_s'))} | {ratio} | {g(r.get('parent_host_peak'))}/"
                     f"{g(r.get('judge_host_peak'))}/{g(r.get('worker_host_peak'))} | {status} |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    """Medians per level, the worst ratios against the done-when figures."""
    import statistics

    out = []
    for level in sorted({r["problem"].split("/")[0] for r in rows}):
        done = [r for r in rows if r["problem"].startswith(level + "/") and "fast_s" in r]
        if not done:
            continue
        fast = statistics.median(r["fast_s"] for r in done)
        worst = max(r["thorough_s"] / r["fast_s"] for r in done)
        peak = max(max(r["judge_host_peak"], r["worker_host_peak"], r["parent_host_peak"]) for r in done)
        prep = statistics.median(r["prepare_fast_s"] for r in done)
        out.append(f"{level}: {len(done)} problems, median warm fast {fast:.1f} s, thorough at most {worst:.2f}x its "
                   f"fast, median reference preparation {prep:.1f} s, largest process peak {peak / GiB:.2f} GiB, "
                   f"{sum('error' in r for r in rows if r['problem'].startswith(level + '/'))} errors")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kb", type=Path, default=ROOT.parent / "shared" / "kernelbench")
    parser.add_argument("--level", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--problems")
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--time-limit", type=float, default=540.0, help="stop starting problems after this")
    parser.add_argument("--per-problem", type=float, default=240.0)
    parser.add_argument("--smoke", action="store_true", help="CPU, two small problems, no GPU figures")
    parser.add_argument("--table", type=Path, nargs="+", help="print the table of these result files and stop")
    args = parser.parse_args()
    if args.table:
        rows = [r for path in args.table for r in json.loads(path.read_text())]
        print(table(rows, gpu=True))
        print(summary(rows))
        return
    out = Path(os.environ.get("OUT", "/tmp")) / "realsize.json"
    rows = json.loads(args.resume.read_text()) if args.resume and args.resume.exists() else []
    done = {r["problem"] for r in rows if "error" not in r}
    rows = [r for r in rows if r["problem"] in done]
    device = "cpu" if args.smoke else "cuda"
    paths = problems(args.kb, [1] if args.smoke else args.level, "21,30" if args.smoke else args.problems)
    t_start = time.monotonic()
    for path in paths:
        name = f"level{path.parent.name[-1]}/{path.stem}"
        if name in done:
            continue
        if time.monotonic() - t_start > args.time_limit:
            print(f"time limit: {name} and later not started", flush=True)
            break
        row = run_one(path, device, args.per_problem)
        rows.append(row)
        print(json.dumps(row), flush=True)
        out.write_text(json.dumps(rows, indent=1))
    print(table(rows, gpu=not args.smoke))


if __name__ == "__main__":
    main()
