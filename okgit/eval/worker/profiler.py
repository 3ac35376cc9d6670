"""Kernels by time from torch.profiler, in a worker process on a GPU, with each kernel's launch
(grid, block, registers per thread, shared memory per block: CUPTI's launch record, as the
profiler's trace holds it) and the occupancy that launch allows (okgit.eval.worker.occupancy).
The parent reads them into ProfileData (okgit.eval.parent.profile). This is the floor every timed
evaluation has; hardware counters come from a profiling pass apart (okgit.eval.worker.counters)."""

from __future__ import annotations

import json
import os
from typing import Any, Callable

TRACE_FILE = "okgit_kernels_trace.json"  # in the process's own directory, removed once read


def profile_calls(fn: Callable[[], Any], calls: int = 3) -> dict[str, Any]:
    """Device time per kernel name over `calls` calls, divided back to one call, and its launch."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels: dict[str, dict[str, Any]] = {}
    for evt in prof.events():
        if not str(getattr(evt, "device_type", "")).endswith("CUDA"):
            continue
        t: Any = getattr(evt, "device_time", None)
        if t is None:
            t = getattr(evt, "cuda_time", 0.0)
        k = kernels.setdefault(evt.name, {"time_us": 0.0, "calls": 0})
        k["time_us"] += float(t) / calls
        k["calls"] += 1
    for k in kernels.values():
        k["calls"] = max(1, round(k["calls"] / calls))
    try:
        prof.export_chrome_trace(TRACE_FILE)
        with open(TRACE_FILE) as f:
            trace = json.load(f)
    except (OSError, ValueError, RuntimeError):
        return kernels  # the times alone: a launch record is a nicety
    finally:
        if os.path.exists(TRACE_FILE):
            os.remove(TRACE_FILE)
    from okgit.eval.worker.occupancy import SmLimits

    add_launches(kernels, trace, SmLimits.of_device(torch.cuda.get_device_properties(torch.cuda.current_device())))
    return kernels


def add_launches(kernels: dict[str, dict[str, Any]], trace: dict[str, Any], limits: Any) -> None:
    """Each kernel's launch from a torch.profiler (Kineto) chrome trace, and its occupancy: the
    trace's kernel events carry CUPTI's record as `args` ("grid", "block", "registers per thread",
    "shared memory")."""
    from okgit.eval.worker.occupancy import occupancy

    for event in trace.get("traceEvents", []):
        if not isinstance(event, dict) or str(event.get("cat", "")).lower() != "kernel":
            continue
        k = kernels.get(str(event.get("name")))
        args = event.get("args") or {}
        if k is None or "grid" in k or not isinstance(args, dict):
            continue
        grid, block = _dims(args.get("grid")), _dims(args.get("block"))
        registers, shared = _count(args.get("registers per thread")), _count(args.get("shared memory"))
        if grid is None or block is None:
            continue
        k.update(grid=grid, block=block, registers=registers, shared_bytes=shared)
        occ = occupancy(limits, block[0] * block[1] * block[2], registers or 0, shared or 0,
                        blocks=grid[0] * grid[1] * grid[2])
        if occ is not None:
            k.update(occupancy_theoretical=occ.theoretical, occupancy_limiter=occ.limiter, waves=occ.waves)


def _dims(value: Any) -> list[int] | None:
    if isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) and v > 0 for v in value):
        return value
    return None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None
