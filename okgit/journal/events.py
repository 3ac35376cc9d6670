"""The run journal's events as code: one model per event type, the contract between the one
writer (okgit.journal.files.Journal, which validates every line it writes) and every reader,
which reads lines as these models (`parse_event`, `okgit.journal.files.read_events`) and folds
them in one place (okgit.journal.runview.RunView). docs/internals.md's table lists the same
fields; tests/journal/test_journal_events.py holds the three together and checks the journals that a
real run, tests/journals/make.py and older okgit versions wrote.

Every line has `type`, `ts` (unix seconds) and `run`, which the writer adds. A field a model
does not name is kept (a newer writer's, read by an older reader), but the names below must be
there with these types; a reader skips a line of a type it does not know, as a view that reads
a newer okgit's journal must.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class Event(BaseModel):
    """What every line holds; each model below narrows `type` to its own name."""

    model_config = ConfigDict(extra="allow")

    type: str
    ts: float
    run: str


class RunStarted(Event):
    """Always the first event of a run."""

    type: Literal["run_started"] = "run_started"
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
    type: Literal["reference"] = "reference"
    runtime_us: float | None
    timed: bool
    device: str
    profile: dict[str, Any] | None
    degenerate: str | None
    shapes: list[dict[str, int]]
    flags: dict[str, Any]
    hardware: dict[str, Any]


class ProposalEvent(Event):
    type: Literal["proposal"] = "proposal"
    cand: str
    origin: str
    intent: str
    parent: str | None
    backend: str


class EvalErrorFields(BaseModel):
    gate: str
    message: str


class Evaluated(Event):
    type: Literal["evaluated"] = "evaluated"
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
    phase_s: dict[str, float] | None = None  # where wall_s went (okgit.eval.parent.phases.PHASES)


class Profiled(Event):
    """A profiling pass apart from timing (okgit.search.profiling): the profile of a candidate, or
    of the reference (cand None), with the hardware counters it read; it never changes a verdict."""

    type: Literal["profiled"] = "profiled"
    cand: str | None
    profile: dict[str, Any]
    seconds: float  # what the pass took
    tools: list[str]  # the tools whose figures it holds besides torch.profiler's ("ncu", "proton")


class Accepted(Event):
    type: Literal["accepted"] = "accepted"
    cand: str
    tag: str
    commit: str
    speedup: float | None


class Best(Event):
    type: Literal["best"] = "best"
    cand: str
    speedup: float | None


class IntentEvent(Event):
    type: Literal["intent"] = "intent"
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
    type: Literal["diagnosis"] = "diagnosis"
    cand: str
    bottleneck_type: str
    roofline_position: float | None
    specific_issue: str
    recommendation: str
    estimated_headroom: float | None
    confidence: float


class LlmCall(Event):
    type: Literal["llm_call"] = "llm_call"
    role: str
    model: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_s: float
    ok: bool
    truncated: bool = False  # the reply stopped at max_tokens


class Note(Event):
    type: Literal["note"] = "note"
    message: str  # free text for the agent log


class GateEvent(Event):
    """A final-gate step; the interleaved one also carries its comparison's figures
    (okgit.eval.types.Comparison)."""

    type: Literal["gate"] = "gate"
    name: str
    cand: str
    passed: bool
    detail: str
    rounds: int | None = None
    baseline_us: list[float] | None = None  # per round
    candidate_us: list[float] | None = None
    noise: float | None = None
    wins: int | None = None
    sign_test_p: float | None = None
    speedup: float | None = None
    optimized: bool | None = None
    slower: bool | None = None


class InterruptedEvent(Event):
    type: Literal["interrupted"] = "interrupted"
    reason: str


class Resumed(Event):
    type: Literal["resumed"] = "resumed"
    message: str  # `optimize --resume`: the run goes on after an interrupted run_finished


class RunFinished(Event):
    type: Literal["run_finished"] = "run_finished"
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

    type: Literal["retry"] = "retry"
    cand: str | None
    step: str
    cause: str
    wait_s: float
    message: str


class Preparing(Event):
    """Never written: what `optimize` hands its `on_event` (the progress printer) before
    run_started, while the evaluator starts; the journal cannot name the device yet."""

    type: Literal["preparing"] = "preparing"
    op: str
    eval: str


def by_type(*models: type[Event]) -> dict[str, type[Event]]:
    """Models keyed by the `type` each one narrows to."""
    return {model.model_fields["type"].default: model for model in models}


EVENTS = by_type(RunStarted, ReferenceEvent, ProposalEvent, Evaluated, Accepted, Best, IntentEvent, DiagnosisEvent,
                 LlmCall, Note, GateEvent, InterruptedEvent, Resumed, Retry, RunFinished, Profiled)


def check_event(line: dict[str, Any], models: dict[str, type[Event]] = EVENTS) -> Event:
    """A whole line (type, ts, run and the fields) as its model: the writer's check. ValueError
    for a type the journal does not know, pydantic's ValidationError for a field missing or of
    the wrong type."""
    model = models.get(str(line.get("type")))
    if model is None:
        raise ValueError(f"unknown journal event type {line.get('type')!r} (okgit/journal lists them)")
    return model.model_validate(line)


def parse_event(line: dict[str, Any], models: dict[str, type[Event]] = EVENTS) -> Event | None:
    """A line as a reader takes it: its model, or None for a line no model reads (a type a
    newer okgit writes, or fields of the wrong shape), which the reader skips as it skips a
    torn line."""
    try:
        return check_event(line, models)
    except ValueError:  # pydantic's ValidationError is one
        return None
