"""The profiling pass inside a worker process: one candidate (or the baseline) called under a tool
that reads the GPU's hardware, apart from any evaluation (docs/evaluation.md, "Profiles").

The parent starts a fresh worker for the pass, its process named for the tool
(`python -m okgit.eval.worker --device cuda --counters ncu|proton`):

- `ncu`: the worker runs under Nsight Compute with profiling off from the start
  (okgit.eval.parent.ncu); after the warm-up calls it turns profiling on (cudaProfilerStart) for
  one call, so ncu replays that call's kernels and nothing else.
- `proton`: `start` opens a Proton session in PC-sampling mode when the worker starts, before any
  of a candidate's kernels is loaded (Proton maps samples to source lines through the modules it
  saw loaded); the profiled calls run in the scope PROTON_SCOPE, and the session's file is written
  into the worker's directory when they are done.

Loading, compiling, building the model, drawing its inputs and the warm-up calls share the device
with other jobs' work that times nothing; `alone` (the worker's request to the parent) is called
after the warm-up, when its kernels are done, and before the profiled calls: a profiler's replays
and samples are timing, and from there until they are done (`done`: the tool's wrap-up and the
worker's exit time nothing) the device is this job's alone.

Neither shares the process with torch.profiler (CUPTI takes one client: the worker's warm-up
leaves it out), and the calls' outputs are not checked: the verdict was decided before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from okgit.eval.protocol.jobs import PROTON_FILE, PROTON_SCOPE
from okgit.eval.protocol.start import step

TOOLS = ("ncu", "proton")
WARMUP_CALLS = 2  # compile and autotune before anything is profiled
PROTON_CALLS = 2  # more calls, more samples; PC sampling serializes each kernel


def start(tool: str) -> None:
    """What the tool needs before the worker's CUDA runs anything: Proton's session."""
    if tool == "proton":
        import triton.profiler as proton

        proton.start(PROTON_FILE, backend="cupti", mode="pcsampling")
        step("proton")


def profile_model(torch: Any, model: Any, inputs: list[Any], tool: str, alone: Callable[[], None],
                  done: Callable[[], None]) -> dict[str, Any]:
    """Warm up, ask for the device `alone`, then the profiled calls, then say they are `done` (the
    tool's own wrap-up and the worker's exit time nothing); how long they took."""
    if tool not in TOOLS:
        raise ValueError(f"no profiling tool {tool!r} (one of {', '.join(TOOLS)})")

    def call() -> Any:
        with torch.no_grad():
            return model(*inputs)

    for _ in range(WARMUP_CALLS):
        call()
    torch.cuda.synchronize()
    alone()
    t0 = time.monotonic()
    if tool == "ncu":
        torch.cuda.empty_cache()  # less device memory for ncu to save and restore around each replay
        torch.cuda.profiler.start()
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    else:
        import triton.profiler as proton

        with proton.scope(PROTON_SCOPE):
            for _ in range(PROTON_CALLS):
                call()
            torch.cuda.synchronize()
        proton.finalize()
    profiled_s = time.monotonic() - t0
    done()
    return {"tool": tool, "profiled_s": profiled_s}
