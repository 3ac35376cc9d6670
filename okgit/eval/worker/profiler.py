"""Kernels by time from torch.profiler, in a worker process on a GPU (the parent reads them into
ProfileData: okgit.eval.parent.profile)."""

from __future__ import annotations

from typing import Any, Callable


def profile_calls(fn: Callable[[], Any], calls: int = 3) -> dict[str, Any]:
    """Device time per kernel name over `calls` calls, divided back to one call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels: dict[str, dict[str, float]] = {}
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
    return kernels
