"""The profiling pass (docs/evaluation.md, "Profiles"): a candidate, or the baseline, run again in
a fresh worker under a tool that reads the GPU's hardware, apart from its evaluation.

The pass never touches a verdict: it runs after the evaluation, in a worker of its own (a fresh
process with the worker's sandbox: no credentials, its own directory, a time limit, the memory
budget over its whole process tree), makes no correctness call and times nothing; what it reads
goes only into ProfileData. It holds the GPU's lock like any job: shared while the worker loads,
compiles, builds and warms the call up, alone for the profiled call(s) (the worker asks, as before
a timing), so it never overlaps a timing and its set-up never keeps other problems off the GPU.

Tools, in the order "auto" tries them:
- `ncu` (Nsight Compute) wraps the worker (okgit.eval.parent.ncu): per kernel, DRAM bytes and
  bandwidth, SM and memory throughput against their peaks, achieved and theoretical occupancy with
  the limiter, the L2 hit rate, warp-stall reasons. Where it is not installed or the driver does
  not let this user read counters, the pass says so (`not_run`) and does not ask it again.
- `proton` (Triton's profiler, PC sampling; okgit.eval.parent.proton): warp-stall reasons per
  kernel and the source line behind each. "auto" runs it where ncu gave nothing.
torch.profiler's kernel times and launches (every timed evaluation's) stay the floor under both.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from okgit.eval.parent import ncu, proton
from okgit.eval.parent.pool import WorkerPool
from okgit.eval.parent.profile import CPU_REASON, classify, with_counters
from okgit.eval.parent.sandbox import Outcome, WorkerProcess, read_result
from okgit.eval.types import ProfileData

if TYPE_CHECKING:
    from okgit.eval.parent.reference import PreparedReference
    from okgit.eval.parent.relay import Relay
    from okgit.eval.protocol.jobs import Job
    from okgit.problem import Problem

PROFILE_TIMEOUT_S = 180.0  # one tool's worker: start, compile, warm-up, the profiled call and its replays
FAILURES_BEFORE_REFUSAL = 2
RAW_ENV = "OKGIT_PROFILE_RAW"  # a directory to keep each pass's raw tool output in (bench/profile_pass.py sets it)


class Host(Protocol):
    """What a pass uses of the LocalEvaluator that owns it (stated here, so that this module
    imports nothing of local.py, which imports it)."""

    _kind: str
    _torch: str
    pool: WorkerPool
    prestart: bool

    def prepared(self, problem: Problem) -> PreparedReference: ...

    def worker_budget(self, current: int, case_bytes: int) -> int: ...

    def _candidate_job(self, problem: Problem, prep: PreparedReference, backend: str, *, cases: list[Any],
                       root: str | None = None, **kw: Any) -> Job: ...

    def _in_worker(self, worker: WorkerProcess, job: Job, timeout_s: float, relay: Relay | None, what: str,
                   clock: dict[str, float]) -> Outcome: ...


class ProfilingPass:
    """The pass of one LocalEvaluator: what each tool's worker read, merged into a profile."""

    def __init__(self, evaluator: Host) -> None:
        self.evaluator = evaluator
        self.ncu_path = ncu.find()
        # tool -> why it will not run on this machine (learned once, then not asked again)
        self.refused: dict[str, str] = {} if self.ncu_path else {"ncu": "not installed (no ncu on PATH)"}
        # tool -> a worker started ahead for its next pass (after its first), and ncu's log directory
        self.spare: dict[str, tuple[WorkerProcess, Path | None]] = {}
        self.failures: dict[str, int] = {}  # a tool that failed FAILURES_BEFORE_REFUSAL times is not asked again

    def close(self) -> None:
        for worker, logs in self.spare.values():
            worker.close()
            if logs:
                shutil.rmtree(logs, ignore_errors=True)
        self.spare.clear()

    def run(self, problem: Problem, source: str, *, backend: str, base: ProfileData | None,
            runtime_us: float | None, tools: str = "auto", baseline: bool = False, last: bool = False) -> ProfileData:
        prof = (base or ProfileData()).model_copy(deep=True)
        if self.evaluator._kind == "cpu":
            prof.not_run["profiler"] = CPU_REASON
            return prof
        t0 = time.monotonic()
        launches: list[dict[str, Any]] | None = None
        stalls: dict[str, dict[str, Any]] | None = None
        for tool in _order(tools):
            if tool in self.refused:
                prof.not_run[tool] = self.refused[tool]
                continue
            if tool == "proton" and tools == "auto" and launches:
                break  # ncu's counters hold the stalls too
            found, why = self._one(problem, source, backend, tool, baseline, last)
            if why:
                prof.not_run[tool] = why
                self.failures[tool] = self.failures.get(tool, 0) + 1
                if self.failures[tool] >= FAILURES_BEFORE_REFUSAL and tool not in self.refused:
                    self.refused[tool] = f"{why} ({self.failures[tool]} passes in a row: not asked again)"
            elif tool == "ncu":
                launches, self.failures[tool] = found, 0
            else:
                stalls, self.failures[tool] = found, 0
        if tools == "off":
            prof.not_run["counters"] = "the profiler setting is off"
        prof = with_counters(prof, launches, stalls)
        classify(prof, runtime_us)
        prof.profile_s = time.monotonic() - t0
        return prof

    def _one(self, problem: Problem, source: str, backend: str, tool: str, baseline: bool,
             last: bool = False) -> tuple[Any, str | None]:
        """(what the tool read, None) or (None, why it read nothing)."""
        ev = self.evaluator
        prep = ev.prepared(problem)
        seeds = [c for c in prep.cases if c.kind == "seed" and c.shape == 0][:1]
        root = problem.root if baseline else (problem.candidate_root or problem.root)
        job = ev._candidate_job(problem, prep, backend, cases=seeds, root=root, check=False, counters=tool)
        worker, logs = self._take(tool, ahead=not last)
        worker.memory_limit = ev.worker_budget(worker.memory_limit, prep.case_bytes)
        try:
            (worker.dir / "candidate.py").write_text(source)
            job.source_path = str(worker.dir / "candidate.py")
            # shared, and alone from just before the profiled call(s): a profiler's replays are timing
            outcome = ev._in_worker(worker, job, PROFILE_TIMEOUT_S, None, "profile", {})
            result = None if outcome.crashed else read_result(worker.dir)
            text = (logs / ncu.LOG_FILE).read_text(errors="replace") if logs and (logs / ncu.LOG_FILE).exists() else ""
            refused = ncu.refusal(text) if tool == "ncu" else _proton_refusal(outcome.stderr_tail)
            if refused and ("not permitted" in refused or "INSUFFICIENT_PRIVILEGES" in refused):
                self.refused[tool] = refused
            if result is None or result.get("failure"):
                why = refused or (result["failure"]["message"].strip().splitlines()[-1] if result and result.get("failure")
                                  else f"{outcome.describe()} ({outcome.phase})")
                return None, f"failed: {why}"[:300]
            _keep(tool, text, worker.dir)
            found = ncu.launches(text) if tool == "ncu" else proton.read(worker.dir)
            if not found:
                return None, refused or f"{tool} read nothing of the call"
            return found, None
        finally:
            worker.close()
            if logs:
                shutil.rmtree(logs, ignore_errors=True)

    def start_ahead(self, tools: str) -> None:
        """The worker of the first tool `tools` asks for started now, for the next pass (none on a
        CPU, for a tool refused, or where one waits already)."""
        first = next((t for t in _order(tools) if t not in self.refused), None)
        if self.evaluator._kind == "cuda" and first and first not in self.spare:
            self.spare[first] = self._start(first)

    def _take(self, tool: str, ahead: bool = True) -> tuple[WorkerProcess, Path | None]:
        """A fresh worker for the tool (the one started ahead, if it lives), and the next started ahead
        (`ahead`): a pass then pays no interpreter, CUDA or ncu start. None after the last pass: a
        start under ncu held the device 5-7 s on an H100, which a timing then waits for."""
        worker, logs = self.spare.pop(tool) if tool in self.spare else self._start(tool)
        if not worker.alive():
            worker.close()
            worker, logs = self._start(tool)
        if self.evaluator.prestart and ahead:
            self.spare[tool] = self._start(tool)
        return worker, logs

    def _start(self, tool: str) -> tuple[WorkerProcess, Path | None]:
        ev = self.evaluator
        logs = Path(tempfile.mkdtemp(prefix="okgit-ncu-")) if tool == "ncu" else None
        wrap = ncu.command(self.ncu_path, logs / ncu.LOG_FILE) if logs and self.ncu_path else None
        return WorkerProcess(ev._torch, ev.pool.memory_limit, ev.pool.base_dir, args=["--counters", tool], wrap=wrap), logs


def _keep(tool: str, ncu_text: str, job_dir: Path) -> None:
    """Where OKGIT_PROFILE_RAW names a directory: what the tool wrote, kept there (numbered)."""
    keep = os.environ.get(RAW_ENV)
    if not keep:
        return
    into = Path(keep)
    into.mkdir(parents=True, exist_ok=True)
    n, hatchet = len(list(into.iterdir())), proton.written(job_dir)
    if tool == "ncu" and ncu_text:
        (into / f"{n:03d}-ncu.csv").write_text(ncu_text)
    elif tool == "proton" and hatchet is not None:
        shutil.copy(hatchet, into / f"{n:03d}-proton.hatchet")


def _order(tools: str) -> tuple[str, ...]:
    return {"auto": ("ncu", "proton"), "all": ("ncu", "proton"), "ncu": ("ncu",), "proton": ("proton",)}.get(tools, ())


def _proton_refusal(stderr: str) -> str | None:
    lines = [line.strip() for line in stderr.splitlines() if "PROTON" in line or "CUPTI" in line]
    if any("INSUFFICIENT_PRIVILEGES" in line for line in lines):
        return "not permitted: CUPTI's PC sampling needs the rights to read GPU counters (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)"
    return lines[-1][:300] if lines else None
