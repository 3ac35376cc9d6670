"""The reference, prepared once per problem: the facts every candidate is judged by, and the
judge process that holds its expected outputs.

The parent keeps no tensor of the reference: the judge (okgit.eval.judge.process) fixed the cases,
tolerances, the reference's own call facts, determinism, degeneracy and cost before any
candidate ran, and answers each check of a candidate's outputs. What the parent keeps is what
the verdict and the reports need, as plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from okgit.eval.parent import memory
from okgit.eval.parent.sandbox import WorkerProcess
from okgit.eval.protocol.checks import LeafTolerance
from okgit.eval.protocol.jobs import Case


@dataclass
class PreparedReference:
    judge: WorkerProcess
    reference_path: str  # the reference's source, in the judge's directory (read-only)
    shapes: list[dict[str, int]]  # indexed by Case.shape
    cases: list[Case]
    calls: dict[str, dict[str, Any]]  # the reference's own call facts (aliasing, inputs changed)
    tolerances: dict[str, list[LeafTolerance]]
    deterministic: bool
    degenerate: str | None
    cost: dict[str, Any]
    case_bytes: int  # the largest case's inputs and outputs
    init_seed: int
    dropped: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)  # cases whose expected outputs the judge keeps
    timing: dict[str, Any] | None = None
    kernels: dict[str, Any] | None = None
    peaks: dict[str, Any] | None = None
    # the judge's device memory at its peak as it recurs (0 on a CPU): a check that computes a case
    # again, measured in its preparation (okgit.eval.judge.prepared.device_peaks), then the largest its
    # checks reached (what it holds between checks and a case computed again)
    device_peak_bytes: int = 0
    preparation_peak_bytes: int = 0  # its preparation's largest phase: a worker's, until one reports
    worker_peak_bytes: int = 0  # the largest peak a candidate's worker reported (0 until one did)
    # the judge's preparation and timing by phase: [phase, peak bytes allocated in it, bytes allocated at
    # its end, peak bytes reserved in it] (okgit.eval.judge.process)
    device_phases: list[list[Any]] = field(default_factory=list)
    thorough: set[str] = field(default_factory=set)  # candidates (okgit.eval.parent.local._digest) correct in thorough mode

    def close(self) -> None:
        self.judge.close()

    def footprint(self, idle_workers: int) -> int:
        """The problem's device memory as it evaluates (okgit.eval.parent.memory.device_footprint),
        a worker counted at the judge's preparation's largest phase until one reports its peak."""
        return memory.device_footprint(self.device_peak_bytes, idle_workers,
                                       self.worker_peak_bytes or self.preparation_peak_bytes)

    def note_peaks(self, judge: int, worker: int) -> bool:
        """An evaluation's measured device peaks kept where they are the largest yet; whether one was."""
        grew = judge > self.device_peak_bytes or worker > self.worker_peak_bytes
        self.device_peak_bytes = max(self.device_peak_bytes, judge)
        self.worker_peak_bytes = max(self.worker_peak_bytes, worker)
        return grew


def from_judge(judge: WorkerProcess, reference_path: str, result: dict[str, Any], init_seed: int) -> PreparedReference:
    return PreparedReference(
        judge=judge,
        reference_path=reference_path,
        shapes=result["shapes"],
        cases=[Case(**c) for c in result["cases"]],
        calls=result["calls"],
        tolerances={cid: [LeafTolerance(**t) for t in tols] for cid, tols in result["tolerances"].items()},
        deterministic=bool(result["deterministic"]),
        degenerate=result.get("degenerate"),
        cost=result.get("cost", {}),
        case_bytes=int(result.get("case_bytes", 0)),
        init_seed=init_seed,
        dropped=list(result.get("dropped_shapes", [])),
        cached=list(result.get("cached", [])),
        timing=result.get("timing"),
        kernels=result.get("profile"),
        device_peak_bytes=int(result.get("device_peak_bytes", 0)),
        preparation_peak_bytes=int(result.get("preparation_peak_bytes", 0)),
        device_phases=list(result.get("device_phases") or []),
    )
