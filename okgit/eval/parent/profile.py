"""ProfileData from what a worker's profiler recorded (okgit.eval.worker.profiler), in the parent.

A kernel is the candidate's own ("custom") when its name is one the backend launched: a Triton
kernel's function name, or a `__global__` function of the candidate's CUDA sources. Everything
else (cuBLAS, cuDNN, ATen elementwise kernels) is library work.
"""

from __future__ import annotations

from typing import Any

from okgit.eval.types import KernelTime, ProfileData


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
