"""A run as its journal tells it: events folded into plain data, with no terminal in sight.

The watch view (okgit.tui), the plain progress lines (okgit.progress) and the report's
figures (okgit.figures) all read a run through this one model, so they agree and it can be
tested without a terminal. Folding is tolerant: unknown event types and missing fields are skipped,
because a view may read a journal written by another okgit version on another machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from okgit.eval.types import Status
from okgit.fmt import fmt_error, fmt_speed

Event = dict[str, Any]

# A candidate is "running" from its `proposal` until its `evaluated` event arrives.
RUNNING = "running"


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
    error: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None
    wall_s: float | None = None
    tag: str | None = None
    diagnosis: dict[str, Any] | None = None

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
    run: str = ""
    op: str = ""
    device: str = ""
    backend: str = ""
    model: str | None = None
    mode: str = ""
    iterations: int | None = None  # the run's iteration budget (N)
    started: float | None = None
    last_ts: float | None = None
    reference: Event = field(default_factory=dict)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    intents: dict[str, Intent] = field(default_factory=dict)
    log: list[LogLine] = field(default_factory=list)
    gates: list[Event] = field(default_factory=list)
    cost_usd: float = 0.0
    best_cand: str | None = None
    interrupted: str | None = None
    finished: Event | None = None
    version: int = 0  # bumped by every folded event, so the screen redraws only on change

    def apply(self, events: list[Event]) -> None:
        for event in events:
            fold(self, event)

    @property
    def evaluated(self) -> int:
        return sum(1 for c in self.candidates.values() if c.status != RUNNING)

    @property
    def status(self) -> str:
        if self.finished:
            return str(self.finished.get("status") or "finished")
        return "interrupted" if self.interrupted else RUNNING

    @property
    def timed(self) -> bool:
        """Whether speedups mean anything here: a CPU run checks correctness only."""
        return bool(self.reference.get("timed")) or any(c.timed for c in self.candidates.values())

    @property
    def winner(self) -> str | None:
        """The final gate's pick once the run finished, the search's best until then."""
        if self.finished and self.finished.get("best_cand"):
            return self.finished["best_cand"]
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


def plain(value: Any) -> Any:
    """An event's field as the journal file holds it: run.py hands on_event the event before
    it is serialized, with pydantic models (EvalError, ProfileData) where the file has dicts."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def fold(view: RunView, e: Event) -> None:
    e = plain(e)
    t = e.get("type")
    ts = e.get("ts")
    if isinstance(ts, (int, float)):
        view.last_ts = ts if view.last_ts is None else max(view.last_ts, ts)
    view.version += 1
    handler = _HANDLERS.get(str(t))
    if handler:
        handler(view, e)


def _log(view: RunView, e: Event, text: str) -> None:
    view.log.append(LogLine(ts=e.get("ts") or 0.0, text=text))


def _candidate(view: RunView, e: Event) -> Candidate:
    cand = str(e.get("cand"))
    if cand not in view.candidates:
        view.candidates[cand] = Candidate(cand=cand)
    return view.candidates[cand]


def _run_started(view: RunView, e: Event) -> None:
    view.run = e.get("run", view.run)
    view.op = e.get("op", "")
    view.device = e.get("device", "")
    view.backend = e.get("backend", "")
    view.model = e.get("model")
    view.mode = e.get("mode", "")
    view.iterations = e.get("iterations")
    view.started = e.get("ts")
    _log(view, e, f"run {view.run} started: {view.op} on {view.device} ({view.backend}, {view.mode})")


def _reference(view: RunView, e: Event) -> None:
    view.reference = e
    if e.get("timed") and e.get("runtime_us") is not None:
        _log(view, e, f"baseline {e['runtime_us']:.1f} us on {e.get('device', '?')}")
    else:
        _log(view, e, f"baseline correct on {e.get('device', '?')}; no timing claimed there")


def _proposal(view: RunView, e: Event) -> None:
    c = _candidate(view, e)
    c.origin = e.get("origin") or ""
    c.intent = e.get("intent") or ""
    c.parent = e.get("parent")
    c.backend = e.get("backend") or ""
    _log(view, e, f"{c.cand} proposed by {c.origin}" + (f": {c.intent}" if c.intent else ""))


