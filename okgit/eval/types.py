"""The evaluator's boundary types: what every evaluator (local, modal, in-memory) returns."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from okgit.config import Mode
from okgit.status import Status

Bottleneck = Literal["memory", "compute", "latency", "unknown"]
Limiter = Literal["registers", "shared_memory", "warps", "blocks"]


class Stall(BaseModel):
    """One reason warps waited instead of issuing, as Nsight Compute and CUPTI's PC sampling name
    it (long_scoreboard: a global-memory load; math_pipe_throttle: a busy math unit; ...)."""

    reason: str
    share: float  # of the stalled warp time (ncu) or stalled samples (Proton), in [0, 1]
    line: str | None = None  # Proton: the source line ("file.py:42") with most of its samples


TOP_KERNELS = 10  # the kernels a profile lists at most (ProfileData.top_kernels), the longest first


class KernelTime(BaseModel):
    """One kernel of a call: its time (torch.profiler), its launch and the occupancy that launch
    allows (CUPTI's launch record, okgit.eval.worker.occupancy), and where a profiling pass ran,
    its hardware counters. `sources` names the tool behind each figure other than the time."""

    name: str
    time_us: float
    calls: int = 1
    custom: bool = False  # launched by the candidate's backend (Triton/CUDA), not a library
    grid: list[int] | None = None  # blocks, x y z
    block: list[int] | None = None  # threads per block, x y z
    registers: int | None = None  # per thread
    shared_bytes: int | None = None  # per block, static and dynamic
    occupancy_theoretical: float | None = None  # warps the launch lets an SM hold / the SM's warp slots
    occupancy_limiter: Limiter | None = None  # what stops an SM from holding more of its blocks
    waves: float | None = None  # blocks / (blocks an SM holds x SMs)
    occupancy: float | None = None  # achieved: warps active per cycle / the SM's warp slots (ncu)
    dram_bytes: float | None = None  # read and written (ncu)
    bandwidth: float | None = None  # achieved DRAM bytes per second (ncu)
    bandwidth_utilization: float | None = None  # of the device's peak DRAM bandwidth (ncu)
    compute_utilization: float | None = None  # SM throughput, of its peak (ncu)
    l2_hit_rate: float | None = None  # (ncu)
    stalls: list[Stall] = Field(default_factory=list)  # largest first (ncu or Proton)
    bottleneck_type: Bottleneck | None = None  # from its counters (ncu)
    sources: dict[str, str] = Field(default_factory=dict)  # field -> tool


class ProfileData(BaseModel):
    """Where a call's time goes (docs/evaluation.md, "Profiles"): the roofline's position from the
    problem's FLOPs and minimum bytes, kernels by time with their launches (torch.profiler, on every
    timed evaluation), and for promising candidates and the reference the counters of a profiling
    pass apart from timing (Nsight Compute where it runs, Proton's PC sampling for stalls). The
    totals weigh kernels by time. `sources` names the tool behind each figure; `not_run` says why a
    tool gave none (on a CPU: why every field is empty)."""

    bottleneck_type: Bottleneck = "unknown"
    roofline_position: float | None = None  # floor time / measured time, in (0, 1]
    bandwidth_utilization: float | None = None
    compute_utilization: float | None = None
    occupancy: float | None = None  # achieved (ncu)
    cache_hit_rate: float | None = None  # the L2's hit rate (ncu)
    flops: float | None = None
    min_bytes: float | None = None
    floor_us: float | None = None
    launch_count: int | None = None
    top_kernels: list[KernelTime] = Field(default_factory=list)
    raw: dict[str, Any] = Field(default_factory=dict)
    bandwidth: float | None = None  # achieved DRAM bytes per second over the kernels (ncu)
    occupancy_theoretical: float | None = None
    occupancy_limiter: Limiter | None = None  # the limiter of the kernel with the most time
    stalls: list[Stall] = Field(default_factory=list)  # over the kernels, largest first
    roofline: str = ""  # what the roofline says, in a sentence
    bottleneck_why: str = ""  # the figures the bottleneck was read from
    sources: dict[str, str] = Field(default_factory=dict)  # field -> the tool it came from
    tools: list[str] = Field(default_factory=list)  # the profiling pass's tools that read something ("ncu", "proton")
    not_run: dict[str, str] = Field(default_factory=dict)  # tool -> why it gave nothing
    profile_s: float | None = None  # seconds the profiling pass took, where one ran


class GateResult(BaseModel):
    name: str
    passed: bool
    detail: str = ""


class KernelShape(BaseModel):
    """Whether the candidate's own kernels produced the outputs at one shape (docs/design.md: "The
    kernel judged is the kernel that runs"): where they launched nothing, other code (an original
    forward kept as a fallback, a vendor-only path) produced them, and that shape is no evidence
    about the kernel."""

    knobs: dict[str, int]
    launches: int | None  # the candidate backend's launches over the calls at this shape; None: unknown
    own: bool = False  # the op file's own shape
    how: Literal["run", "meta"] = "run"  # called for real, or on the meta device with launches counted, not run
    why: str = ""  # meta: why it could not be told, where launches is None

    def ran(self) -> bool:
        return bool(self.launches)


class EvalError(BaseModel):
    gate: str  # the gate that failed, e.g. "compile", "outputs_written", "roofline"
    message: str


class EvalResult(BaseModel):
    status: Status
    correct: bool = False
    speedup: float | None = None  # ref_runtime_us / runtime_us, only when timed
    runtime_us: float | None = None
    ref_runtime_us: float | None = None
    timed: bool = False  # False on a CPU: correctness is real, timing is not claimed
    device: str = "cpu"
    mode: Mode = "fast"
    profile: ProfileData | None = None
    error: EvalError | None = None
    gates: list[GateResult] = Field(default_factory=list)
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    shapes: list[dict[str, int]] = Field(default_factory=list)  # knob settings checked
    kernel_shapes: list[KernelShape] = Field(default_factory=list)  # where the candidate's own kernels ran
    flags: dict[str, Any] = Field(default_factory=dict)  # tf32/cudnn flags pinned in both arms
    wall_s: float | None = None  # the evaluation itself, where it ran
    # where wall_s went, by phase (okgit.eval.parent.phases.PHASES; empty where the evaluator keeps no
    # clock): for the benchmark and the sweep's report, never for a verdict
    phase_s: dict[str, float] = Field(default_factory=dict)
    # A remote evaluator's overhead, apart from wall_s: seconds from submitting the job to its start there
    # (queueing, the container's cold start, transfers), and whether this job started a container.
    queue_s: float | None = None
    cold_start: bool | None = None

    def infrastructure_failure(self) -> str | None:
        """Why this evaluation could not judge the candidate, where the cause is the machine and not
        the kernel: the device's memory ran out, the judge or a worker was lost, the device failed.
        Such a result is no verdict: the final gate waits and tries again (okgit.final_gate)."""
        if self.status is not Status.error or self.error is None:
            return None
        lines = [line.strip() for line in self.error.message.splitlines() if line.strip()]
        signed = [line for line in lines if any(s in line for s in INFRASTRUCTURE_SIGNS)]
        if self.error.gate == "judge" or signed:
            # the line that says so (a worker's out-of-memory line: the sizes, okgit.eval.worker.oom), never
            # the traceback under it; otherwise the last, the exception of a dead worker's stderr
            return f"{self.error.gate}: {signed[0] if signed else lines[-1] if lines else 'no message'}"[:300]
        return None


# What an error's message says when the machine failed it rather than the kernel: memory taken by
# other work, the device lost or reset, the judge gone.
INFRASTRUCTURE_SIGNS = ("out of memory", "OutOfMemoryError", "CUDA-capable device", "uncorrectable ECC error",
                        "GPU is lost", "the judge did not answer", "could not be judged")


class Reference(BaseModel):
    """What the evaluator learned about the reference before any candidate ran."""

    device: str
    timed: bool
    runtime_us: float | None = None
    profile: ProfileData | None = None
    degenerate: str | None = None  # why the reference's output cannot tell right from wrong
    shapes: list[dict[str, int]] = Field(default_factory=list)
    flags: dict[str, Any] = Field(default_factory=dict)
    hardware: dict[str, Any] = Field(default_factory=dict)  # device name, measured peaks
    # its own max |native - float64| over the checked cases and outputs (None: no float output)
    max_abs_error: float | None = None


class Comparison(BaseModel):
    """The final gate: interleaved rounds of baseline and candidate in fresh processes."""

    rounds: int
    baseline_us: list[float]
    candidate_us: list[float]
    noise: float  # A/A relative spread of the baseline against itself
    wins: int
    sign_test_p: float
    speedup: float  # median baseline / median candidate
    optimized: bool  # won every round by more than the noise
    slower: bool = False  # the median candidate slower than the median baseline past its typical spread (rounds.py)
    detail: str = ""


class BaselineTimes(BaseModel):
    """The sweep's baselines of one problem: eager, torch.compile and okgit's winner, timed
    alike (locally by okgit.kernelbench.baselines, on Modal by okgit.eval.modal.remote)."""

    device: str
    timed: bool
    eager_us: float | None = None
    compile_us: float | None = None
    okgit_us: float | None = None
    errors: dict[str, str] = Field(default_factory=dict)  # arm -> why it has no time
    # okgit's winner against a float64 run of eager at the default shapes, checked apart from the
    # evaluator: why they disagree, or None
    disagreement: str | None = None
    flags: dict[str, Any] = Field(default_factory=dict)  # the pinned library flags the arms ran under
    compile_s: float | None = None  # torch.compile's first call (compile and autotuning) in the baselines' process
    compile_cache: str | None = None  # "hit": Inductor's graph cache served its compile, "miss", "not used"
    noise: dict[str, float] = Field(default_factory=dict)  # arm -> spread of its round medians, (max - min) / median
    state: str | None = None  # a model campaign's patch: `unchanged`, or how its state dict differs
