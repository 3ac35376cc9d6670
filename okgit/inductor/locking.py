"""Inductor's autotuning under the device's exclusive lock, and nothing else of a compile.

torch.compile spends most of its time on the CPU (tracing, lowering, compiling Triton
kernels), which keeps no timing on the GPU waiting, and a little on the GPU: running the
compiled graph, and benchmarking launch configurations (at a kernel's first launch, in
max-autotune's template choice and coordinate descent). A benchmark must not run beside other
work (its choice would follow the noise) nor beside another job's timing, so each one holds the
device alone (okgit.eval.parent.devices.DeviceHold's exclusive region); everything else is the
caller's to hold shared around its own GPU work.

The benchmarks are found where Inductor keeps them: the one benchmarker every path goes
through, and, so that one autotuning takes the lock once rather than per configuration, the
coarser functions around it whose configurations are all compiled before they run (a kernel's
configurations, a template choice). Not coordinate descent: it compiles each configuration it
tries just before benchmarking it (CachingAutotuner._coordinate_descent_tuning), so held around
it the device would be held alone through every one of those compiles; each of its benchmarks
holds it alone instead. A name a torch version lacks is skipped; where the benchmarker itself is
missing, `exclusive_benchmarks` says so and the caller holds the device alone for the whole compile.

Within the coarse regions a choice that cannot win is not benchmarked in full (okgit.inductor.cutoff):
each keeps its best timing so far, and a choice whose one timed call is at least `cutoff.RATIO` times
it returns that timing (issue 31: on the H100's sweep one depthwise convolution's template choice held
the device alone for 309.5 s, GEMM choices 39-65 s each). Coordinate descent, the benchmarks outside
them (the scheduler's fusion and multi-kernel decisions) and the choices benchmarked in Inductor's
autotuning subprocess (`autotune_in_subproc`, CUTLASS), whose benchmarker is not this one, run in full.
"""

from __future__ import annotations

import functools
from typing import Any

from okgit.eval.parent.devices import DeviceHold
from okgit.inductor import cutoff

# (module, class, attribute): coarse regions, each one autotuning of one kernel or one choice (a
# region of okgit.inductor.cutoff too: its choices are compared with each other)
_AROUND = (
    ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "benchmark_all_configs"),
    ("torch._inductor.select_algorithm", "AlgorithmSelectorCache", "benchmark_in_current_process"),
    ("torch._inductor.select_algorithm", "AlgorithmSelectorCache", "benchmark_in_sub_process"),
)


def exclusive_benchmarks(hold: DeviceHold) -> list[str]:
    """Make every Inductor benchmark in this process run in `hold`'s exclusive region; the names
    wrapped ([] when the benchmarker was not found: then nothing is)."""
    import importlib

    try:
        from torch._inductor.runtime import benchmarking
    except ImportError:
        return []
    bench = getattr(benchmarking, "benchmarker", None)
    if bench is None or not hasattr(bench, "benchmark_gpu"):
        return []
    wrapped = ["benchmarker.benchmark_gpu"]
    # an attribute of the one instance: every caller's `benchmarker.benchmark_gpu(...)`, and the
    # benchmarker's own `self.benchmark_gpu` from `benchmark`, find it
    bench.benchmark_gpu = _exclusive(cutoff.pruned(bench.benchmark_gpu), hold, "benchmarker.benchmark_gpu")
    for module_name, class_name, name in _AROUND:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        raw = cls.__dict__.get(name)
        if raw is None:
            continue
        label = f"{class_name}.{name}"
        if isinstance(raw, (classmethod, staticmethod)):
            setattr(cls, name, type(raw)(_exclusive(cutoff.within(raw.__func__, label, hold.what), hold, label)))
        elif callable(raw):
            setattr(cls, name, _exclusive(cutoff.within(raw, label, hold.what), hold, label))
        else:
            continue
        wrapped.append(label)
    return wrapped


def _exclusive(fn: Any, hold: DeviceHold, label: str) -> Any:
    """`fn` in an exclusive region; the ledger writes `label` with its seconds beside the hold, so
    a coarse region's time can be told from its benchmarks' (they nest)."""

    @functools.wraps(fn)
    def alone(*args: Any, **kwargs: Any) -> Any:
        with hold.region("exclusive", label):
            return fn(*args, **kwargs)

    return alone
