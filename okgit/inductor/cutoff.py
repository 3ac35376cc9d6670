"""A cutoff for Inductor's hopeless autotuning choices: one timed call instead of a full benchmark.

InductorBenchmarker.benchmark_gpu runs a callable at least 7 times (a warm-up, 5 estimation runs,
then as many as fit 25 ms, at least one), so a choice of a second a call costs some 7 s of the
device held alone, and a template configuration 10-50x slower than cuBLAS is benchmarked in full
though it cannot win (issue 31: one depthwise convolution's max-autotune selection, KernelBench
L1/84, held the H100 alone for 309.5 s). Within one autotuning region (a choice selection, one
kernel's configurations: okgit.inductor.locking enters them) the best timing so far is kept;
a benchmark in a region that has one first times a single call of its callable, and a choice at
least RATIO times the best returns that single timing, a real measurement of a choice that cannot
win, and Inductor picks another. Outside a region (no best known) every benchmark runs in full.

Regions nest (benchmark_in_sub_process calls benchmark_in_current_process): the outermost one
keeps the best for all of them. Each thread has its own: a benchmark in a thread the region was
not entered in runs in full. What an outermost region cut is appended to the device ledger
(okgit.eval.protocol.ledger) as one line, `{"cutoff": label, "what": ..., "cut": n, "saved_s": s}`,
beside the holds it ran in.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from okgit.eval.protocol.ledger import append

# The single timing is one sample (taken as each of the benchmarker's is, behind an L2 flush) and
# the best a minimum over many, so a sample reads slower than its choice's minimum where the launch
# or the clock jitters. At 4 a choice truly within 2x of the best is cut only by a sample inflated
# over 2x, which the flush's hidden launch makes unlikely (an assumption, not yet measured on the
# GPU); the hopeless ones this is for are 10-50x the best, and a higher ratio would only spare
# choices of 4-10x that cannot win either.
RATIO = 4.0


def hopeless(single_ms: float, best_ms: float | None) -> bool:
    """Whether a choice timed once at `single_ms` cannot win a region whose best so far is
    `best_ms` (None: the region has none yet, and nothing is cut)."""
    return best_ms is not None and single_ms >= RATIO * best_ms


def saved_ms(single_ms: float, kwargs: dict[str, Any]) -> float:
    """The device time a cut saved, estimated from InductorBenchmarker.benchmark_gpu's schedule
    (its keywords, where the caller passed them): a warm-up, the estimation runs, then as many runs
    as fit its maximum duration (at least one), less the two calls the cut made."""
    estimation = int(kwargs.get("estimation_iters", 5))
    runs = max(min(int(kwargs.get("benchmark_iters", 100)), int(kwargs.get("max_benchmark_duration", 25) // single_ms)), 1)
    return (1 + estimation + runs - 2) * single_ms


def time_once(fn: Callable[[], Any]) -> float:
    """One call of `fn` on the current CUDA stream, in milliseconds, after an untimed one (a first
    launch may load its module or compile it). Timed as each of InductorBenchmarker's samples is:
    just after a write of a buffer the size of L2, so it finds the cache as cold as they do and its
    launch from the CPU hides behind the write (a small kernel's launch, timed, would read as
    slower than its benchmark and be cut)."""
    import torch

    fn()
    torch.cuda.synchronize()
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = torch.empty(l2 // 4, dtype=torch.int, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush.zero_()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end))


class _Region(threading.local):
    """The calling thread's open autotuning region: how deep, its best timing, what it cut."""

    def __init__(self) -> None:
        self.depth = 0
        self.best: float | None = None
        self.cut = 0
        self.saved_ms = 0.0


_region = _Region()


@contextmanager
def region(label: str, what: str) -> Iterator[None]:
    """One autotuning region (`label`: the Inductor function; `what`: the device hold's name for the
    work, the ledger's). The outermost one starts without a best and, where it cut a choice, writes
    what it cut to the ledger when it ends, however it ends."""
    r = _region
    if r.depth == 0:
        r.best, r.cut, r.saved_ms = None, 0, 0.0
    r.depth += 1
    try:
        yield
    finally:
        r.depth -= 1
        if r.depth == 0 and r.cut:
            append({"cutoff": label, "what": what, "cut": r.cut, "saved_s": round(r.saved_ms / 1000, 3)})


def within(fn: Any, label: str, what: str) -> Any:
    """`fn` as an autotuning region (see `region`)."""

    @functools.wraps(fn)
    def tuning(*args: Any, **kwargs: Any) -> Any:
        with region(label, what):
            return fn(*args, **kwargs)

    return tuning


def pruned(benchmark_gpu: Callable[..., Any]) -> Callable[..., Any]:
    """A benchmarker's bound `benchmark_gpu(_callable, **kwargs)` (milliseconds) that, in a region
    with a best, returns a hopeless choice's single timing (`time_once`) without the full benchmark;
    every full benchmark's timing in a region updates its best."""

    @functools.wraps(benchmark_gpu)
    def benchmark(_callable: Callable[[], Any], **kwargs: Any) -> Any:
        r = _region
        # return_mode="all" asks for every sample, which one timing is not
        if r.depth and r.best is not None and kwargs.get("return_mode") != "all":
            try:
                single = time_once(_callable)
            except Exception:  # noqa: BLE001 - the full benchmark says what a failing choice is worth (its error, or inf)
                single = math.nan  # never hopeless
            if hopeless(single, r.best):
                r.cut += 1
                r.saved_ms += saved_ms(single, kwargs)
                return single
        ms = benchmark_gpu(_callable, **kwargs)
        if r.depth and isinstance(ms, float):  # not return_mode="all"'s list; a failure's inf is never the least
            r.best = ms if r.best is None else min(r.best, ms)
        return ms

    return benchmark
