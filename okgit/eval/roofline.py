"""Device peaks (measured once per device name, cached) and the roofline floor of a problem.

Peaks are measured, not copied from datasheets: copy bandwidth (bytes read + written), read
bandwidth (a sum over a large buffer: reductions read faster than copies), and dense matmul
rates in fp32 with TF32 off, TF32, bf16 and fp16. The floor of a problem is
max(flops / the fastest rate its tolerance allows, min_bytes / the best bandwidth), a
split-precision rate (3xTF32: a third of the TF32 rate) counted where its accuracy is allowed; a measured
time well below it means the candidate did less work than the problem needs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from okgit.paths import data_dir

# Each way to run a matmul: the measured rate it runs at, its passes over the tensor cores and
# its unit roundoff, to decide which rates a tolerance allows. The split-precision ones (each
# operand split into a high part and remainders, several products accumulated in fp32) reach
# fp32 accuracy on tensor cores at a fraction of their rate.
PRECISIONS = {
    "fp32": ("fp32", 1, 2.0**-24), "tf32": ("tf32", 1, 2.0**-11), "fp16": ("fp16", 1, 2.0**-11),
    "bf16": ("bf16", 1, 2.0**-8), "tf32x3": ("tf32", 3, 2.0**-22), "bf16x3": ("bf16", 3, 2.0**-16),
    "bf16x6": ("bf16", 6, 2.0**-24),
}
PLAUSIBLE_FRACTION = 0.9  # a time below 0.9x the plausible floor is rejected
# A copy and a sum in torch reach less of the memory's bandwidth than a tuned kernel: on the
# H200's sweep on 9d7c409 (2026-12-05) they measured about 3.8 TB/s while L1/45's reference read
# at 4.18 TB/s by Nsight Compute and an honest pooling kernel moved the problem's bytes at 4.3
# TB/s, so a floor at the measured bandwidth rejected it. The plausibility floor assumes this much
# more bandwidth than measured (the H200's datasheet: 4.8 TB/s).
BANDWIDTH_HEADROOM = 1.25


def peaks_path(device_name: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in device_name)
    # v2: with compute capability, shared memory and registers per SM (measured again once)
    return data_dir() / "peaks" / f"{safe}.v2.json"


def load_peaks(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def measure_peaks(device: Any) -> dict[str, Any]:
    """Run on the GPU inside a worker. About a second on an H200."""
    import torch

    def best_ms(fn: Any, reps: int = 5) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]

    n = 2**28  # 1 GiB of fp32
    a = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    b = torch.empty_like(a)
    copy_bw = 2 * a.nbytes / (best_ms(lambda: b.copy_(a)) * 1e-3)
    read_bw = a.nbytes / (best_ms(lambda: a.sum()) * 1e-3)
    rates: dict[str, float] = {}
    size = 8192
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                              ("bf16", torch.bfloat16, False), ("fp16", torch.float16, False)):
        x = torch.randn(size, size, device=device, dtype=dtype)
        y = torch.randn(size, size, device=device, dtype=dtype)
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            rates[name] = 2 * size**3 / (best_ms(lambda: x @ y) * 1e-3)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
    torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(device)
    return {
        "device": props.name,
        "copy_bandwidth": copy_bw,
        "read_bandwidth": read_bw,
        "matmul": rates,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "sm_count": props.multi_processor_count,
        # What a kernel writer sizes tiles by (the generator prompt states them, okgit.search.critic).
        "compute_capability": f"{props.major}.{props.minor}",
        "shared_memory_per_sm_bytes": int(getattr(props, "shared_memory_per_multiprocessor", 0)),
        "shared_memory_per_block_bytes": int(getattr(props, "shared_memory_per_block_optin", 0)),
        "registers_per_sm": int(getattr(props, "regs_per_multiprocessor", 0)),
    }


def allowed_rate(peaks: dict[str, Any], dtypes: set[str], allowed_rel_error: float) -> float:
    """The fastest matmul rate whose rounding the tolerance admits (generous: a floor must not
    reject an honest kernel). Half-precision problems always allow their own rate."""
    rates: dict[str, float] = peaks.get("matmul", {})
    ok = [rates[rate] / passes for rate, passes, roundoff in PRECISIONS.values()
          if rate in rates and roundoff <= 8 * allowed_rel_error]
    ok += [rates[d] for d in dtypes if d in rates]
    return max(ok, default=rates.get("fp32", 0.0))


def _bandwidth(peaks: dict[str, Any]) -> float:
    """The best bandwidth the device was measured at: a copy's or a sum's."""
    return max(peaks.get("copy_bandwidth", 0.0), peaks.get("read_bandwidth", 0.0))


def _times(flops: float, min_bytes: float, bandwidth: float, rate: float) -> tuple[float, float]:
    """Seconds the op's FLOPs and bytes take at `rate` and `bandwidth` (0 where either is unknown)."""
    return flops / rate if rate > 0 else 0.0, min_bytes / bandwidth if bandwidth > 0 else 0.0


def floor_us(flops: float, min_bytes: float, peaks: dict[str, Any], rate: float) -> float:
    return max(_times(flops, min_bytes, _bandwidth(peaks), rate)) * 1e6


def plausible_floor_us(flops: float, min_bytes: float, peaks: dict[str, Any], rate: float) -> float:
    """The floor a measured time is held to (the roofline gate): the device's measured bandwidth
    with BANDWIDTH_HEADROOM."""
    return max(_times(flops, min_bytes, _bandwidth(peaks) * BANDWIDTH_HEADROOM, rate)) * 1e6


def position(flops: float, min_bytes: float, runtime_us: float, peaks: dict[str, Any], rate: float) -> dict[str, Any]:
    """Roofline fields of ProfileData for a measured time."""
    bandwidth = _bandwidth(peaks)
    t = runtime_us * 1e-6
    t_compute, t_memory = _times(flops, min_bytes, bandwidth, rate)
    floor = max(t_compute, t_memory)
    if floor <= 0:
        kind = "unknown"
    elif floor < 0.2 * t and runtime_us < 20:
        kind = "latency"  # far from both roofs at a few microseconds: launch-bound
    else:
        kind = "compute" if t_compute >= t_memory else "memory"
    return {
        "bottleneck_type": kind,
        "roofline_position": min(1.0, floor / t) if t > 0 and floor > 0 else None,
        "bandwidth_utilization": (min_bytes / t) / bandwidth if t > 0 and bandwidth > 0 else None,
        "compute_utilization": (flops / t) / rate if t > 0 and rate > 0 and flops else None,
        "floor_us": floor * 1e6 if floor > 0 else None,
    }
