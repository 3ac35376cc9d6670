"""What a profiling pass's Nsight Compute replays cost, by group of okgit's metrics (issue 32 and
the sweep's pace, issue 31; GPU with ncu).

On the H200's sweep on 8deb49a (2026-12-04) the profiling passes held the device alone for 444 of
the 1363 s it was held alone, 4.6 s per pass (median, 80 passes, up to 24.8 s): ncu replays each
profiled kernel once per pass its metrics need, restoring the memory the kernel writes before each
replay (`--replay-mode kernel`), and okgit's list (okgit.eval.parent.ncu.METRICS) asks for 18 warp
stall reasons besides the throughputs, occupancy and L2 hits. This runs one kernel under ncu with
okgit's own command line (okgit.eval.parent.ncu.command) and each group of that list alone, and
reads from ncu's log how many passes each needed and how long the profiled call took:

- `all`: okgit's METRICS, as a pass asks today;
- `no-stalls`: without the 18 stall ratios;
- `stalls`: the stall ratios alone;
- `sol`: time, DRAM bytes and the throughputs (speed of light) alone;
- `launch`: the launch and occupancy metrics alone (read from the launch, no replay expected).

Kernels: `copy` (a memory-bound elementwise kernel over --gib GiB in and out, the size that makes
the restores dear) and `gemm` (a 4096^3 fp32 matmul, compute-bound). Also saves ncu's list of the
device's PC-sampling stall metrics (`ncu --query-metrics`), which could give every stall reason in
one sampling pass instead.

    python bench/ncu_passes.py [--gib 4] [--kernels copy,gemm] [--groups all,no-stalls,stalls,sol,launch]

Prints one row per kernel and group; writes ncu_passes.json and the raw logs under $OUT
(default /tmp/out). --smoke (a CPU) checks the groups and the log parser on a canned log only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from okgit.eval.parent import ncu  # noqa: E402

STALLS = tuple(m for m in ncu.METRICS if ncu.STALL.match(m))
SOL = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
       "dram__throughput.avg.pct_of_peak_sustained_elapsed",
       "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
       "sm__throughput.avg.pct_of_peak_sustained_elapsed")
LAUNCH = tuple(m for m in ncu.METRICS if m.startswith("launch__"))
GROUPS = {
    "all": ncu.METRICS,
    "no-stalls": tuple(m for m in ncu.METRICS if m not in STALLS),
    "stalls": STALLS,
    "sol": SOL,
    "launch": LAUNCH,
}
PASSES = re.compile(r'==PROF== Profiling "([^"]+)".*?(\d+) pass(?:es)?')

CHILD = r'''
import sys, time, torch
kernel, gib = sys.argv[1], float(sys.argv[2])
if kernel == "copy":
    n = int(gib * (1 << 30) // 4)
    x, y = torch.rand(n, device="cuda"), torch.empty(n, device="cuda")
    def call(): torch.mul(x, 2.0, out=y)
else:
    a, b = torch.rand(4096, 4096, device="cuda"), torch.rand(4096, 4096, device="cuda")
    def call(): torch.mm(a, b)
for _ in range(2):
    call()
torch.cuda.synchronize()
t0 = time.monotonic()
torch.cuda.profiler.start()
call()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print(f"PROFILED_S {time.monotonic() - t0:.3f}", flush=True)
'''


def parse(log: str) -> dict:
    """Passes per profiled kernel from ncu's `==PROF== Profiling "NAME" - N: 0%...100% - P passes` lines."""
    return {"kernels": [{"name": name, "passes": int(p)} for name, p in PASSES.findall(log)]}


def one(ncu_path: str, kernel: str, group: str, gib: float, out: Path) -> dict:
    log = out / f"{kernel}-{group}.log"
    cmd = ncu.command(ncu_path, log)
    cmd[cmd.index("--metrics") + 1] = ",".join(GROUPS[group])
    t0 = time.monotonic()
    proc = subprocess.run([*cmd, sys.executable, "-c", CHILD, kernel, str(gib)], capture_output=True, text=True,
                          timeout=300)
    row = {"kernel": kernel, "group": group, "metrics": len(GROUPS[group]), "wall_s": round(time.monotonic() - t0, 2),
           "rc": proc.returncode}
    text = log.read_text(errors="replace") if log.exists() else ""
    row.update(parse(text + proc.stdout + proc.stderr))
    found = re.search(r"PROFILED_S ([\d.]+)", proc.stdout)
    row["profiled_s"] = float(found.group(1)) if found else None
    refused = ncu.refusal(text)
    if refused or proc.returncode:
        row["error"] = refused or (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return row


def smoke() -> int:
    canned = ('==PROF== Connected to process 123\n'
              '==PROF== Profiling "vectorized_elementwise_kernel" - 0: 0%....50%....100% - 9 passes\n'
              '==PROF== Profiling "ampere_sgemm_128x64_nn" - 1: 0%....50%....100% - 1 pass\n')
    assert parse(canned)["kernels"] == [{"name": "vectorized_elementwise_kernel", "passes": 9},
                                        {"name": "ampere_sgemm_128x64_nn", "passes": 1}]
    assert len(STALLS) == len(ncu.STALL_REASONS) and set(SOL) <= set(ncu.METRICS) and LAUNCH
    assert set(GROUPS["no-stalls"]) | set(STALLS) == set(ncu.METRICS)
    print(f"smoke: groups {', '.join(f'{g} ({len(m)} metrics)' for g, m in GROUPS.items())}; parser ok")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--kernels", default="copy,gemm")
    parser.add_argument("--groups", default=",".join(GROUPS))
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        return smoke()
    ncu_path = ncu.find()
    if ncu_path is None:
        print("no ncu on this machine")
        return 1
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    raw = Path(tempfile.mkdtemp(prefix="ncu-passes-", dir=out))
    query = subprocess.run([ncu_path, "--query-metrics", "--chip", "gh100"], capture_output=True, text=True, timeout=120)
    (raw / "query-metrics.txt").write_text(query.stdout + query.stderr)
    pcsamp = [line.split()[0] for line in query.stdout.splitlines() if "pcsamp" in line and "stall" in line]
    rows = []
    print("| kernel | group | metrics | passes per kernel | profiled call s | ncu wall s | error |")
    print("|---|---|---|---|---|---|---|")
    for kernel in args.kernels.split(","):
        for group in args.groups.split(","):
            row = one(ncu_path, kernel, group, args.gib, raw)
            rows.append(row)
            passes = ", ".join(f"{k['name'][:28]}: {k['passes']}" for k in row["kernels"]) or "-"
            print(f"| {kernel} | {group} | {row['metrics']} | {passes} | {row['profiled_s']} | {row['wall_s']} |"
                  f" {row.get('error', '')} |", flush=True)
            (out / "ncu_passes.json").write_text(json.dumps({"rows": rows, "pcsamp_stall_metrics": pcsamp}, indent=1))
    print(f"PC-sampling stall metrics ncu lists for gh100: {len(pcsamp)} ({', '.join(pcsamp[:6])}{' ...' if len(pcsamp) > 6 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
