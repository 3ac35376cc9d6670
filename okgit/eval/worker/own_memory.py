"""The memory a worker process (the judge, a candidate's worker) reports about itself with its
result: its peak host memory, and its peak device memory on a GPU (for the benchmarks)."""

from __future__ import annotations

import resource


def own_memory() -> dict[str, int]:
    """This process's peak host memory (its peak resident set: VmHWM), and its peak device memory on a GPU."""
    peaks = {"host_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    import torch

    if torch.cuda.is_initialized():
        peaks["device_peak"] = int(torch.cuda.max_memory_reserved())
    return peaks
