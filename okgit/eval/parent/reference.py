"""The reference, prepared once per problem: the facts every candidate is judged by, and the
judge process that holds its expected outputs.

The parent keeps no tensor of the reference: the judge (okgit.eval.judge.process) fixed the cases,
tolerances, the reference's own call facts, determinism, degeneracy and cost before any
candidate ran, and answers each check of a candidate's outputs. What the parent keeps is what
the verdict and the reports need, as plain data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from okgit.errors import OkgitError
from okgit.eval import roofline
from okgit.eval.parent import memory
from okgit.eval.parent.gates import call_gates
from okgit.eval.parent.gates.timed import allowed_matmul_rate
from okgit.eval.parent.pool import STARTUP_TIMEOUT_S
from okgit.eval.parent.profile import CPU_REASON, profile_data
from okgit.eval.parent.sandbox import WorkerProcess
from okgit.eval.protocol.checks import LeafTolerance
from okgit.eval.protocol.jobs import PINNED_FLAGS, Case, Job, Timing
from okgit.eval.types import Reference
from okgit.problem import Problem


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


def judge_job(problem: Problem, kind: str, reference_path: str, seeds: list[int], cache_bytes: int,
              peaks_file: Path | None, timing: Timing | None) -> Job:
    """The judge's preparation of `problem`: its cases from `seeds`, the reference's timing (None
    on a CPU) and, on a GPU, the device's peaks measured into `peaks_file`."""
    return Job(role="judge", source_path=reference_path, device=kind, backend="torch", root=problem.root,
               knobs=dict(problem.knobs), init_seed=seeds[0],
               extra_shapes=[dict(s) for s in problem.extra_shapes] if problem.extra_shapes is not None else None,
               seeds=seeds, cache_bytes=cache_bytes, rtol=problem.rtol, atol=problem.atol, timing=timing,
               profile=kind == "cuda", peaks_path=str(peaks_file) if peaks_file else None, gates=call_gates())


def describe(prep: PreparedReference, device: str, *, on_cpu: bool) -> Reference:
    """What a run reports of its reference: its time, profile, shapes, flags and own error."""
    timing = prep.timing
    prof = None
    if prep.cost:
        rate, _ = allowed_matmul_rate(prep)
        roof = (roofline.position(prep.cost["flops"], prep.cost["min_bytes"], median(timing["samples_us"]),
                                  prep.peaks, rate)
                if timing and prep.peaks else None)
        prof = profile_data(prep.kernels or {}, set(), launch_count=None, flops=prep.cost.get("flops"),
                            min_bytes=prep.cost.get("min_bytes"), roofline=roof)
        if on_cpu:
            prof.not_run["profiler"] = CPU_REASON
    return Reference(
        device=device,
        timed=timing is not None,
        runtime_us=median(timing["samples_us"]) if timing else None,
        profile=prof,
        degenerate=prep.degenerate,
        shapes=[prep.shapes[i] for i in sorted({c.shape for c in prep.cases})],
        flags=dict(PINNED_FLAGS),
        hardware=prep.peaks or {"device": device},
        max_abs_error=max((t.ref_error for tols in prep.tolerances.values() for t in tols if t.scale > 0),
                          default=None),
    )


def ask(judge: WorkerProcess, job: Job, hold: Any, timeout_s: float, gpu: bool, path: str) -> dict[str, Any]:
    """The judge's answers to `prepare` and, on a GPU, `measure` (the device held alone for the
    reference's timing: `hold`, okgit.eval.parent.devices.DeviceHold), within `timeout_s` in all.
    Where the reference does not run, or did not finish in time, the judge is closed and
    OkgitError says why in one line (`path`: the op file)."""
    started = judge.wait_ready(STARTUP_TIMEOUT_S)
    with hold.region("shared"):
        t0 = time.monotonic()
        reply = judge.request({"op": "prepare", "job": job.to_dict()}, timeout_s) if started else None
        if reply is not None and not reply.get("failure") and gpu:
            with hold.region("exclusive", "timing"):  # the device's peaks and the reference's timing: the device alone
                measured = judge.request({"op": "measure"}, timeout_s - (time.monotonic() - t0))
            reply = {**reply, **measured} if measured is not None and not measured.get("failure") else measured
    if reply is None and started and judge.alive() and time.monotonic() - t0 >= timeout_s:
        phase = (judge.dir / "phase").read_text() if (judge.dir / "phase").exists() else "preparing"
        judge.close()
        raise OkgitError(f"{path}: the reference did not finish within its limit of "
                         f"{timeout_s:.0f} s ({phase}; reference_timeout_s sets the limit)")
    if reply is None or reply.get("failure"):
        why = judge_failure(reply, judge, "the reference")
        judge.close()
        raise OkgitError(f"{path}: the reference does not run: {why}")
    return reply


def fits(prep: PreparedReference, workers: int, kind: str, host_share: int, path: str) -> None:
    """Nothing where the problem's cases fit the host beside `workers` workers (okgit.eval.parent.memory.refusal);
    otherwise the prepared reference is closed and OkgitError says what does not fit, in one line."""
    try:
        refusal = memory.refusal(prep.case_bytes, workers, kind, memory.host_available(), memory.parallel() * host_share)
    except ValueError as e:
        prep.close()
        raise OkgitError(str(e)) from None
    if refusal:
        prep.close()
        raise OkgitError(f"{path}: {refusal}")


def judge_failure(reply: dict[str, Any] | None, judge_process: WorkerProcess, what: str) -> str:
    """One line: why the judge did not answer, with the sizes involved when memory ran out."""
    if reply and reply.get("failure"):
        failure = reply["failure"]
        if failure.get("out_of_memory"):  # the first line has the sizes (okgit.eval.worker.oom), not torch's paragraph
            free, phase = failure.get("free"), failure.get("phase")
            room = f"; {memory.gib(free[0])} of the device's {memory.gib(free[1])} free afterwards" if free else ""
            at = f" in its phase {phase!r}" if phase else ""  # which case, or the timing, of a preparation
            return f"{what} does not fit in memory{at} ({first_line(failure['message'])}{room})"
        return _last_line(failure["message"])
    if judge_process.alive() and not judge_process.over_budget():
        return f"{what}: the judge gave no answer in time"
    outcome = judge_process.run_outcome()
    return f"{outcome.describe()} during {outcome.phase}: {_last_line(outcome.stderr_tail)}"


def first_line(text: str) -> str:
    """What a worker's failure says on one line: its first (okgit.eval.worker.calls.describe puts the
    exception there, and the traceback under it)."""
    return _line(text, 0)


def _last_line(text: str) -> str:
    """The exception line of a traceback: what the user's code said, on one line."""
    return _line(text, -1)


def _line(text: str, which: int) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[which] if lines else "no message"
