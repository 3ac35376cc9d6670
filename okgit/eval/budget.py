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
adds. A reference or candidate that does not fit the device fails with torch's out-of-memory
error, which the judge and the verdict turn into one line with the sizes involved.
"""

from __future__ import annotations

import os

GiB = 2**30
HOST_BASE = 4 * GiB
IDLE_WORKER = 2 * GiB  # a pre-started worker: torch, triton and a CUDA context, no job yet


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
    """MemAvailable, or physical memory where /proc/meminfo is missing."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def host_plan(case_bytes: int, idle_workers: int) -> int:
    """One problem's host memory: the judge and a candidate's worker, each with one case, and the
    pre-started workers waiting."""
    return 2 * worker_bytes(case_bytes) + idle_workers * IDLE_WORKER


def refusal(case_bytes: int, idle_workers: int, available: int, problems: int) -> str | None:
    """Why the problem cannot be evaluated in its share of the host, or None if it can."""
    need = host_plan(case_bytes, idle_workers)
    share = available // problems
    if need <= share:
        return None
    return (f"does not fit in host memory: evaluating it needs {gib(need)} (two workers of {gib(HOST_BASE)} plus "
            f"one case's inputs and outputs, {gib(case_bytes)}, each; {idle_workers} idle workers), and its share is "
            f"{gib(share)} of {gib(available)} available" + (f" with {problems} problems at once" if problems > 1 else ""))


def gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"
