"""`okgit bench kernelbench`: run okgit on every selected problem and score the sweep.

Each problem runs in its own temporary git repository (the problem file copied in and
committed) as a subprocess (okgit.kernelbench.solve: its run and the check of its winner), so
one problem's crash cannot take the sweep down, and with --parallel N up to N run at once, each
pinned to its own GPU (CUDA_VISIBLE_DEVICES) when there are GPUs; on a GPU shared by several,
problems are admitted by their memory (okgit.kernelbench.admission). The eager and torch.compile
baselines are timed live next to okgit's winner on the same device.

Everything lands under --out: one state file per finished problem (a rerun with the same
--out skips those), the problem repositories with okgit's runs, logs, ledgers of each problem's
device time, the winners, and report.json / report.md. A time limit (`time_limit_s`) or
SIGTERM stops the sweep cleanly: no problem starts late, the problems in flight are
interrupted (their runs write their state, okgit.kernelbench.runs), the report is written from
the finished ones, and the next sweep with the same --out resumes the rest.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from okgit.config import RUN_FLAGS, Config, load_config
from okgit.errors import OkgitError, UsageError
from okgit.eval.parent.device_pool import DevicePool, Slot
from okgit.fmt import fmt_speed
from okgit.git.repo import Repo
from okgit.kernelbench import crosscheck
from okgit.kernelbench.admission import Admission, device_capacity, estimate
from okgit.kernelbench.models import run_model_problem
from okgit.kernelbench.reader import KBProblem, find_problems
from okgit.kernelbench.runs import ProblemInterrupted, Timer, out_of_memory, run_problem, slug
from okgit.kernelbench.scoring import ProblemResult, SweepReport, summarize
from okgit.kernelbench.timeline import last_footprint, record_running, running_at_once

CAMPAIGN_TOP = 4  # level 3: the modules and chains each model campaign optimizes (--top)
DEFAULT_TIMEOUT_S = 3600.0  # one problem's whole okgit run; a hang past it is recorded as `timeout`
SETTINGS_FILE = "sweep.json"
STOP_MARGIN_S = 60.0  # before a time limit: the problems in flight are stopped here, to write their state
START_CUTOFF_S = 60.0  # no problem starts this close to the stop: its reference would be prepared for nothing


def run_sweep(
    dir: Path | str,
    *,
    level: int | None = None,
    problems: str | None = None,
    parallel: int = 1,
    flags: dict[str, Any] | None = None,
    cross_check: bool = False,
    out: Path | str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    time_limit_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    top: int = CAMPAIGN_TOP,
) -> SweepReport:
    """`progress` is told one line per stage (the CLI prints them to stderr); None: silent.
    `time_limit_s`: the sweep ends cleanly before this many seconds, everything resumable (the
    report then lists what is `pending`); SIGTERM does the same at once and raises
    KeyboardInterrupt once the report is written."""
    if parallel < 1:
        raise UsageError("--parallel must be at least 1")
    if time_limit_s is not None and time_limit_s <= STOP_MARGIN_S:
        raise UsageError(f"--time-limit {time_limit_s:g}: must leave more than {STOP_MARGIN_S:.0f} s for the "
                         "problems in flight to stop and write their state")
    selected = find_problems(Path(dir), level, problems)
    flags = {k: v for k, v in (flags or {}).items() if k in RUN_FLAGS and v is not None}  # optimize's, passed on
    config = load_config(None, flags)  # bad flags fail here, before any problem starts
    out_dir = _out_dir(out)
    # a level-3 problem's figures depend on how many modules its campaign optimizes too
    _check_settings(out_dir, {**flags, "top": top} if any(p.level == 3 for p in selected) else flags)
    say = progress or (lambda line: None)
    say(f"sweep state in {out_dir} (rerun with --out {out_dir} to resume)")

    modal = config.eval == "modal"
    pool = DevicePool.local(parallel, device="cpu" if modal or config.device == "cpu" else None)
    gpu = any(d.startswith("cuda") for d in pool.devices)
    check_note, checking = _cross_check_plan(cross_check, gpu=gpu, modal=modal)

    done, pending = _finished(out_dir, selected, say)
    started = time.monotonic()
    stop = _Stop(started + time_limit_s - STOP_MARGIN_S if time_limit_s is not None else None)
    admission = Admission(device_capacity(pool.devices), lambda key: last_footprint(_ledger(out_dir, key)),
                          floored={p.key for p in selected if p.level == 3}) if gpu else None
    with contextlib.ExitStack() as owned:  # the evaluator made here, closed when the sweep ends
        timer, extra_env = _modal_baselines(config, flags, parallel, owned, say) if modal else (None, {})
        extra_env = {**_compile_threads(parallel), **extra_env}
        sweep = _Sweep(flags, out_dir, timeout_s, timer, gpu, checking, extra_env, top,
                       f"modal:{config.modal_gpu}" if modal else None, say, stop, admission)
        with stop.on_signals():
            reran = _run_all(pool, sweep, pending, done, out_dir, say)
    unfinished = [p.key for p in selected if p.key not in done]
    report = SweepReport(
        dir=str(Path(dir).resolve()), out=str(out_dir), device="modal" if modal else ("cuda" if gpu else "cpu"),
        devices=[f"modal:{config.modal_gpu}"] if modal else sorted({s.name for s in pool.slots}),
        parallel=parallel, flags=flags, wall_s=round(time.monotonic() - started, 1),
        problems=[done[p.key] for p in selected if p.key in done],
        summary=summarize([done[p.key] for p in selected if p.key in done]),
        cross_check=check_note, pending=unfinished,
        in_flight=[p.key for p in selected if p.key in unfinished and _in_flight(out_dir, p)],
        running_at_once_s=running_at_once(_ledger(out_dir, p.key) for p in selected),
    )
    report.calls_wall_s = _add_call(out_dir, report.wall_s)
    _write_report(report, out_dir, reran, stop)
    if stop.signalled:
        from okgit.run import Stopped

        raise Stopped(f"{stop.signalled}: the sweep stopped with {len(report.in_flight)} problem(s) in flight; "
                      f"rerun with --out {out_dir} to go on")
    return report


def _compile_threads(parallel: int) -> dict[str, str]:
    """Inductor's compile workers per process, so that N problems compiling at once share the
    host's cores rather than each starting one per core (what is compiled does not change);
    a setting of the user's stays."""
    if "TORCHINDUCTOR_COMPILE_THREADS" in os.environ or parallel == 1:
        return {}
    return {"TORCHINDUCTOR_COMPILE_THREADS": str(max(1, (os.cpu_count() or 1) // parallel))}


class _Stop(threading.Event):
    """Set at the sweep's stop time, or by SIGTERM / Ctrl-C: problems not started stay so, those
    running are interrupted and keep their state."""

    def __init__(self, at: float | None) -> None:
        super().__init__()
        self.at = at
        self.signalled: str | None = None
        if at is not None:
            timer = threading.Timer(max(0.0, at - time.monotonic()), self.set)
            timer.daemon = True
            timer.start()

    def left(self) -> float:
        return float("inf") if self.at is None else self.at - time.monotonic()

    @contextlib.contextmanager
    def on_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            self.signalled = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
            self.set()

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, before in previous.items():
                signal.signal(sig, before)


def _finished(out_dir: Path, selected: list[KBProblem],
              say: Callable[[str], None]) -> tuple[dict[str, ProblemResult], list[KBProblem]]:
    """The problems an earlier sweep in `out_dir` finished (by key), and those left to run."""
    done = {r.key: r for r in (_load_state(out_dir, p) for p in selected) if r is not None}
    pending = [p for p in selected if p.key not in done]
    if done:
        say(f"{len(done)} of {len(selected)} problems already finished in {out_dir}; running {len(pending)}")
    return done, pending


def _write_report(report: SweepReport, out_dir: Path, reran: list[str], stop: _Stop) -> None:
    """The report's notes, then report.json and report.md."""
    if report.device == "cpu":
        report.notes.append("no GPU: correctness is real; eager and torch.compile baselines are not timed")
    if reran:
        report.notes.append(f"ran again alone after an out-of-memory failure beside other problems: {', '.join(reran)}")
    if report.pending:
        why = stop.signalled or "its time limit"
        report.notes.append(f"partial: stopped by {why} with {len(report.pending)} problem(s) not finished "
                            f"({len(report.in_flight)} in flight, resumable from their runs); fast_p and the "
                            "geomean are over the finished problems only")
    (out_dir / "report.json").write_text(report.model_dump_json(indent=2) + "\n")
    (out_dir / "report.md").write_text(report.markdown())


@dataclass
class _Sweep:
    """What every problem's job shares."""

    flags: dict[str, Any]
    out_dir: Path
    timeout_s: float
    timer: Timer | None
    gpu: bool
    cross_check: bool
    extra_env: dict[str, str]
    top: int  # level 3: the modules and chains each campaign optimizes
    device: str | None  # modal:<gpu>; None: each slot's own
    say: Callable[[str], None]
    stop: _Stop = field(default_factory=lambda: _Stop(None))
    admission: Admission | None = None

    def job(self, problem: KBProblem, slot: Slot) -> ProblemResult | None:
        """One problem run in `slot`, its state saved and its line said; None when the sweep
        stopped before it could start or finish (its state then says how to go on)."""
        if self._late():
            return None
        with self._admitted(problem, slot) as admitted:
            return self._run(problem, slot) if admitted else None

    def next_job(self, problems: dict[str, KBProblem], slot: Slot) -> ProblemResult | None:
        """On a GPU shared by several problems: the first problem in the admission's line that
        fits beside those running on `slot`'s device, run there (`job`'s answer)."""
        assert self.admission is not None
        if self._late():
            return None
        taken = self.admission.take(slot.device, self.stop)
        if taken is None:
            return None
        key, waited = taken
        try:
            if self._late():  # admitted after a long wait: too close to the stop to start
                return None
            if waited > 1.0:
                self.say(f"{key}: waited {waited:.0f} s for room on {slot.name}")
            return self._run(problems[key], slot)
        finally:
            self.admission.leave(key, slot.device)

    def _late(self) -> bool:
        return self.stop.is_set() or self.stop.left() < START_CUTOFF_S

    def _run(self, problem: KBProblem, slot: Slot) -> ProblemResult | None:
        device = self.device or slot.name
        started = time.time()
        try:
            result = _run_problem(problem, slot, self.flags, self.out_dir, self.timeout_s, timer=self.timer,
                                  gpu=self.gpu, cross_check=self.cross_check, device=device,
                                  extra_env=self.extra_env, stop=self.stop, top=self.top)
        except ProblemInterrupted:
            again = "resumes it" if problem.level < 3 else "starts it over"  # a campaign is not resumable
            self.say(f"{problem.key}: stopped in flight; the next sweep with this --out {again}")
            return None
        except OkgitError as e:  # e.g. git or Modal failing for this problem: recorded, the sweep goes on
            result = ProblemResult(key=problem.key, level=problem.level, id=problem.id, name=problem.name,
                                   status="error", device=device, error=str(e))
        finally:
            record_running(_ledger(self.out_dir, problem.key), started, time.time())
        _save_state(_state_path(self.out_dir, problem), result)
        speed = f"{fmt_speed(result.speedup_eager)} vs eager" if result.speedup_eager is not None else "untimed"
        self.say(f"{result.key}: {result.status}, {'correct' if result.correct else 'not correct'}, {speed} "
                 f"({result.wall_s:.0f} s on {result.device})")
        return result

    @contextlib.contextmanager
    def _admitted(self, problem: KBProblem, slot: Slot) -> Iterator[bool]:
        """Held while the problem runs: on a GPU, once it fits beside the others there."""
        if self.admission is None:
            yield True
            return
        need = _estimate(problem)
        waited = self.admission.enter(problem.key, slot.device, need, self.stop)
        if waited is None:
            yield False
            return
        if waited > 1.0:
            self.say(f"{problem.key}: waited {waited:.0f} s for room on {slot.name} (about {need / 2**30:.0f} GiB)")
        try:
            yield True
        finally:
            self.admission.leave(problem.key, slot.device)


def _modal_baselines(config: Config, flags: dict[str, Any], parallel: int, owned: contextlib.ExitStack,
                     say: Callable[[str], None]) -> tuple[Timer, dict[str, str]]:
    """On Modal: the baselines' timer and the environment of each problem's process. One
    container limit for the whole sweep: each problem's process, and the baselines timed after
    it in the same slot, get an equal share of it (at least one each)."""
    from okgit.eval.modal.client import MAX_CONTAINERS_ENV, ModalEvaluator, max_containers_setting
    from okgit.eval.registry import make_evaluator

    share = max(1, max_containers_setting() // parallel)
    baselines = owned.enter_context(make_evaluator(config, max_containers=share, on_note=say))
    assert isinstance(baselines, ModalEvaluator)  # config.eval is "modal" here
    timer = functools.partial(baselines.time_baselines, backend=flags.get("backend") or "triton")
    return timer, {MAX_CONTAINERS_ENV: str(share)}


def _estimate(p: KBProblem) -> int:
    return estimate(p.path, model=p.level == 3)


def _run_all(pool: DevicePool, sweep: _Sweep, pending: list[KBProblem], done: dict[str, ProblemResult],
             out_dir: Path, say: Callable[[str], None]) -> list[str]:
    """Every pending problem into `done` (those the sweep stopped before their end stay out);
    the keys of those run again alone. On a GPU the problems wait in one line, those resumed
    from their runs first, then the largest (by their memory estimate) first: the largest start
    as soon as there is room for them, the small ones fill the room beside them."""
    if sweep.admission is not None:
        needs = {p.key: _estimate(p) for p in pending}
        line = sorted(pending, key=lambda p: (not _in_flight(out_dir, p), -needs[p.key]))
        sweep.admission.line_up([(p.key, needs[p.key]) for p in line])
        by_key = {p.key: p for p in pending}
        results = pool.map(lambda _, slot: sweep.next_job(by_key, slot), pending)
    else:
        results = pool.map(sweep.job, pending)
    for r in results:
        if r is not None:
            done[r.key] = r
    reran: list[str] = []
    # A problem that failed for the device's memory while others ran beside it is run
    # again alone, so that its verdict is never another problem's doing (one that ran alone
    # is not: its own memory is its verdict, and running it again would only repeat it).
    if len(pool.slots) > 1:
        crowded = sweep.admission.had_company if sweep.admission is not None else lambda key: True
        for p in [p for p in pending if p.key in done and crowded(p.key) and out_of_memory(done[p.key], out_dir, p)]:
            say(f"{p.key}: out of memory with {len(pool.slots)} problems at once; running it again alone")
            again = sweep.job(p, pool.slots[0])
            if again is None:  # stopped: it runs again in the next sweep, not counted as its first run's error
                del done[p.key]
                _state_path(out_dir, p).unlink(missing_ok=True)
                continue
            done[p.key] = again
            reran.append(p.key)
    return reran


# --- the sweep's directory ---------------------------------------------------------------------


def _out_dir(out: Path | str | None) -> Path:
    if out:
        path = Path(out).expanduser().resolve()
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        try:
            repo = Repo.find(Path.cwd())
            repo.ensure_excluded()
            path = repo.okgit_dir / "bench" / stamp
        except OkgitError:  # not in a git repository: leave the user's directory alone
            import tempfile

            path = Path(tempfile.mkdtemp(prefix=f"okgit-bench-{stamp}-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _check_settings(out_dir: Path, flags: dict[str, Any]) -> None:
    """A resumed sweep must run with the settings it started with, or its figures mix two sweeps."""
    path = out_dir / SETTINGS_FILE
    if path.exists():
        before = json.loads(path.read_text()).get("flags", {})
        if before != flags:
            raise OkgitError(f"{out_dir} holds a sweep run with other flags ({_flag_text(before)} vs "
                             f"{_flag_text(flags)}): resume with the same flags or choose another --out")
    else:
        path.write_text(json.dumps({"flags": flags}, indent=2) + "\n")


def _flag_text(flags: dict[str, Any]) -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(flags.items())) or "no flags"


def _in_flight(out_dir: Path, p: KBProblem) -> bool:
    """Whether an earlier sweep stopped `p` in flight (its run resumes)."""
    return (out_dir / "in_flight" / f"{slug(p)}.json").is_file()


def _state_path(out_dir: Path, p: KBProblem) -> Path:
    return out_dir / "state" / f"{slug(p)}.json"


def _ledger(out_dir: Path, key: str) -> Path:
    """A problem's ledger by its key (okgit.kernelbench.runs.Workspace names it by its slug)."""
    level, rest = key.split("/", 1)
    return out_dir / "ledgers" / f"{level}_{rest}.jsonl"


def _add_call(out_dir: Path, wall_s: float) -> float:
    """This call's wall time added to the sweep's (`calls.json`); the total so far."""
    path = out_dir / "calls.json"
    try:
        calls = json.loads(path.read_text())
    except (OSError, ValueError):
        calls = []
    calls.append({"wall_s": wall_s, "ended": datetime.now().isoformat(timespec="seconds")})
    path.write_text(json.dumps(calls, indent=1) + "\n")
    return round(sum(float(c.get("wall_s", 0.0)) for c in calls), 1)


def _load_state(out_dir: Path, p: KBProblem) -> ProblemResult | None:
    path = _state_path(out_dir, p)
    if not path.exists():
        return None
    try:
        return ProblemResult.model_validate_json(path.read_text())
    except ValueError:  # a state file cut short: run the problem again
        return None


def _save_state(path: Path, result: ProblemResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(result.model_dump_json(indent=2) + "\n")
    tmp.replace(path)  # atomic: a state file is whole or absent


def _cross_check_plan(wanted: bool, *, gpu: bool, modal: bool) -> tuple[str | None, bool]:
    if not wanted:
        return None, False
    if not crosscheck.available():
        return "not run: the kernelbench package is not installed (pip install it, or install a KernelBench checkout)", False
    if modal:
        return "not run: --cross-check runs KernelBench's evaluation on a local GPU, not on Modal", False
    if not gpu:
        return "not run: KernelBench's evaluation needs a GPU", False
    return "KernelBench's eval_kernel_against_ref on each correct winner, same device", True


# --- one problem -------------------------------------------------------------------------------


def _run_problem(p: KBProblem, slot: Slot, flags: dict[str, Any], out_dir: Path, timeout_s: float, *,
                 timer: Timer | None, gpu: bool, cross_check: bool, device: str,
                 extra_env: dict[str, str] | None = None, stop: threading.Event | None = None,
                 top: int = CAMPAIGN_TOP) -> ProblemResult:
    if p.level == 3:  # a whole model: one campaign over its top modules and chains (stopped, it starts over)
        return run_model_problem(p, slot, flags, out_dir, timeout_s, timer=timer, gpu=gpu, device=device,
                                 extra_env=extra_env, top=top, stop=stop)
    return run_problem(p, slot, flags, out_dir, timeout_s, timer=timer, gpu=gpu, cross_check=cross_check,
                       device=device, extra_env=extra_env, stop=stop)
