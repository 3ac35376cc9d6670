"""Nsight Compute (`ncu`) for the profiling pass: where it is, the command that wraps a candidate's
worker process in it, and its CSV read back into counters per kernel.

The worker runs under `ncu --profile-from-start off`: nothing is profiled until the worker calls
cudaProfilerStart around one call of the model (okgit.eval.worker.counters), each of that call's
kernels (at most LAUNCH_LIMIT) is replayed to read the METRICS, and ncu writes one CSV row per
kernel and metric to a log file in a directory of the parent's, outside the worker's.
`--clock-control none` leaves the GPU's clocks as they are (the timing runs at them too);
`--cache-control all` flushes the caches before each replay, as the timer flushes L2 before each
sample. Every value is parsed defensively, and nothing here decides a verdict.
"""

from __future__ import annotations

import csv
import glob
import io
import re
import shutil
from pathlib import Path
from typing import Any

LOG_FILE = "ncu.csv"
LAUNCH_LIMIT = 32  # kernels profiled per pass: a call's launches, bounded
STALL = re.compile(r"^smsp__average_warps_issue_stalled_([a-z_]+)_per_issue_active\.ratio$")
# the warp states of Nsight Compute's Warp State Statistics (its Kernel Profiling Guide names them),
# each as cycles per issued instruction; named one by one: a metric ncu does not know stops the profile
STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle", "long_scoreboard",
                 "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction", "not_selected", "selected",
                 "short_scoreboard", "sleeping", "tex_throttle", "wait")
METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum", "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps", "launch__occupancy_limit_blocks",
    "launch__registers_per_thread", "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
    "launch__block_size", "launch__grid_size", "launch__waves_per_multiprocessor",
    "lts__t_sector_hit_rate.pct",
    *(f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio" for reason in STALL_REASONS),
)
# ncu's limit metrics -> okgit's limiter names (okgit.eval.types.Limiter), in the order ties are named
LIMITS = {"launch__occupancy_limit_registers": "registers", "launch__occupancy_limit_shared_mem": "shared_memory",
          "launch__occupancy_limit_warps": "warps", "launch__occupancy_limit_blocks": "blocks"}
NOT_PERMITTED = "ERR_NVGPUCTRPERM"  # the driver lets only administrators read the counters
_TIME_UNITS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
               "second": 1.0, "s": 1.0}
_BYTE_UNITS = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "kibyte": 2.0**10, "mibyte": 2.0**20, "gibyte": 2.0**30}


def find() -> str | None:
    """ncu's path: on PATH, else in a CUDA toolkit's usual place."""
    found = shutil.which("ncu")
    if found:
        return found
    known = sorted(glob.glob("/usr/local/cuda*/bin/ncu") + glob.glob("/opt/nvidia/nsight-compute/*/ncu"))
    return known[-1] if known else None


def command(ncu: str, log_file: Path) -> list[str]:
    """The prefix that runs a worker under ncu (the worker's own command line follows it)."""
    return [ncu, "--profile-from-start", "off", "--clock-control", "none", "--cache-control", "all",
            "--replay-mode", "kernel", "--target-processes", "application-only", "--launch-count", str(LAUNCH_LIMIT),
            "--print-units", "base", "--csv", "--log-file", str(log_file), "--metrics", ",".join(METRICS)]


def refusal(text: str) -> str | None:
    """Why ncu read no counters, from its log: not permitted, or its own error line."""
    if NOT_PERMITTED in text:
        return ("not permitted: the driver lets only administrators read GPU performance counters "
                f"({NOT_PERMITTED}; NVreg_RestrictProfilingToAdminUsers=0 allows everyone)")
    errors = [line.strip() for line in text.splitlines() if line.startswith("==ERROR==")]
    return errors[0][:300] if errors else None


def launches(text: str) -> list[dict[str, Any]]:
    """One dict per profiled launch, in launch order: name, block, grid and metric -> (value, unit).
    The rows ncu writes (one per launch and metric, after a header naming the columns) among its
    `==PROF==` lines."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if not lines:
        return []
    out: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        launch_id, name, metric = row.get("ID"), row.get("Kernel Name"), row.get("Metric Name")
        if not launch_id or not name or not metric:
            continue
        launch = out.setdefault(launch_id, {"name": name, "block": row.get("Block Size", ""),
                                            "grid": row.get("Grid Size", ""), "metrics": {}})
        value = number(row.get("Metric Value", ""))
        if value is not None:
            launch["metrics"][metric] = (value, (row.get("Metric Unit") or "").strip().lower())
    return list(out.values())


def number(text: str) -> float | None:
    """ncu's numbers: thousands grouped with commas in its default locale; "n/a" is no number."""
    text = (text or "").strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def counters(launch: dict[str, Any]) -> dict[str, Any]:
    """One launch's counters, in okgit's units (seconds, bytes, fractions): the fields of
    okgit.eval.types.KernelTime, and `memory_utilization` (the busiest memory unit, DRAM or cache)."""
    m = launch["metrics"]

    def get(name: str, scale: dict[str, float] | None = None) -> float | None:
        if name not in m:
            return None
        value, unit = m[name]
        return value * scale.get(unit, 1.0) if scale else value

    def fraction(name: str) -> float | None:
        value = get(name)
        return None if value is None else max(0.0, min(1.0, value / 100))

    seconds = get("gpu__time_duration.sum", _TIME_UNITS)
    read, written = get("dram__bytes_read.sum", _BYTE_UNITS), get("dram__bytes_write.sum", _BYTE_UNITS)
    dram = read + written if read is not None and written is not None else None
    limits = {LIMITS[k]: v for k, (v, _) in m.items() if k in LIMITS}
    static, dynamic = get("launch__shared_mem_per_block_static", _BYTE_UNITS), get("launch__shared_mem_per_block_dynamic", _BYTE_UNITS)
    stalls = {STALL.match(k).group(1): v for k, (v, _) in m.items() if STALL.match(k)}  # type: ignore[union-attr]
    return {
        "time_s": seconds,
        "dram_bytes": dram,
        "bandwidth": dram / seconds if dram is not None and seconds else None,
        "bandwidth_utilization": fraction("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "memory_utilization": fraction("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
        "compute_utilization": fraction("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "occupancy": fraction("sm__warps_active.avg.pct_of_peak_sustained_active"),
        "occupancy_theoretical": fraction("sm__maximum_warps_per_active_cycle_pct"),
        "occupancy_limiter": min(limits, key=lambda k: limits[k]) if limits else None,
        "l2_hit_rate": fraction("lts__t_sector_hit_rate.pct"),
        "registers": _int(get("launch__registers_per_thread")),
        "shared_bytes": _int(static + dynamic) if static is not None and dynamic is not None else None,
        "waves": get("launch__waves_per_multiprocessor"),
        "block": _dims(launch.get("block", "")),
        "grid": _dims(launch.get("grid", "")),
        "stalls": stall_shares(stalls),
    }


def stall_shares(values: dict[str, float]) -> list[tuple[str, float]]:
    """Stall reasons as shares of the stalled time, largest first; `selected` (the warp issued)
    and `not_issued` variants are not stalls."""
    stalls = {k: v for k, v in values.items() if k != "selected" and not k.endswith("not_issued") and v > 0}
    total = sum(stalls.values())
    return sorted(((k, v / total) for k, v in stalls.items()), key=lambda kv: -kv[1]) if total > 0 else []


def _int(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _dims(text: str) -> list[int] | None:
    parts = re.findall(r"\d+", text or "")
    return [int(p) for p in parts] if len(parts) == 3 else None
