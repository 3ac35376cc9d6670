"""`okgit optimize`: one run on one op file, from the user's checkout to a reviewable patch.

What can fail on bad input fails before the search begins: config and the op file before
anything is created; running its reference after the run exists (so progress and `watch
latest` show it being prepared), and a run refused there is removed again. Either way a
refused run leaves no trace in the repository.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Protocol

from pydantic import BaseModel, PrivateAttr

from okgit.config import Config, load_config
from okgit.errors import OkgitError
from okgit.eval.base import Evaluator
from okgit.eval.parent.devices import stage
from okgit.eval.parent.sandbox import live_processes, stop_all  # before any handler: a Ctrl-C mid-import breaks cleanup
from okgit.eval.registry import make_evaluator
from okgit.eval.types import Comparison, EvalResult, ProfileData, Reference
from okgit.final_gate import Unjudged, final_gate
from okgit.fmt import fmt_speed
from okgit.git.repo import Repo
from okgit.git.rundir import RunDir
from okgit.journal.events import Accepted, Evaluated, Event, LlmCall, Preparing, Profiled
from okgit.paths import given_path
from okgit.problem import Problem, load_problem
from okgit.search.driver import Budget, Search, is_better
from okgit.search.registry import make_proposers
from okgit.search.types import Attempt, Context, Proposal, Proposer
from okgit.status import CORRECT, RESUMABLE, RunStatus
from okgit.views.figures import import_ahead


class RunResult(BaseModel):
    """What `okgit optimize --json` prints (a stable contract: see docs/json.md)."""

    run_id: str
    status: RunStatus
    speedup: float | None = None
    baseline_us: float | None = None
    best_us: float | None = None
    best_tag: str | None = None
    report: str
    diff: str
    op: str
    device: str
    candidates: int = 0
    stop_reason: str = ""
    cost_usd: float = 0.0
    error: str | None = None  # status `error`: what the machine failed, so that no verdict could be reached
    _finished_before: bool = PrivateAttr(default=False)  # --resume of a run that had already finished

    def summary(self) -> str:
        lines = [f"run {self.run_id}: {self.status}" + (" (already finished; nothing to resume)" if self._finished_before else "")]
        if self.status == RunStatus.slower and self.speedup is not None:
            lines.append(f"  the fastest correct candidate is slower than the baseline: {self.speedup:.2f}x "
                         f"({self.baseline_us:.1f} us -> {self.best_us:.1f} us on {self.device}); nothing is handed out")
        elif self.speedup is not None:
            lines.append(f"  speedup {self.speedup:.2f}x ({self.baseline_us:.1f} us -> {self.best_us:.1f} us on {self.device})")
        elif self.status == RunStatus.unverified:
            lines.append(f"  a correct kernel was found on {self.device}; no timing is claimed there")
        if self.error:
            lines += [f"  cause: {self.error}", f"  okgit optimize {self.op} --resume {self.run_id} tries again"]
        if self.best_tag:
            lines.append(f"  {'kept for inspection' if self.status == RunStatus.slower else 'best'}: {self.best_tag}")
        lines.append(f"  report: {self.report}")
        if self.status in CORRECT and self.best_tag:  # otherwise report.diff is empty: nothing is handed out
            lines.append(f"  diff:   {self.diff}")
        return "\n".join(lines)


def optimize(
    path: Path | None,
    *,
    flags: dict[str, Any] | None = None,
    resume: str | None = None,
    on_event: Callable[[Event], None] | None = None,
    watcher: Watcher | None = None,
    cwd: Path | None = None,
    evaluator: Evaluator | None = None,
    proposers: list[Proposer] | None = None,
) -> RunResult:
    """`path` may be None with `resume` (the run's own op). `on_event` gets each journal event
    as its model once written (okgit.journal.events), and a `Preparing` before the first.
    `watcher`: a live view already started (`optimize --watch`), told the run's directory."""
    repo = Repo.working_in(cwd or Path.cwd(), path)
    # From the start: a signal while the reference is prepared must stop its judge too.
    in_main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    try:
        return _optimize(repo, path, flags, resume, on_event, watcher, cwd, evaluator, proposers)
    except KeyboardInterrupt as e:
        if watcher:
            watcher.abort()
        reason, live = (e.reason, e.live) if isinstance(e, _Signalled) else ("Ctrl-C", [])
        stopped = sorted(set(live) | set(stop_all()), key=lambda n: int(n.split()[1]))  # with what no evaluator held
        raise Stopped(f"{reason}: stopped {_processes(stopped)}; their directories are removed" if stopped
                          else f"{reason}: no process of okgit was running") from None
    except BaseException:
        if watcher:
            watcher.abort()  # refused before the run began: give the terminal back
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Stopped(KeyboardInterrupt):
    """Ctrl-C or SIGTERM ended `optimize`: `message` says what okgit stopped (the CLI prints it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _processes(names: list[str]) -> str:
    """'judge 12, worker 13 and worker 14' -> 'a judge and 2 workers (pids 12, 13, 14)'."""
    kinds = [n.split()[0] for n in names]
    parts = [f"{kinds.count(k)} {k}s" if kinds.count(k) > 1 else f"a {k}" for k in sorted(set(kinds))]
    return f"{' and '.join(parts)} (pids {', '.join(n.split()[1] for n in names)})"


def _on_signal(signum, frame):
    raise _Signalled("Ctrl-C" if signum == signal.SIGINT else "SIGTERM", live_processes())


class Watcher(Protocol):
    """A live view of the run in another process (okgit.tui.launch.WatchProcess)."""

    def attach(self, run_dir: Path) -> None: ...  # the run exists: show it

    def abort(self) -> None: ...  # the run was refused: close the view, if it is still open

    def wait(self) -> None: ...  # the run is over: hand the terminal back when the view closes


def _optimize(repo: Repo, path: Path | None, flags, resume: str | None, on_event, watcher: Watcher | None, cwd: Path | None,
              evaluator: Evaluator | None, proposers: list[Proposer] | None) -> RunResult:
    from okgit.git import workspace

    config = load_config(repo.root, flags)
    if config.model and not config.model.startswith("replay:") and proposers is None:
        from okgit.llm import check_credentials, check_price

        check_credentials(config.model, config.api_base)  # a missing key: one line now, not a fallback later
        check_price(config.model, config.api_base, config.prices, config.budget_usd)
    if resume:
        resume = _resumed_run(repo, resume, path, cwd)
        if not workspace.resumable(repo, resume):
            return _finished_result(repo, resume)
        space = workspace.resume(repo, resume)
        op_file = space.worktree / space.op
        problem = load_problem(space.op, source=_base_source(space), root=str(op_file.parent))
    else:
        if path is None:
            raise OkgitError("optimize needs the op file's path (or a run to resume)")
        op_path = given_path(path, cwd)
        rel = workspace.check_op(repo, op_path)
        problem = load_problem(rel, source=op_path.read_text(), root=str(op_path.parent))
    problem = replace(problem, **config.problem_settings(problem.path))
    if not resume:
        space = workspace.start_run(repo, op_path)  # the run id exists from here: `watch latest` finds it
    with contextlib.ExitStack() as owned:  # an evaluator made here is closed here; a given one is the caller's
        try:  # from the first line on: a signal right after it still finds the run discarded
            if watcher:
                watcher.attach(space.run_dir)
            if on_event:  # progress before the journal can say anything (run_started needs the evaluator's device)
                on_event(Preparing(ts=time.time(), run=space.run_id, op=space.op, eval=config.eval))
            # what the evaluator says while it starts (a Modal app: minutes), shaped as the journal's notes
            note = (lambda message: on_event({"type": "note", "ts": round(time.time(), 3), "run": space.run_id,
                                               "message": message})) if on_event else None
            evaluator = evaluator or owned.enter_context(make_evaluator(config, on_note=note))
            if not resume:
                _log_started(space, config, evaluator.device, on_event)
            proposers = proposers if proposers is not None else make_proposers(config)
            for proposer in proposers:  # work that needs only the op, beside the reference's preparation
                ahead = getattr(proposer, "ahead", None)
                if ahead:
                    ahead(problem, evaluator.device)
            import_ahead()
            reference = evaluator.reference(problem)
            if reference.degenerate:
                raise OkgitError(f"{problem.path}: the reference cannot tell right from wrong: {reference.degenerate}")
        except BaseException:
            if not resume:
                space.discard()  # refused (or Ctrl-C, SIGTERM) before the search began: the run leaves no trace
            raise
        return _run(space, config, problem, reference, evaluator, proposers, on_event, resumed=bool(resume),
                    watcher=watcher)


def _resumed_run(repo: Repo, resume: str, path: Path | None, cwd: Path | None) -> str:
    """The full id of the run `--resume` names, refused when PATH is another op than its own."""
    from okgit.git import workspace

    resume = workspace.resolve_run(repo, resume)
    op = workspace.started_event(repo, resume).op
    if path is not None and repo.relpath(given_path(path, cwd)) != op:
        raise OkgitError(f"run {resume} optimizes {op}, not {path}")
    return resume


def _log_started(space, config: Config, device: str, on_event) -> None:
    """The journal's first events, written before the reference runs (it takes seconds, on a CPU minutes)."""
    for event in (
        space.journal.write("run_started", **space.started_fields(), backend=config.backend, device=device,
                            mode=config.mode, model=config.model, eval=config.eval, iterations=config.iteration_budget),
        space.journal.write("note", message=f"running the reference of {space.op} on {device}"
                            + (" (Triton's interpreter: slow)" if device == "cpu" else "")),
    ):
        if on_event:
            on_event(event)


def _finished_result(repo: Repo, run_id: str) -> RunResult:
    """What a finished run printed when it finished: resuming it has nothing left to do."""
    path = RunDir(repo.run_dir(run_id)).result
    try:
        result = RunResult.model_validate_json(path.read_text())
    except (OSError, ValueError):
        raise OkgitError(f"run {run_id} is finished; nothing to resume (see okgit history {run_id})") from None
    result._finished_before = True
    return result


def _base_source(space) -> str:
    return space.repo.git("show", f"{space.base_commit}:{space.op}", cwd=space.worktree)


class _Signalled(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, turned into an exception so the run writes what it has; `live`: the
    processes okgit had running when it came."""

    def __init__(self, reason: str = "Ctrl-C", live: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason, self.live = reason, live or []


def _run(space, config: Config, problem: Problem, reference: Reference, evaluator: Evaluator,
         proposers: list[Proposer], on_event, resumed: bool, watcher: Watcher | None) -> RunResult:
    signals: list[str] = []  # received and not yet acted on

    def on_signal(signum, frame):
        signals.append("Ctrl-C" if signum == signal.SIGINT else "SIGTERM")
        _on_signal(signum, frame)

    def log(type: str, **fields):
        if signals:  # a signal whose exception some library swallowed: honour it at the next event
            raise _Signalled(signals[0])
        event = space.journal.write(type, **fields)
        if on_event:
            on_event(event)
        return event

    def trace(type: str, **fields):
        space.traces.write(type, **fields)

    if resumed:
        preload = getattr(on_event, "preload", None)
        if preload:  # progress counts on from where the run stopped
            preload(RunDir(space.run_dir).events())
        log("resumed", message=f"resumed run {space.run_id}")
    else:
        if space.base_dirty:
            log("note", message=f"{space.op} has uncommitted changes: its working-tree version is the base")
        trace("reference", path=problem.path, source=problem.source)
        log("reference", runtime_us=reference.runtime_us, timed=reference.timed, device=reference.device,
            profile=reference.profile, degenerate=reference.degenerate, shapes=reference.shapes,
            flags=reference.flags, hardware=reference.hardware)

    ctx = Context(problem=problem, reference=reference, backend=config.backend, device=evaluator.device,
                  hardware=reference.hardware, log=log, trace=trace)
    if resumed:
        _restore(space, ctx)

    def accept(attempt: Attempt) -> str:
        r = attempt.result
        speed = fmt_speed(r.speedup, missing="untimed")
        message = f"okgit {attempt.cand}: {attempt.proposal.intent or attempt.proposal.origin}\n\n" \
                  f"origin: {attempt.proposal.origin}\nstatus: {r.status.value}\nspeedup: {speed} on {r.device}\n"
        tag, commit = space.accept(attempt.cand, attempt.proposal.source, message)
        log("accepted", cand=attempt.cand, tag=tag, commit=commit, speedup=r.speedup)
        return tag

    # Signal handlers can only be set from the main thread (library callers may use others).
    in_main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    search = Search(ctx, evaluator, Budget(
        iterations=config.iteration_budget, patience=config.patience, time_s=config.time_budget_s,
        usd=config.budget_usd, target_speedup=config.target_speedup), accept, mode="fast", profiler=config.profiler)
    try:
        if resumed:  # a correct candidate whose run stopped after its verdict, before its tag: tagged now
            for attempt in ctx.attempts:
                if attempt.result.correct and attempt.tag is None:
                    attempt.tag = accept(attempt)
        stop_reason = search.run(proposers)
        log("note", message=f"search ended: {stop_reason}")
        try:
            with stage("final gate"):  # its device holds, in the ledger of a sweep's problem
                status, winner, comparison = final_gate(ctx, evaluator, config, log)
        except Unjudged as e:
            log("note", message=f"the run ends in error: {e}")
            return _finish(space, ctx, RunStatus.error, None, None, stop_reason, search.spent_usd, log, cause=str(e))
        return _finish(space, ctx, status, winner, comparison, stop_reason, search.spent_usd, log)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM (_Signalled)
        reason = signals[0] if signals else "Ctrl-C"
        live = e.live if isinstance(e, _Signalled) else []
        signals.clear()
        log("interrupted", reason=reason)
        _finish(space, ctx, RunStatus.interrupted, ctx.best, None, "interrupted", search.spent_usd, log)
        raise _Signalled(reason, live) from None
    except Exception as e:
        # Still write what the run has and leave the repository consistent, then report.
        signals.clear()
        log("interrupted", reason=f"error: {type(e).__name__}: {e}")
        _finish(space, ctx, RunStatus.interrupted, ctx.best, None, f"error: {e}", search.spent_usd, log)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if watcher:
            watcher.wait()


def _restore(space, ctx: Context) -> None:
    """Rebuild the attempts of an interrupted run from its traces, and what its model calls
    cost from its journal, so the search continues within the same budgets."""
    from okgit.journal.files import read_jsonl

    events = RunDir(space.run_dir).events()
    tags = {e.cand: e.tag for e in events if isinstance(e, Accepted)}
    ctx.spent_usd = sum(e.cost_usd or 0.0 for e in events if isinstance(e, (LlmCall, Evaluated)))
    ctx.earlier = events  # the model proposer rebuilds its intent tree and failures from them
    profiles = {e.cand: e.profile for e in events if isinstance(e, Profiled)}  # the profiling pass's, where it ran
    if None in profiles:
        ctx.reference = ctx.reference.model_copy(update={"profile": ProfileData.model_validate(profiles[None])})
    for rec in read_jsonl(RunDir(space.run_dir).traces)[0]:
        if rec["type"] != "candidate":
            continue
        proposal = Proposal(source=rec["source"], origin=rec["origin"], intent=rec.get("intent", ""), parent=rec.get("parent"))
        result = EvalResult.model_validate(rec["result"])
        if rec["cand"] in profiles:
            result.profile = ProfileData.model_validate(profiles[rec["cand"]])
        attempt = Attempt(cand=rec["cand"], proposal=proposal, result=result, tag=tags.get(rec["cand"]))
        ctx.attempts.append(attempt)
        if is_better(attempt, ctx.best):
            ctx.best = attempt


def _finish(space, ctx: Context, status: RunStatus, winner: Attempt | None, comparison: Comparison | None,
            stop_reason: str, cost_usd: float, log, cause: str | None = None) -> RunResult:
    from okgit.git import patch
    from okgit.views.report import write_report

    handed_out = winner is not None and winner.tag is not None and status in CORRECT  # `slower` shows its tag only
    diff = space.diff(winner.tag) if handed_out and winner and winner.tag else ""
    if diff:
        patch.validate(space.repo, diff, space.base_commit)
    diff_path = RunDir(space.run_dir).diff
    diff_path.write_text(diff)
    result = RunResult(
        run_id=space.run_id, status=status, op=space.op, device=ctx.device,
        speedup=comparison.speedup if comparison else None,
        baseline_us=statistics.median(comparison.baseline_us) if comparison else None,
        best_us=statistics.median(comparison.candidate_us) if comparison else None,
        best_tag=winner.tag if winner else None,
        report=str(RunDir(space.run_dir).report), diff=str(diff_path),
        candidates=len(ctx.attempts), stop_reason=stop_reason, cost_usd=round(cost_usd, 6), error=cause,
    )
    write_report(space, ctx, result, winner, comparison, diff)
    RunDir(space.run_dir).result.write_text(result.model_dump_json(indent=2) + "\n")
    log("run_finished", status=status, error=cause, speedup=result.speedup, baseline_us=result.baseline_us, best_us=result.best_us,
        best_tag=result.best_tag, best_cand=winner.cand if winner else None, report=result.report, diff=result.diff,
        iterations=len(ctx.attempts), cost_usd=result.cost_usd)
    # An interrupted run keeps its branch whatever it has, so --resume can rebuild the worktree.
    space.close(winner_commit=winner.tag if handed_out and winner else None,
                accepted=status in RESUMABLE or any(a.tag for a in ctx.attempts))
    return result
