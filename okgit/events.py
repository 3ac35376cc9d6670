"""The run journal's events as code: one model per event type, the contract between the one
writer (okgit.git.journal.Journal, which validates every event it writes) and the readers
(runview, history, progress, figures, traces, the sweep). docs/internals.md's table lists the
same fields; tests/test_journal_events.py holds the three together and checks the journals
that a real run and tests/journals/make.py write.

Every line also has `type`, `ts` (unix seconds) and `run`, which the writer adds. A field a
model does not name is kept (a newer writer's, read by an older reader), but the names below
must be there with these types.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class Event(BaseModel):
    model_config = ConfigDict(extra="allow")


class RunStarted(Event):
    """Always the first event of a run."""

    op: str
    base: str
    base_dirty: bool
    branch: str
    worktree: str  # repository-relative
    backend: str
    device: str
    mode: str
    model: str | None
    eval: str
    iterations: int


class ReferenceEvent(Event):
    runtime_us: float | None
    timed: bool
    device: str
    profile: dict[str, Any] | None
    degenerate: str | None
    shapes: list[dict[str, int]]
    flags: dict[str, Any]
    hardware: dict[str, Any]


class ProposalEvent(Event):
    cand: str
    origin: str
    intent: str
    parent: str | None
    backend: str


class EvalErrorFields(BaseModel):
    gate: str
    message: str


class Evaluated(Event):
    cand: str
    status: str
    correct: bool
    timed: bool
    speedup: float | None
    runtime_us: float | None
    ref_runtime_us: float | None
    error: EvalErrorFields | None
    profile: dict[str, Any] | None
    wall_s: float | None
    cost_usd: float | None = None  # priced GPU-seconds (Modal), counted in the dollar budget
    kernel_shapes: list[dict[str, Any]] | None = None  # okgit.eval.types.KernelShape: where its own kernels ran


class Accepted(Event):
    cand: str
    tag: str
    commit: str
    speedup: float | None


class Best(Event):
    cand: str
    speedup: float | None


class IntentEvent(Event):
    op: Literal["insert", "update", "prune"]
    id: str
    description: str
    parent: str | None
    priority: float
    status: str
    attempts: int
    best_speedup: float | None
    origin: str | None = None  # who proposed it
    reason: str | None = None  # prune, and an update that retires it: why
    # the model search's counters (okgit.search.intents.Intent)
    candidates: int | None = None
    correct: int | None = None
    improved: int | None = None
    failed_in_row: int | None = None
    stale_in_row: int | None = None
    base: str | None = None
    first_correct_at: int | None = None
    profile: str | None = None


class DiagnosisEvent(Event):
    cand: str
    bottleneck_type: str
    roofline_position: float | None
    specific_issue: str
    recommendation: str
    estimated_headroom: float | None
    confidence: float


class LlmCall(Event):
    role: str
    model: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_s: float
    ok: bool
    truncated: bool = False  # the reply stopped at max_tokens


class Note(Event):
    message: str  # free text for the agent log


class GateEvent(Event):
    """A final-gate step; the interleaved one also carries its Comparison's figures (rounds,
    baseline_us, candidate_us, noise, wins, sign_test_p, speedup, optimized)."""

    name: str
    cand: str
    passed: bool
    detail: str


class Interrupted(Event):
    reason: str


class Resumed(Event):
    message: str  # `optimize --resume`: the run goes on after an interrupted run_finished


class RunFinished(Event):
    status: str
    speedup: float | None
    baseline_us: float | None
    best_us: float | None
    best_tag: str | None
    best_cand: str | None
    report: str
    diff: str
    iterations: int
    cost_usd: float
    error: str | None = None  # status error: what could not be judged and why


class Retry(Event):
    """A step the machine failed (out of memory beside other work, a lost judge or worker, a
    device error), tried again after a wait."""

    cand: str | None
    step: str
    cause: str
    wait_s: float
    message: str


EVENTS: dict[str, type[Event]] = {
    "run_started": RunStarted,
    "reference": ReferenceEvent,
    "proposal": ProposalEvent,
    "evaluated": Evaluated,
    "accepted": Accepted,
    "best": Best,
    "intent": IntentEvent,
    "diagnosis": DiagnosisEvent,
    "llm_call": LlmCall,
    "note": Note,
    "gate": GateEvent,
    "interrupted": Interrupted,
    "resumed": Resumed,
    "retry": Retry,
    "run_finished": RunFinished,
}


def check_event(type: str, fields: dict[str, Any]) -> Event:
    """The event as its model; ValueError for a type the journal does not know, pydantic's
    ValidationError for a field missing or of the wrong type."""
    model = EVENTS.get(type)
    if model is None:
        raise ValueError(f"unknown journal event type {type!r} (okgit/events.py lists them)")
    return model.model_validate(fields)
