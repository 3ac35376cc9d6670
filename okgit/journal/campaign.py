"""A campaign's journal (`.okgit/campaigns/<id>/journal.jsonl`) as code: one model per event
type, written by okgit.campaign (checked, as a run's journal is) and read by the campaign's
listing and its progress lines. `run` is the campaign's id. Each problem's own run keeps its
own journal (okgit.journal.events). docs/internals.md lists the fields.
"""

from __future__ import annotations

from typing import Any, Literal

from okgit.journal.events import Event, Note, by_type


class CampaignEvent(Event):
    """The campaign's own events (its notes are run notes: `Note`)."""


class CampaignPreparing(CampaignEvent):
    """Handed to `on_event` only, never journaled (as a run's `Preparing`): the campaign's first
    line, at once, before its evaluator starts or its model is profiled."""

    type: Literal["campaign_preparing"] = "campaign_preparing"
    doing: str  # what it does before its first journaled event


class CampaignStarted(CampaignEvent):
    type: Literal["campaign_started"] = "campaign_started"
    kind: str  # ops (a directory) | model (a model's modules)
    ops: list[str]
    base: str
    device: str
    backend: str
    model: str | None
    iterations: int  # per problem, on average


class Screened(CampaignEvent):
    """One problem's pre-screen: refused (why), or its reference's time and roofline floor."""

    type: Literal["screened"] = "screened"
    op: str
    refused: str | None = None
    timed: bool = False
    runtime_us: float | None = None
    floor_us: float | None = None
    flops: float | None = None
    min_bytes: float | None = None
    headroom: float | None = None
    gain_us: float | None = None


class Planned(CampaignEvent):
    """The budget split: the problems in the order they run, each one's iterations and share."""

    type: Literal["planned"] = "planned"
    order: list[str]
    iterations: list[int]
    shares: list[float]
    ordered_by: str


class ProblemStarted(CampaignEvent):
    type: Literal["problem_started"] = "problem_started"
    op: str
    iterations: int
    time_s: float | None
    usd: float | None


class ProblemRun(CampaignEvent):
    """The problem's run exists (its run_started was written): where its journal is."""

    type: Literal["problem_run"] = "problem_run"
    op: str
    run_id: str | None
    run_dir: str


class ProblemFinished(CampaignEvent):
    type: Literal["problem_finished"] = "problem_finished"
    op: str
    status: str  # a RunStatus, or at_floor
    run_id: str | None = None
    reason: str | None = None  # at_floor: why
    speedup: float | None = None
    best_tag: str | None = None
    diff: str | None = None  # the problem's own patch


class ModelChecked(CampaignEvent):
    """A model campaign's whole model with winners swapped in, verified."""

    type: Literal["model_checked"] = "model_checked"
    status: str
    reason: str
    swapped: list[str]
    speedup: float | None = None
    dropped: dict[str, str] | None = None  # module -> why its winner is not in the patch
    # the patched model against the original in one process (okgit.campaign.result.EndToEnd):
    state: str | None = None  # its state dict: `unchanged`, or how it differs
    eager_us: float | None = None
    compile_us: float | None = None
    patched_us: float | None = None
    arm_noise: dict[str, float] | None = None
    untimed: str | None = None  # why those three have no times


class CampaignFinished(CampaignEvent):
    type: Literal["campaign_finished"] = "campaign_finished"
    status: str
    report: str | None = None
    diff: str | None = None
    end_to_end: dict[str, Any] | None = None  # okgit.campaign.result.EndToEnd, a model campaign's


CAMPAIGN_EVENTS = by_type(CampaignStarted, Note, Screened, Planned, ProblemStarted, ProblemRun, ProblemFinished,
                          ModelChecked, CampaignFinished)
