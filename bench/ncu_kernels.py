"""Where a candidate's kernels and torch.compile's differ, read by Nsight Compute (GPU with ncu).

    python3 bench/ncu_kernels.py --kb .kb --problem 2:91 --origin "template:vendor_conv_cl+columns"
                                 [--arms okgit,compile] [--kernels REGEX]

For one development problem at its real size: okgit's template candidate (`--origin`, rendered as
`okgit optimize` renders it on a GPU) and torch.compile's default mode, each run in its own
process under ncu (`--clock-control none`: the clocks the timings see), after warm-up calls, one
profiled call (the profiler range: no warm-up, no autotuning kernel is read). Per kernel: its
duration, DRAM and SM throughput (% of peak), achieved occupancy against the theoretical one,
registers a thread, block and grid sizes, L1 and L2 hit rates, DRAM bytes. The figures say what a
kernel spends its time on; bench/conv.py and bench/judge.py say how fast.
Prints a table; writes ncu_kernels.json and ncu's raw CSV under $OUT (default /tmp/out).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

METRICS = {  # what the table shows: ncu's metric name -> column
    "gpu__time_duration.sum": "us",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM %",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM %",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy %",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical %",
    "launch__registers_per_thread": "regs",
    "launch__block_size": "block",
    "launch__grid_size": "grid",
    "l1tex__t_sector_hit_rate.pct": "L1 hit %",
    "lts__t_sector_hit_rate.pct": "L2 hit %",
    "dram__bytes.sum": "DRAM bytes",
}
WARM_CALLS = 3


def inner(args: argparse.Namespace) -> int:
    """One arm in this process: warm-up calls, then one call inside the profiler's range."""
    import torch
    from gemm import build

    path = Path(args.source)
    module = types.ModuleType("arm")
    module.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    model, inputs = build(module, "cuda")
    call = torch.compile(model) if args.inner == "compile" else model
    with torch.no_grad():
        for _ in range(WARM_CALLS):
            call(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        call(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    return 0


def profile(arm: str, source: Path, kernels: str, out: Path) -> list[dict]:
    """The arm under ncu: one row per kernel of the profiled call."""
    ncu = os.environ.get("NCU", "ncu")
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
           "--metrics", ",".join(METRICS)]
    if kernels:
        cmd += ["--kernel-name", f"regex:{kernels}"]
    cmd += [sys.executable, __file__, "--inner", arm, "--source", str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    (out / f"ncu_{arm}.csv").write_text(done.stdout)
    (out / f"ncu_{arm}.log").write_text(done.stderr)
    table = rows_of(done.stdout, arm)
    if not table:
        table.append({"arm": arm, "kernel": f"no kernel read (ncu exit {done.returncode}): "
                                            f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}"})
    return table


def rows_of(stdout: str, arm: str) -> list[dict]:
    """ncu's raw CSV page (after its own log lines, a header, a units row, one row a kernel) as
    one row of the table's columns per kernel."""
    text = stdout[stdout.find('"ID"'):] if '"ID"' in stdout else ""
    rows = [r for r in csv.DictReader(io.StringIO(text)) if re.fullmatch(r"\d+", r.get("ID") or "")]
    return [{"arm": arm, "kernel": (r.get("Kernel Name") or "")[:60], **{c: r.get(m, "") for m, c in METRICS.items()}}
            for r in rows]


def number(v: str) -> str:
    try:
        x = float(v.replace(",", ""))
    except (AttributeError, ValueError):
        return v or "-"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path, default=ROOT / ".kb")
    parser.add_argument("--problem", default="2:91", help="LEVEL:ID")
    parser.add_argument("--origin", default="", help="okgit's candidate (default: the first template candidate)")
    parser.add_argument("--arms", default="okgit,compile")
    parser.add_argument("--kernels", default="", help="only kernels whose name matches this regex")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return inner(args)
    from gemm import check_machine, problem_files, render

    args.smoke = False
    refused = check_machine(args, need_kb=True)
    if refused is not None:
        return refused
    found = problem_files(args.kb, args.problem)
    if not found:
        return 2
    key, path = found[0]
    out = Path(os.environ.get("OUT") or "/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for arm in args.arms.split(","):
            source = path
            if arm == "okgit":
                candidates = dict(render(str(path), "cuda")["candidates"])
                origin = args.origin or next(iter(candidates), "")
                if origin not in candidates:
                    print(f"{key}: no candidate {origin!r} (offered: {', '.join(candidates)})", file=sys.stderr)
                    return 2
                source = Path(tmp) / "candidate.py"
                source.write_text(candidates[origin])
            rows += profile(arm, source, args.kernels, out)
    (out / "ncu_kernels.json").write_text(json.dumps({"problem": key, "origin": args.origin, "rows": rows}, indent=1) + "\n")
    columns = ["arm", "kernel", *METRICS.values()]
    print(f"{key} {args.origin}: one call each under ncu (--clock-control none)")
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(number(r.get(c, "")) if c not in ("arm", "kernel") else r.get(c, "") for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
