"""Kernels by time from torch.profiler (worker side, GPU), and ProfileData (parent side).

A kernel is the candidate's own ("custom") when its name is one the backend launched: a Triton
kernel's function name, or a `__global__` function of the candidate's CUDA sources. Everything
else (cuBLAS, cuDNN, ATen elementwise kernels) is library work.
"""

from __future__ import annotations

from typing import Any, Callable

from okgit.eval.types import KernelTime, ProfileData


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


def profile_data(kernels: dict[str, dict[str, float]], custom_names: set[str], *, launch_count: int | None,
                 flops: float | None, min_bytes: float | None, roofline: dict[str, Any] | None,
                 raw: dict[str, Any] | None = None) -> ProfileData:
    top = sorted(
        (KernelTime(name=name, time_us=v["time_us"], calls=int(v["calls"]), custom=_is_custom(name, custom_names))
         for name, v in kernels.items()),
        key=lambda k: -k.time_us,
    )
    fields = dict(roofline or {})
    total = sum(k.time_us for k in top)
    custom = sum(k.time_us for k in top if k.custom)
    extra = {"kernel_time_us": total, "custom_kernel_time_us": custom} if top else {}
    return ProfileData(
        flops=flops, min_bytes=min_bytes, launch_count=launch_count, top_kernels=top[:10],
        raw={**extra, **(raw or {})}, **fields,
    )


def _is_custom(kernel: str, names: set[str]) -> bool:
    # Triton names its kernels after the function (with suffixes); CUDA names may be mangled.
    return any(n and n in kernel for n in names)
