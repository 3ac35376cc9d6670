"""What one evaluation may hold in memory, derived from the problem's own sizes and the machine.

Host. Each worker process (the judge, a candidate's worker) may hold HOST_BASE (torch, CUDA,
Triton's compiler, the op's modules) plus one case's inputs and outputs (an op whose
get_inputs() draws on the host before moving to the device holds them there once). Tensors
otherwise live on the device, so the host budget does not grow with the number of cases. A
worker past its budget is killed by the parent's watchdog and the result says which budget
it passed. Several problems at once (`bench kernelbench --parallel N` sets OKGIT_PARALLEL for
each) share the host: a problem whose workers cannot fit its share is refused in one line.

Device. The judge keeps expected outputs between evaluations only up to `cache_bytes` (a
sixteenth of the device, so that parallel problems leave room for each other); every other
case is drawn and computed again when it is checked, so one case at a time is what a check
adds; what it held stays in the judge's allocator for the next check unless the device's free
memory is short of what the candidate may need (okgit.eval.judge.prepared.must_release: before a
checked evaluation's timing, the parent tells the judge of it with each check, so that the
outputs that timing keeps for the judge are counted). A
reference or candidate that does not fit the device fails with torch's out-of-memory error,
which the judge and the verdict turn into one line with the sizes involved.
"""

from __future__ import annotations

import os

GiB = 2**30
HOST_BASE = 4 * GiB  # a worker's budget before its case: what it may hold, not what it usually does
# what a worker process usually holds before its case (torch and triton imported; on a GPU a
# CUDA context too): about 0.4 GiB on a CPU, 1.5-2 GiB on an H200
PROCESS_BASE = {"cpu": GiB // 2, "cuda": 2 * GiB}


CUDA_CONTEXT = GiB // 2  # the device memory of one process's CUDA context (torch, its libraries' workspaces)


def device_footprint(judge_peak: int, idle_workers: int, worker_peak: int) -> int:
    """A problem's device memory while it evaluates: the judge's measured peak as it recurs (a
    case's inputs, outputs and float64 copies beside its cached outputs: PreparedReference.
    device_peak_bytes), a candidate worker's, and a CUDA context for each process (the judge, the
    working worker and the idle ones). Until a worker has reported its peak, the caller counts it
    at the judge's preparation's largest phase: measured on an H200 (sweep on 8deb49a), workers
    held 0.3-0.9x their judge's whole preparation's peak, except a GEMM's, whose Triton kernels'
    autotuning took 1.3x."""
    return judge_peak + worker_peak + (2 + idle_workers) * CUDA_CONTEXT


def worker_bytes(case_bytes: int) -> int:
    return HOST_BASE + case_bytes


def cache_bytes(device_total: int) -> int:
    return device_total // 16


def parallel() -> int:
    try:
        return max(1, int(os.environ.get("OKGIT_PARALLEL", "1")))
    except ValueError:
        return 1


def host_available() -> int:
    """MemAvailable (physical memory where /proc/meminfo is missing), capped by OKGIT_HOST_MEMORY
    ("64G", "512M" or bytes) for a machine okgit shares with other work."""
    available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except OSError:
        pass
    cap = os.environ.get("OKGIT_HOST_MEMORY", "").strip().upper()
    if cap:
        units = {"K": 2**10, "M": 2**20, "G": GiB, "T": 2**40}
        try:
            value = float(cap[:-1]) * units[cap[-1]] if cap[-1] in units else float(cap)
        except ValueError:
            raise ValueError(f"OKGIT_HOST_MEMORY={cap!r}: expected a size such as 64G or 512M") from None
        available = min(available, int(value))
    return available


def host_plan(case_bytes: int, idle_workers: int, device: str) -> int:
    """One problem's host memory as it usually runs: the judge and a candidate's worker, each
    with one case on the host at most, and the pre-started workers waiting."""
    base = PROCESS_BASE["cpu" if device == "cpu" else "cuda"]
    return 2 * (base + case_bytes) + idle_workers * base


def refusal(case_bytes: int, idle_workers: int, device: str, available: int, problems: int) -> str | None:
    """Why the problem cannot be evaluated in its share of the host, or None if it can."""
    need = host_plan(case_bytes, idle_workers, device)
    share = available // problems
    if need <= share:
        return None
    return (f"does not fit in host memory: evaluating it needs about {gib(need)} (the judge and a worker with one "
            f"case's inputs and outputs, {gib(case_bytes)}, each, and {idle_workers} idle workers), and its share is "
            f"{gib(share)} of {gib(available)} available" + (f" with {problems} problems at once" if problems > 1 else ""))


def gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"
