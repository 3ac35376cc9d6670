"""A run as its journal tells it: the one fold of its events into plain data, with no terminal
in sight.

Every reader of a run reads it through this model: the watch view (okgit.tui), the plain
progress lines, the report's figures, `okgit history` (okgit.git.history, a projection of it)
and the KernelBench sweep's rows, so they agree and it can be tested without a terminal. It
folds events as their models (okgit.journal.events); a line no model reads was skipped when
it was read (a view may read a journal written by another okgit version on another machine).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from okgit.fmt import fmt_duration, fmt_error, fmt_speed
from okgit.journal.events import (
    Accepted,
    Best,
    DiagnosisEvent,
    EvalErrorFields,
    Evaluated,
    Event,
    GateEvent,
    IntentEvent,
    InterruptedEvent,
    LlmCall,
    Note,
    Profiled,
    ProposalEvent,
    ReferenceEvent,
    Resumed,
    RunFinished,
    RunStarted,
)
from okgit.status import Status

# A candidate is "running" from its `proposal` until its `evaluated` event arrives.
RUNNING = "running"
OFFLINE = "offline"  # the search without a model: kernel templates, then autotune


def proposer_name(model: str | None) -> str:
    """What searched: `offline` (no model), `replay` (a recorded traces file) or `llm`; the
    one name history, watch, doctor and --help use for the search without a model."""
    if not model:
        return OFFLINE
    return "replay" if model.startswith("replay:") else "llm"


@dataclass
class Candidate:
    cand: str
    origin: str = ""
    intent: str = ""
    parent: str | None = None
    backend: str = ""
    status: str = RUNNING
    correct: bool = False
    timed: bool = False
    speedup: float | None = None
    runtime_us: float | None = None
    error: EvalErrorFields | None = None
    profile: dict[str, Any] | None = None
    wall_s: float | None = None
    phase_s: dict[str, float] = field(default_factory=dict)  # where wall_s went (okgit.eval.parent.phases)
    tag: str | None = None
    diagnosis: DiagnosisEvent | None = None

    @property
    def failed(self) -> bool:
        return self.status not in (RUNNING, Status.correct)


@dataclass
class Intent:
    id: str
    description: str = ""
    parent: str | None = None
    priority: float | None = None
    status: str = ""
    attempts: int = 0
    best_speedup: float | None = None


@dataclass
class LogLine:
    ts: float
    text: str


@dataclass
class RunView:
    run: str = ""  # the run's id (the watch view knows it before run_started)
    # What the first run_started says (an older okgit wrote another on resume)
    started_event: RunStarted | None = None
    op: str = ""
    device: str = ""
    backend: str = ""
    model: str | None = None
    mode: str = ""
    iterations: int | None = None  # the run's iteration budget (N)
    started: float | None = None
    last_ts: float | None = None
    reference: ReferenceEvent | None = None
    candidates: dict[str, Candidate] = field(default_factory=dict)
    intents: dict[str, Intent] = field(default_factory=dict)
    log: list[LogLine] = field(default_factory=list)
    gates: list[GateEvent] = field(default_factory=list)
    cost_usd: float = 0.0
    best: Best | None = None  # the search's latest best
    interrupted: str | None = None
    finished: RunFinished | None = None
    version: int = 0  # bumped by every folded event, so the screen redraws only on change

    def apply(self, events: Iterable[Event]) -> None:
        for event in events:
            self.fold(event)

    def fold(self, event: Event) -> None:
        self.last_ts = event.ts if self.last_ts is None else max(self.last_ts, event.ts)
        self.version += 1
        handler = _FOLDS.get(type(event))
        if handler:
            handler(self, event)

    @property
    def evaluated(self) -> int:
        return sum(1 for c in self.candidates.values() if c.status != RUNNING)

    @property
    def status(self) -> str:
        if self.finished:
            return self.finished.status or "finished"
        return "interrupted" if self.interrupted else RUNNING

    @property
    def timed(self) -> bool:
        """Whether speedups mean anything here: a CPU run checks correctness only."""
        return bool(self.reference and self.reference.timed) or any(c.timed for c in self.candidates.values())

    @property
    def best_cand(self) -> str | None:
        return self.best.cand if self.best else None

    @property
    def winner(self) -> str | None:
        """The final gate's pick once the run finished, the search's best until then."""
        if self.finished and self.finished.best_cand:
            return self.finished.best_cand
        return self.best_cand

    def elapsed(self, now: float) -> float:
        if self.started is None:
            return 0.0
        # The clock stops with the run; only a run still going counts up to now.
        end = self.last_ts if (self.finished or self.interrupted) and self.last_ts else now
        return max(0.0, end - self.started)

    def progress(self) -> list[float]:
        """One point per evaluated candidate: the best speedup so far (0 until one is correct
        and timed), or on an untimed run the number of correct candidates so far."""
        points: list[float] = []
        best, correct = 0.0, 0
        for c in self.candidates.values():
            if c.status == RUNNING:
                continue
            if c.correct:
                correct += 1
                if c.timed and c.speedup is not None:
                    best = max(best, c.speedup)
            points.append(best if self.timed else float(correct))
        return points

    def best_speedup(self) -> float | None:
        speeds = [c.speedup for c in self.candidates.values() if c.correct and c.timed and c.speedup is not None]
        return max(speeds) if speeds else None

    def log_lines(self, since: int = 0) -> list[str]:
        """The log from line `since` on, each line as the watch view shows it: time since the
        run started, then what happened."""
        start = self.started or (self.log[0].ts if self.log else 0.0)
        return [f"+{fmt_duration(max(0.0, line.ts - start)):>6} {line.text}" for line in self.log[since:]]

    def _log(self, e: Event, text: str) -> None:
        self.log.append(LogLine(ts=e.ts, text=text))

    def _candidate(self, cand: str) -> Candidate:
        return self.candidates.setdefault(cand, Candidate(cand=cand))


def _run_started(view: RunView, e: RunStarted) -> None:
    if view.started_event is None:
        view.started_event, view.started = e, e.ts
        view.op, view.device, view.backend, view.model, view.mode = e.op, e.device, e.backend, e.model, e.mode
        view.iterations = e.iterations
    view.run = e.run
    view.finished = None
    view._log(e, f"run {e.run} started: {e.op} on {e.device} ({e.backend}, {e.mode})")


def _reference(view: RunView, e: ReferenceEvent) -> None:
    view.reference = e
    if e.timed and e.runtime_us is not None:
        view._log(e, f"baseline {e.runtime_us:.1f} us on {e.device}")
    else:
        view._log(e, f"baseline correct on {e.device}; no timing claimed there")


def _profiled(view: RunView, e: Profiled) -> None:
    """A profiling pass's profile replaces the evaluation's (it holds the same figures and more)."""
    if e.cand is None:
        if view.reference is not None:
            view.reference = view.reference.model_copy(update={"profile": e.profile})
    else:
        view._candidate(e.cand).profile = e.profile
    tools = " and ".join(e.tools) or "no counters"
    view._log(e, f"{e.cand or 'baseline'} profiled in {e.seconds:.1f} s ({tools})")


def _proposal(view: RunView, e: ProposalEvent) -> None:
    c = view._candidate(e.cand)
    c.origin, c.intent, c.parent, c.backend = e.origin, e.intent, e.parent, e.backend
    view._log(e, f"{c.cand} proposed by {c.origin}" + (f": {c.intent}" if c.intent else ""))


def _evaluated(view: RunView, e: Evaluated) -> None:
    c = view._candidate(e.cand)
    c.status, c.correct, c.timed, c.speedup, c.runtime_us = e.status or "error", e.correct, e.timed, e.speedup, e.runtime_us
    c.error, c.profile, c.wall_s, c.phase_s = e.error, e.profile, e.wall_s, e.phase_s or {}
    view._log(e, f"{c.cand} {c.status}" + (f" {fmt_speed(c.speedup)}" if c.speedup is not None else "")
              + (f" ({fmt_error(c.error)})" if c.error else ""))


def _accepted(view: RunView, e: Accepted) -> None:
    view._candidate(e.cand).tag = e.tag


def _best(view: RunView, e: Best) -> None:
    view.best = e
    view._log(e, f"new best {e.cand}" + (f" {fmt_speed(e.speedup)}" if e.speedup else ""))


def _intent(view: RunView, e: IntentEvent) -> None:
    intent = view.intents.setdefault(e.id, Intent(id=e.id))
    if e.op == "prune":
        intent.status = "pruned"
        return
    for name in ("description", "parent", "priority", "status", "attempts", "best_speedup"):
        if getattr(e, name) is not None:  # None leaves what an earlier event said
            setattr(intent, name, getattr(e, name))


def _diagnosis(view: RunView, e: DiagnosisEvent) -> None:
    view._candidate(e.cand).diagnosis = e
    issue = e.specific_issue or e.bottleneck_type
    view._log(e, f"critic on {e.cand}: {issue}" + (f" -> {e.recommendation}" if e.recommendation else ""))


def _llm_call(view: RunView, e: LlmCall) -> None:
    cost = e.cost_usd or 0.0
    view.cost_usd += cost
    view._log(e, f"llm {e.role} {e.model}: {e.prompt_tokens}+{e.completion_tokens} tokens, ${cost:.4f}, "
              f"{e.latency_s:.1f} s" + ("" if e.ok else " FAILED"))


def _note(view: RunView, e: Note) -> None:
    view._log(e, e.message)


def _resumed(view: RunView, e: Resumed) -> None:
    view.finished = None  # an interrupted run goes on
    view._log(e, e.message)


def _gate(view: RunView, e: GateEvent) -> None:
    view.gates.append(e)
    verdict = "passed" if e.passed else "failed"
    view._log(e, f"final gate {e.name} on {e.cand}: {verdict}" + (f" ({e.detail})" if e.detail else ""))


def _interrupted(view: RunView, e: InterruptedEvent) -> None:
    view.interrupted = e.reason or "interrupted"
    view._log(e, f"interrupted ({view.interrupted})")


def _run_finished(view: RunView, e: RunFinished) -> None:
    view.finished = e
    view.cost_usd = e.cost_usd  # the run's own total wins over our sum
    speed = f" {fmt_speed(e.speedup)}" if e.speedup is not None else ""
    view._log(e, f"run finished: {e.status}{speed}" + (f", best {e.best_tag}" if e.best_tag else ""))


_FOLDS: dict[type[Event], Callable[[RunView, Any], None]] = {
    RunStarted: _run_started, ReferenceEvent: _reference, ProposalEvent: _proposal, Evaluated: _evaluated, Profiled: _profiled,
    Accepted: _accepted, Best: _best, IntentEvent: _intent, DiagnosisEvent: _diagnosis, LlmCall: _llm_call,
    Note: _note, Resumed: _resumed, GateEvent: _gate, InterruptedEvent: _interrupted, RunFinished: _run_finished,
}
