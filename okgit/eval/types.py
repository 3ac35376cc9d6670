"""The evaluator's boundary types: what every evaluator (local, modal, in-memory) returns."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from okgit.config import Mode
from okgit.status import Status


class KernelTime(BaseModel):
    name: str
    time_us: float
    calls: int = 1
    custom: bool = False  # launched by the candidate's backend (Triton/CUDA), not a library


class ProfileData(BaseModel):
    bottleneck_type: Literal["memory", "compute", "latency", "unknown"] = "unknown"
    roofline_position: float | None = None  # floor time / measured time, in (0, 1]
    bandwidth_utilization: float | None = None
    compute_utilization: float | None = None
    occupancy: float | None = None
    cache_hit_rate: float | None = None
    flops: float | None = None
    min_bytes: float | None = None
    floor_us: float | None = None
    launch_count: int | None = None
    top_kernels: list[KernelTime] = Field(default_factory=list)
    raw: dict[str, Any] = Field(default_factory=dict)


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
    # A remote evaluator's overhead, apart from wall_s: seconds from submitting the job to its start there
    # (queueing, the container's cold start, transfers), and whether this job started a container.
    queue_s: float | None = None
    cold_start: bool | None = None

    def infrastructure_failure(self) -> str | None:
        """Why this evaluation could not judge the candidate, where the cause is the machine and not
        the kernel: the device's memory ran out, the judge or a worker was lost, the device failed.
        Such a result is no verdict: the final gate waits and tries again (okgit.run)."""
        if self.status is not Status.error or self.error is None:
            return None
        text = self.error.message
        if self.error.gate == "judge" or any(s in text for s in INFRASTRUCTURE_SIGNS):
            return f"{self.error.gate}: {text.strip().splitlines()[-1] if text.strip() else 'no message'}"[:300]
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
    slower: bool = False  # the median candidate is slower than the median baseline by more than the noise
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
    noise: dict[str, float] = Field(default_factory=dict)  # arm -> spread of its round medians, (max - min) / median
    state: str | None = None  # a model campaign's patch: `unchanged`, or how its state dict differs
