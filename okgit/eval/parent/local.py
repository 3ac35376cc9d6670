"""LocalEvaluator: the Evaluator on this machine's GPU, or its CPU through the Triton interpreter.

The parent (this module) never imports candidate code and holds no tensor. It prepares the
reference once per problem in a judge process (okgit.eval.judge.process), runs each candidate in a
fresh worker (pre-started idle workers wait so that a warm evaluation pays no interpreter or
CUDA start), relays each call's exported outputs from the worker to the judge and its answer
back, and decides the verdict from the worker's facts and the judge's findings
(okgit.eval.parent.verdict). Each GPU has its own lock (okgit.eval.parent.devices), held
shared while a job checks correctness and exclusively while it times: the worker asks for the
device alone before its timing, and the judge times the reference in a request of its own, so
the correctness work of several problems on one GPU runs side by side while no two timings,
and nothing beside a timing, ever share it. Several GPUs work at once.

One preparation serves both modes: the judge draws the thorough mode's seeds and times the
reference with its samples once; a fast evaluation uses the first of those seeds.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from okgit.errors import OkgitError
from okgit.eval import roofline
from okgit.eval.base import EvaluatorBase
from okgit.eval.parent import memory, phases
from okgit.eval.parent.devices import DeviceHold, physical_name, record_footprint, visible_gpus
from okgit.eval.parent.gates import call_gates
from okgit.eval.parent.gates.static import static_findings
from okgit.eval.parent.pool import STARTUP_TIMEOUT_S, WorkerPool
from okgit.eval.parent.profile import CPU_REASON
from okgit.eval.parent.profiling import ProfilingPass
from okgit.eval.parent.reference import PreparedReference, ask, describe, first_line, fits, from_judge, judge_job
from okgit.eval.parent.relay import Relay
from okgit.eval.parent.rounds import summarize
from okgit.eval.parent.sandbox import Outcome, WorkerProcess, default_memory_limit, read_result
from okgit.eval.parent.streams import check_streams
from okgit.eval.parent.verdict import base_fields, crashed, decide
from okgit.eval.protocol.jobs import PINNED_FLAGS, Job, Timing
from okgit.eval.types import Comparison, EvalError, EvalResult, GateResult, Mode, ProfileData, Reference, Status
from okgit.problem import Problem, parse_python


def _one_at_a_time(method):
    """Calls of one LocalEvaluator from several threads take turns (a pool gives each device its own)."""
    @functools.wraps(method)
    def serialized(self, *args, **kwargs):
        with self._busy:
            return method(self, *args, **kwargs)

    return serialized


@dataclass(frozen=True)
class ModeSpec:
    seeds: int
    warmup: int
    samples: int


MODES: dict[str, ModeSpec] = {"fast": ModeSpec(seeds=5, warmup=3, samples=10),
                              "thorough": ModeSpec(seeds=8, warmup=10, samples=100)}
PREPARED = MODES["thorough"]  # the reference's seeds and timing, for every mode
SEED_BASE = 1000
COMPARE_TIMING = Timing(warmup=5, samples=30)
# The reference's own limit for its preparation (every case, float64, cost, timing): a forward
# that hangs ends there, in one line. `reference_timeout_s` (okgit.toml, OKGIT_REFERENCE_TIMEOUT_S) sets it.
REFERENCE_TIMEOUT_S = {"cpu": 600.0, "cuda": 360.0}
MAX_IDLE = 10  # pre-started workers at most: each holds torch and a CUDA context (~1 GB of host memory)


class LocalEvaluator(EvaluatorBase):
    """One device's evaluator: one candidate at a time (`evaluate_many` runs a batch in turn; a
    PoolEvaluator of okgit.eval.parent.device_pool runs one LocalEvaluator per device at once).
    `host_share`: how many evaluators of this process share the host's memory (a pool's slots)."""

    def __init__(self, device: str | None = None, timeout_s: float | None = None,
                 memory_limit_bytes: int | None = None, prestart: bool = True, idle_workers: int | None = None,
                 judge_cache_bytes: int | None = None, host_share: int = 1,
                 reference_timeout_s: float | None = None, profiler: str | None = None) -> None:
        if device is None:
            device = "cuda" if visible_gpus() else "cpu"
        if device == "cuda":
            device = "cuda:0"
        if device != "cpu" and not re.fullmatch(r"cuda:\d+", device):
            raise OkgitError(f"unknown device {device!r} (cpu, cuda or cuda:N)")
        if device != "cpu":
            import torch

            if not torch.cuda.is_available():
                raise OkgitError(f"device {device}: no CUDA GPU is visible to torch {torch.__version__}"
                                 " (device cpu checks correctness only)")
        self._torch = device  # as this process addresses it; workers see only that GPU
        self._kind = "cpu" if device == "cpu" else "cuda"
        self.device = physical_name(device)  # how results name it, also under CUDA_VISIBLE_DEVICES
        # the interpreter is slow and a first Triton compile on a GPU takes seconds
        self.timeout_s = timeout_s or (300.0 if self._kind == "cpu" else 180.0)
        self.reference_timeout_s = reference_timeout_s or REFERENCE_TIMEOUT_S[self._kind]
        # a GPU worker takes ~4 s to start (torch + CUDA), two warm evaluations ~2 s each: keep three waiting
        self._memory_cap = memory_limit_bytes  # asked for: every worker's budget, exactly
        self.pool = WorkerPool(memory_limit_bytes or default_memory_limit(),
                               idle=idle_workers or (3 if self._kind == "cuda" else 1), batched=self._kind == "cuda")
        self.prestart = prestart
        self.judge_cache_bytes = judge_cache_bytes  # None: okgit.eval.parent.memory's rule
        self.host_share = max(1, host_share)
        self._busy = threading.RLock()  # one call at a time: its caches, workers and judge are not shared
        self._prepared: dict[str, PreparedReference] = {}
        self._spare_judge: WorkerProcess | None = None  # started ahead: a preparation pays no process start
        self._judges_taken = 0
        self._profiling: ProfilingPass | None = None  # made at its first use, or with a preparation
        self._profiler = profiler  # the pass's tools a run will ask for (`_prepare` starts the first's worker)
        if prestart:
            self.pool.prestart(self._torch)  # they wait for their jobs, no candidate code loaded
            self._spare_judge = self._new_judge()
        atexit.register(self.close)

    # ---- the Evaluator protocol -----------------------------------------------------------------
    @_one_at_a_time
    def reference(self, problem: Problem) -> Reference:
        return describe(self._prepare(problem), self.device, on_cpu=self._kind == "cpu")

    @_one_at_a_time
    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        t0 = time.monotonic()
        result = self._evaluate(problem, source, mode=mode, backend=backend)
        result.wall_s = time.monotonic() - t0
        result.phase_s = phases.with_other(result.phase_s, result.wall_s)
        return result

    @_one_at_a_time
    def profile(self, problem: Problem, source: str, *, backend: str = "triton", base: ProfileData | None = None,
                runtime_us: float | None = None, tools: str = "auto", baseline: bool = False,
                last: bool = False) -> ProfileData:
        """The profiling pass of a candidate (`baseline`: the problem's own file, as the final gate
        times it), apart from its evaluation: `base`, its evaluation's profile, with the counters put
        in (okgit.eval.parent.profiling); `last`: no worker started ahead for a next pass."""
        self._profiling = self._profiling or ProfilingPass(self)
        return self._profiling.run(problem, source, backend=backend, base=base, runtime_us=runtime_us, tools=tools,
                                   baseline=baseline, last=last)

    @_one_at_a_time
    def compare(self, problem: Problem, source: str, *, rounds: int = 5, backend: str = "triton") -> Comparison:
        if self._kind != "cuda":
            raise OkgitError("compare needs a GPU: no timing is claimed on a CPU")
        prep = self._prepare(problem)
        if _digest(problem, source, backend) not in prep.thorough:  # the final gate's thorough check is a superset
            first = self.evaluate(problem, source, mode="fast", backend=backend)
            if first.status is not Status.correct:
                raise OkgitError(f"compare needs a correct candidate: {first.status.value}"
                                 + (f" at {first.error.gate}: {first.error.message}" if first.error else ""))
        self.prestart_for(2 * rounds)
        self._record_footprint(prep, round_workers=min(2 * rounds, MAX_IDLE) if self.prestart else 0)
        base: list[float] = []
        cand: list[float] = []
        try:
            for _ in range(rounds):
                for src, root, into in ((problem.source, problem.root, base),
                                        (source, problem.candidate_root or problem.root, cand)):
                    into.append(self.time_once(problem, prep, src, backend, root=root))
        finally:
            self.end_rounds()
            self._record_footprint(prep)
        return summarize(base, cand)

    def prestart_for(self, jobs: int) -> None:
        """Start workers for `jobs` back-to-back timing rounds (`time_once`) at once (at most
        MAX_IDLE): rounds in fresh processes would otherwise wait, one after another, for each
        worker's torch and CUDA start."""
        if self.prestart:
            self.pool.prestart(self._torch, at_least=min(jobs, MAX_IDLE), timing_only=True)

    def end_rounds(self) -> None:
        """Close the round workers `prestart_for` started that no round took (rounds that ended
        early): no evaluation takes a timing-only worker, and each holds a CUDA context."""
        self.pool.drop_timing_only(self._torch)

    def wait_warm(self, timeout_s: float = 120.0) -> bool:
        """Block until the pre-started workers are ready: what "a warm evaluation" is timed from."""
        return self.pool.wait_warm(self._torch, timeout_s)

    def close(self) -> None:
        atexit.unregister(self.close)
        # the processes' exits tear their CUDA contexts down: the device shared meanwhile, as for
        # their starts (okgit.eval.protocol.start), never beside another job's timing
        with self._hold("close").region("shared"):
            self.pool.close()
            if self._profiling is not None:
                self._profiling.close()
            if self._spare_judge is not None:
                self._spare_judge.close()
                self._spare_judge = None
            for prep in self._prepared.values():
                prep.close()
            self._prepared.clear()

    # ---- steps ----------------------------------------------------------------------------------
    def _evaluate(self, problem: Problem, source: str, *, mode: Mode, backend: str) -> EvalResult:
        base = {"device": self.device, "mode": mode, "flags": dict(PINNED_FLAGS)}
        clock: dict[str, float] = {}
        t0 = time.monotonic()
        try:
            tree = parse_python(source)
        except SyntaxError as e:
            return _early(Status.compile_error, "compile", f"line {e.lineno}: {e.msg}", base)
        findings = static_findings(tree)
        if findings:
            return _early(Status.rejected, "static", "; ".join(str(f) for f in findings[:5]), base)
        t1 = time.monotonic()
        prep = self._prepare(problem)
        clock.update(static=t1 - t0, reference=time.monotonic() - t1)
        spec = MODES[mode]
        seeds = [c.id for c in prep.cases if c.kind == "seed"]
        cases = [c for c in prep.cases if c.kind != "seed" or c.id in seeds[:spec.seeds]]
        base = base_fields(prep, cases, device=self.device, mode=mode)
        job = self._candidate_job(problem, prep, backend, cases=cases,
                                  timing=Timing(spec.warmup, spec.samples) if self._kind == "cuda" else None,
                                  profile=self._kind == "cuda")
        for attempt in (1, 2):
            relay = Relay(prep, {c.id for c in cases}, self._kind, self.timeout_s, job.checked_timing())
            outcome, result = self._run(job, source, self.timeout_s, relay, clock)
            # a check the judge could not fit: the device was full of something besides this job
            # (another process of the run: a seed's capture, a profiling pass, a worker exiting),
            # not the candidate's doing as far as anyone can tell, so it is judged once more in a
            # fresh worker, and only a second such failure is its verdict
            if not relay.judge_intact or attempt == 2:
                break
        t0 = time.monotonic()

        def with_phases(out: EvalResult) -> EvalResult:
            clock.update(worker_start=outcome.ready_wait_s, verdict=time.monotonic() - t0)
            out.phase_s = phases.fold(clock, (result or {}).get("phase_s", {}), relay.judge_own, outcome.wall_s)
            return out

        if relay.judge_failure:
            if not relay.judge_intact:
                self._forget(prep)
            twice = "twice, the second time in a fresh worker: " if relay.judge_intact else ""
            return with_phases(crashed(outcome, base, judge_failure=twice + relay.judge_failure))
        if result is None:
            return with_phases(crashed(outcome, base))
        out = decide(prep, cases, result, relay.checks, backend=backend, device=self.device, mode=mode, base=base)
        if mode == "thorough" and out.status is Status.correct:
            prep.thorough.add(_digest(problem, source, backend))
        if out.profile is not None and self._kind == "cpu":
            out.profile.not_run["profiler"] = CPU_REASON
        if out.profile is not None:  # what the processes held, for the benchmark
            out.profile.raw["memory"] = {"worker": result.get("memory", {}), "judge": relay.judge_memory}
        if prep.note_peaks(relay.judge_memory.get("device_peak", 0), result.get("memory", {}).get("device_peak", 0)):
            # measured peaks replace the guess that a worker holds what the judge does
            self._record_footprint(prep, worker_phases=result.get("phase_peak"))
        return with_phases(out)

    def _record_footprint(self, prep: PreparedReference, prepared: bool = False,
                          worker_phases: dict[str, int] | None = None, round_workers: int = 0) -> None:
        """`prepared`: the first, with the judge's memory by phase of the preparation; `worker_phases`:
        the evaluation's worker's peak by gate, where its peak grew; `round_workers`: the final gate's
        round workers started beside the idle ones, a CUDA context each while they last."""
        record_footprint(prep.footprint(self.pool.idle_count + self.prestart + round_workers),
                         prep.device_phases if prepared else None, worker_phases)

    def _candidate_job(self, problem: Problem, prep: PreparedReference, backend: str, *, cases: list[Any],
                       root: str | None = None, **kw: Any) -> Job:
        own = dict(problem.knobs)
        return Job(role="candidate", source_path="", device=self._kind, backend=backend,
                   root=root or problem.candidate_root or problem.root, reference_path=prep.reference_path,
                   cases=cases, shapes=prep.shapes, init_seed=prep.init_seed, gates=call_gates(),
                   check_bytes=prep.device_peak_bytes,
                   own_knobs=own if prep.shapes and own != prep.shapes[0] else None, **kw)

    def _key(self, problem: Problem) -> str:
        return hashlib.sha256(repr((problem.source, problem.root, sorted(problem.knobs.items()), problem.extra_shapes,
                                    problem.atol, problem.rtol)).encode()).hexdigest()

    def _prepare(self, problem: Problem) -> PreparedReference:
        key = self._key(problem)
        if key in self._prepared:
            if self._prepared[key].judge.alive():
                return self._prepared[key]
            # its judge is gone since (killed by the machine, or by stop_all with its directory and
            # the reference in it): prepared anew, never judged against a reference no longer there
            self._forget(self._prepared[key])
        seeds = [SEED_BASE + i for i in range(PREPARED.seeds)]
        if self.prestart and self._kind == "cuda" and self._profiler:
            # the reference is profiled first thing after it is prepared: the tool's worker (6-7 s
            # to start under ncu on an H100, holding the device as any start does) comes up beside
            # the preparation, asked for before the judge's fork is waited for (asked after it, on
            # KernelBench's sweep on 6ce8fd3, its start outlasted the preparation and the
            # reference's timing waited 1-4 s for it)
            self._profiling = self._profiling or ProfilingPass(self)
            self._profiling.start_ahead(self._profiler)
        judge_process = self._take_judge()
        reference_path = judge_process.dir / "reference.py"
        reference_path.write_text(problem.source)
        reference_path.chmod(0o444)
        peaks_file = device_total = None
        if self._kind == "cuda":
            import torch

            props = torch.cuda.get_device_properties(self._torch)
            peaks_file, device_total = roofline.peaks_path(props.name), int(props.total_memory)
        cache = (self.judge_cache_bytes if self.judge_cache_bytes is not None else
                 memory.cache_bytes(device_total) if device_total else memory.GiB)
        job = judge_job(problem, self._kind, str(reference_path), seeds, cache, peaks_file,
                        Timing(PREPARED.warmup, PREPARED.samples) if self._kind == "cuda" else None)
        reply = ask(judge_process, job, self._hold("reference"), self.reference_timeout_s, self._kind == "cuda",
                    str(problem.path))
        prep = from_judge(judge_process, str(reference_path), reply, seeds[0])
        fits(prep, self.pool.idle_count + self.prestart, self._kind, self.host_share, str(problem.path))
        judge_process.memory_limit = self.worker_budget(judge_process.memory_limit, prep.case_bytes)
        if peaks_file is not None:
            prep.peaks = roofline.load_peaks(peaks_file)
        if prep.device_peak_bytes:
            self._record_footprint(prep, prepared=True)
        self._prepared[key] = prep
        return prep

    def worker_budget(self, current: int, case_bytes: int) -> int:
        """A worker's host memory budget for cases of `case_bytes`: torch and its device plus one
        case, never less than the pool's floor (`current`); where the caller asked for a limit
        (memory_limit_bytes: a machine shared with other work, a test), that limit exactly."""
        if self._memory_cap:
            return self._memory_cap
        return max(current, memory.worker_bytes(case_bytes))

    def _new_judge(self) -> WorkerProcess:
        return WorkerProcess(self._torch, self.pool.memory_limit, self.pool.base_dir, program="okgit.eval.judge")

    def _take_judge(self) -> WorkerProcess:
        judge_process, self._spare_judge = self._spare_judge, None
        if judge_process is None or not (judge_process.forked() and judge_process.alive()):
            judge_process = self._new_judge()
        self._judges_taken += 1
        # The next spare once a second problem came: more may follow (a campaign, a sweep), while a
        # run of one problem, most runs, never starts a judge it does not use.
        if self.prestart and self._judges_taken > 1:
            self._spare_judge = self._new_judge()
        return judge_process

    def _forget(self, prep: PreparedReference) -> None:
        """A judge that failed is not asked again: the next evaluation prepares a new one."""
        for key, known in list(self._prepared.items()):
            if known is prep:
                del self._prepared[key]
        prep.close()

    def prepared(self, problem: Problem) -> PreparedReference:
        return self._prepare(problem)

    def passed_thorough(self, problem: Problem, source: str, *, backend: str = "triton") -> bool:
        prep = self._prepared.get(self._key(problem))  # never prepares: a reference prepared anew has no verdicts
        return prep is not None and prep.judge.alive() and _digest(problem, source, backend) in prep.thorough

    @_one_at_a_time
    def screen(self, problem: Problem, source: str, *, backend: str = "triton") -> float | None:
        """A fast evaluation's timing alone, in a waiting worker (the search's screen of a launch-
        setting variant); None on a CPU, and where the static gate has a finding or the timing
        failed: the evaluation that follows then gives the verdict."""
        if self._kind != "cuda":
            return None
        try:
            if static_findings(parse_python(source)):
                return None
            fast = MODES["fast"]
            return self.time_once(problem, self._prepare(problem), source, backend, root=problem.candidate_root,
                                  timing=Timing(fast.warmup, fast.samples), timing_only=False)
        except (SyntaxError, OkgitError):
            return None

    def time_once(self, problem: Problem, prep: PreparedReference, source: str, backend: str,
                  root: str | None = None, timing: Timing = COMPARE_TIMING, timing_only: bool = True) -> float:
        """Median event time of `source` in one fresh worker, without the correctness calls (the
        final gate's rounds in timing-only workers, the search's screen, and the A/A check of the
        benchmark script)."""
        job = self._candidate_job(problem, prep, backend, root=root or problem.root,
                                  cases=[c for c in prep.cases if c.kind == "seed"], check=False, timing=timing)
        outcome, result = self._run(job, source, self.timeout_s, None, timing_only=timing_only)
        if result is None or result.get("failure") or not result.get("timing"):
            failure = (result or {}).get("failure")  # one line: the run's error where this ends the final gate
            why = f"{first_line(failure['message'])} (at {failure['gate']})" if failure else outcome.describe()
            raise OkgitError(f"a timing round failed: {why}")
        return float(check_streams(result["timing"]).runtime_us)  # every stream's work inside

    def _hold(self, what: str) -> DeviceHold:
        """The device's lock around anything this process's workers run on the GPU: shared, with
        exclusive stretches for timing (on a CPU nothing is locked; the ledger still hears of it)."""
        return DeviceHold(self._torch if self._kind == "cuda" else None, what)

    def _in_worker(self, worker: WorkerProcess, job: Job, timeout_s: float, relay: Relay | None, what: str,
                   clock: dict[str, float]) -> Outcome:
        """`job` in a worker of its own, holding the device shared from its start: the worker asks for
        it alone ({"op": "exclusive"}) just before it times or profiles, and gives it back
        ({"op": "timed"}) once that is done, since what is left of the job times nothing; between its
        calls it offers its turn ({"op": "make_way"}: a waiting timing of another job goes first);
        its other messages go to the judge (`relay`). While another job's timing goes first, the
        worker is stopped. `what`: the ledger's stage of the holds; `clock` gets the seconds waited
        for the lock."""
        # started before the lock: spawning and importing never hold up another job's GPU work
        started = worker.wait_ready(STARTUP_TIMEOUT_S)
        hold = self._hold(what)

        def answer(message: dict[str, Any]) -> dict[str, Any]:
            t0 = time.monotonic()
            if message.get("op") == "exclusive":  # from here until it says "timed"
                hold.upgrade(re.sub(r"[^a-z_ ]", "", str(message.get("for") or ""))[:40] or "job")  # the worker's word: a label only
                return {"ok": True, "waited_s": time.monotonic() - t0}
            if message.get("op") == "timed":  # its timing (or profiled call) done: shared again, stopped
                with worker.paused():  # while a waiting timing of another job goes first
                    hold.downgrade()
                return {"ok": True, "waited_s": time.monotonic() - t0}
            if message.get("op") == "make_way":  # between two calls: a waiting timing goes first
                return {"ok": True, "made_way": hold.make_way(away=worker.paused), "waited_s": time.monotonic() - t0}
            return relay(message) if relay is not None else {"ok": False}

        t0 = time.monotonic()
        with hold.region("shared") if started else contextlib.nullcontext():
            clock["lock_wait"] = time.monotonic() - t0
            return worker.run(job, timeout_s, answer, startup_timeout_s=0.0)  # ready, or it never will be

    def _run(self, job: Job, source: str, timeout_s: float, relay: Relay | None,
             clock: dict[str, float] | None = None, timing_only: bool = False) -> tuple[Outcome, dict[str, Any] | None]:
        """One job in one fresh worker (`timing_only`: one that opened no profiler session); (outcome,
        result or None if it crashed). `clock` gets the seconds waited for the device's lock and
        those of the worker's cleanup (okgit.eval.parent.phases)."""
        clock = clock if clock is not None else {}
        worker = self.pool.take(self._torch, prestart_next=self.prestart, timing_only=timing_only)
        try:
            path = worker.dir / "candidate.py"
            path.write_text(source)
            job.source_path = str(path)
            prep_bytes = relay.prep.case_bytes if relay else 0
            worker.memory_limit = self.worker_budget(worker.memory_limit, prep_bytes)
            if relay:
                relay.job_dir = worker.dir
            outcome = self._in_worker(worker, job, timeout_s, relay, "evaluation", clock)
            if outcome.crashed:
                return outcome, None
            return outcome, read_result(worker.dir)
        finally:
            t0 = time.monotonic()
            worker.close()
            clock["exit"] = time.monotonic() - t0


def _digest(problem: Problem, source: str, backend: str) -> str:
    """A candidate as the judge sees it: its code, backend and the folder it imports from."""
    return hashlib.sha256(repr((source, backend, problem.candidate_root or problem.root)).encode()).hexdigest()


def _early(status: Status, gate: str, message: str, base: dict[str, Any]) -> EvalResult:
    # Only the gate that ran: a file that does not parse never reached the static checks.
    gates = [GateResult(name=gate, passed=False, detail=message)]
    return EvalResult(status=status, error=EvalError(gate=gate, message=message), gates=gates, **base)