def _evaluated(view: RunView, e: Event) -> None:
    c = _candidate(view, e)
    c.status = e.get("status") or "error"
    c.correct = bool(e.get("correct"))
    c.timed = bool(e.get("timed"))
    c.speedup = e.get("speedup")
    c.runtime_us = e.get("runtime_us")
    c.error = e.get("error")
    c.profile = e.get("profile")
    c.wall_s = e.get("wall_s")
    _log(view, e, f"{c.cand} {c.status}" + (f" {fmt_speed(c.speedup)}" if c.speedup is not None else "")
         + (f" ({fmt_error(c.error)})" if c.error else ""))


def _accepted(view: RunView, e: Event) -> None:
    _candidate(view, e).tag = e.get("tag")


def _best(view: RunView, e: Event) -> None:
    view.best_cand = e.get("cand")
    _log(view, e, f"new best {view.best_cand}" + (f" {fmt_speed(e.get('speedup'))}" if e.get("speedup") else ""))


def _intent(view: RunView, e: Event) -> None:
    iid = str(e.get("id"))
    intent = view.intents.setdefault(iid, Intent(id=iid))
    if e.get("op") == "prune":
        intent.status = "pruned"
        return
    # An update carries only what changed; keep the rest.
    for name in ("description", "parent", "priority", "status", "attempts", "best_speedup"):
        if e.get(name) is not None:
            setattr(intent, name, e[name])


def _diagnosis(view: RunView, e: Event) -> None:
    _candidate(view, e).diagnosis = e
    issue = e.get("specific_issue") or e.get("bottleneck_type") or ""
    fix = e.get("recommendation") or ""
    _log(view, e, f"critic on {e.get('cand')}: {issue}" + (f" -> {fix}" if fix else ""))


def _llm_call(view: RunView, e: Event) -> None:
    cost = float(e.get("cost_usd") or 0.0)
    view.cost_usd += cost
    ok = "" if e.get("ok", True) else " FAILED"
    _log(view, e, f"llm {e.get('role', '?')} {e.get('model', '')}: {e.get('prompt_tokens') or 0}+"
         f"{e.get('completion_tokens') or 0} tokens, ${cost:.4f}, {float(e.get('latency_s') or 0.0):.1f} s{ok}")


def _note(view: RunView, e: Event) -> None:
    _log(view, e, str(e.get("message", "")))


def _resumed(view: RunView, e: Event) -> None:
    view.finished = None  # an interrupted run goes on
    _log(view, e, str(e.get("message", "")))


def _gate(view: RunView, e: Event) -> None:
    view.gates.append(e)
    verdict = "passed" if e.get("passed") else "failed"
    detail = f" ({e['detail']})" if e.get("detail") else ""
    _log(view, e, f"final gate {e.get('name')} on {e.get('cand')}: {verdict}{detail}")


def _interrupted(view: RunView, e: Event) -> None:
    view.interrupted = e.get("reason") or "interrupted"
    _log(view, e, f"interrupted ({view.interrupted})")


def _run_finished(view: RunView, e: Event) -> None:
    view.finished = e
    if e.get("cost_usd") is not None:
        view.cost_usd = float(e["cost_usd"])  # the run's own total wins over our sum
    speed = f" {fmt_speed(e.get('speedup'))}" if e.get("speedup") is not None else ""
    _log(view, e, f"run finished: {e.get('status')}{speed}" + (f", best {e['best_tag']}" if e.get("best_tag") else ""))


_HANDLERS = {
    "run_started": _run_started,
    "reference": _reference,
    "proposal": _proposal,
    "evaluated": _evaluated,
    "accepted": _accepted,
    "best": _best,
    "intent": _intent,
    "diagnosis": _diagnosis,
    "llm_call": _llm_call,
    "note": _note,
    "resumed": _resumed,
    "gate": _gate,
    "interrupted": _interrupted,
    "run_finished": _run_finished,
}
