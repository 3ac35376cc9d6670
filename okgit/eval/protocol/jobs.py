"""What the parent asks of a worker and what comes back: plain data, JSON.

Two kinds of worker process: the judge (one per prepared reference, long-lived: it runs the
reference, holds the expected outputs and compares, okgit.eval.judge.process) and a candidate's worker
(one per evaluation, okgit.eval.worker.candidate). A candidate's job directory holds job.json (the Job);
the worker writes result.json (per-call facts, timing) there, and the `phase` file naming the
gate in progress. Outputs never pass through the parent: okgit.eval.worker.export.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

# the init_inputs case's perturbation is the op-file contract's, shared with the lowering
from okgit.problem import INIT_FLOAT_FACTOR as INIT_FLOAT_FACTOR
from okgit.problem import perturb_floats as perturb_floats

Role = Literal["judge", "candidate"]
CaseKind = Literal["seed", "distribution", "extra_shape", "init_inputs", "modes"]

MODEL_SEED = 12345  # set before every model construction, in both arms
PINNED_FLAGS: dict[str, Any] = {
    # PyTorch's defaults, pinned so that both arms run the library exactly alike (docs/evaluation.md).
    "torch.backends.cuda.matmul.allow_tf32": False,
    "torch.backends.cudnn.allow_tf32": True,
    "torch.backends.cudnn.benchmark": False,
    "torch.backends.cudnn.deterministic": False,
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": True,
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": True,
}


@dataclass
class Case:
    id: str
    kind: CaseKind
    shape: int  # index into the job's shapes
    seed: int
    signed: bool = False  # the second input distribution: floating x -> 3x - 1
    note: str = ""  # init_inputs: which constructor arguments changed, for the verdict's message
    salt: int = 0  # a timed call's inputs: the seed's, with elements moved by okgit.eval.worker.calls.salt_inputs

    @property
    def model(self) -> int | str:
        """Which model runs the case: the shape's, or a model of its own: for init_inputs built
        from its (perturbed) constructor arguments, for modes a fresh one whose state it follows."""
        return self.id if self.kind in ("init_inputs", "modes") else self.shape


@dataclass
class Timing:
    warmup: int
    samples: int


@dataclass(frozen=True)
class CheckedTiming:
    """A timing still to come in a candidate's job that keeps its checked samples' outputs for the
    judge (`Job.keeps_checked`), as the parent tells the judge with each check before it: the
    judge sizes it with its own case's bytes (okgit.eval.worker.measure.checked_timing_bytes) and
    hands its cached memory back where the device could not hold it beside that timing."""

    seeds: int  # the job's seed cases: the most input sets the timing rotates
    samples: int  # its timed samples, among which the checked ones are picked


@dataclass
class Job:
    role: Role
    source_path: str  # judge: the reference file; candidate: the candidate file
    device: str
    backend: str
    root: str | None
    reference_path: str = ""  # candidate: the reference file, whose get_inputs() draws its inputs
    cases: list[Case] = field(default_factory=list)  # candidate: the cases to run, in order
    shapes: list[dict[str, int]] = field(default_factory=list)  # candidate: knob values per shape
    init_seed: int = 0  # the seed get_init_inputs() runs under, in both processes
    # candidate: the op file's own shape where shapes[0] is not it (a CPU scales shapes down): the
    # worker calls the candidate there on the meta device, launches counted and not run
    own_knobs: dict[str, int] | None = None
    # candidate on a GPU: the device memory the judge's check of one case reaches (its measured
    # peak, PreparedReference.device_peak_bytes); the worker hands its allocator's cached blocks
    # back before a check while the device has less than this free (worker.candidate.send)
    check_bytes: int = 0
    # judge only: how to derive shapes and cases, and what to keep
    knobs: dict[str, int] = field(default_factory=dict)
    extra_shapes: list[dict[str, int]] | None = None
    seeds: list[int] = field(default_factory=list)
    cpu_input_limit: int = 65536
    cache_bytes: int = 0  # expected outputs kept between evaluations up to this; the rest recomputed
    rtol: float | None = None  # tolerance overrides from okgit.toml; None = per-dtype rules
    atol: float | None = None
    # both
    check: bool = True  # run the correctness calls (False: timing only, for the final gate)
    timing: Timing | None = None
    profile: bool = False
    # candidate: a profiling pass, apart from any verdict ("ncu" or "proton", the worker started for
    # that tool: okgit.eval.worker.counters); no correctness calls, no timing
    counters: str = ""
    peaks_path: str | None = None  # judge on a GPU: measure device peaks into this file if absent
    # the gate each part of the protocol is checked under (okgit.eval.protocol.keys: a case's kind,
    # "repeat", "fresh", "timed", the modes case's parts), named by the parent from its registered gates
    gates: dict[str, str] = field(default_factory=dict)

    def keeps_checked(self) -> bool:
        """Whether this job's timing keeps its checked samples' outputs until the judge has checked
        them (`timed_outputs`): a candidate's checked evaluation. Any other timing drops each clone
        once its stream check is done (okgit.eval.worker.timing.time_calls's `keep_checked`)."""
        return self.role == "candidate" and self.check

    def checked_timing(self) -> CheckedTiming | None:
        """The timing that keeps its checked outputs, where this job has one (a GPU's: the CPU has no timing)."""
        if self.timing is None or not self.keeps_checked():
            return None
        return CheckedTiming(seeds=sum(c.kind == "seed" for c in self.cases), samples=self.timing.samples)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Job":
        data = dict(data)
        data["cases"] = [Case(**c) for c in data["cases"]]
        data["timing"] = Timing(**data["timing"]) if data["timing"] else None
        return cls(**data)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: Path) -> "Job":
        return cls.from_dict(json.loads(path.read_text()))


# the profiling pass's Proton session: its file (in the worker's directory) and the scope the
# profiled calls run in (okgit.eval.worker.counters writes them, okgit.eval.parent.proton reads them)
PROTON_FILE = "okgit_proton"
PROTON_SCOPE = "okgit_profiled"


def tree_spec(obj: Any) -> Any:
    """The nesting of an output: 't' for a tensor leaf, lists for tuples/lists, repr for other values."""
    if isinstance(obj, (tuple, list)):
        return [tree_spec(o) for o in obj]
    return "t" if _is_tensor(obj) else {"value": repr(obj)}


def flatten(obj: Any) -> list[Any]:
    if isinstance(obj, (tuple, list)):
        return [leaf for o in obj for leaf in flatten(o)]
    return [obj] if _is_tensor(obj) else []


def _is_tensor(obj: Any) -> bool:
    import torch

    return isinstance(obj, torch.Tensor)
