"""Campaigns as `okgit history` lists them, read only from each campaign's journal.jsonl."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from okgit.fmt import fmt_speed
from okgit.git.campaigns import PREFIX, campaign_dir, campaign_ids
from okgit.git.history import RunSummary
from okgit.git.repo import Repo
from okgit.git.rundir import RunDir
from okgit.journal.campaign import (
    CAMPAIGN_EVENTS,
    CampaignFinished,
    CampaignStarted,
    Planned,
    ProblemFinished,
    ProblemRun,
    ProblemStarted,
    Screened,
)
from okgit.journal.events import Event
from okgit.journal.files import read_events
from okgit.locks import is_held
from okgit.views.tables import table


class ProblemSummary(BaseModel):
    op: str
    status: str  # pending, running, or the problem's final status
    run_id: str | None = None
    iterations: int | None = None
    speedup: float | None = None
    best_tag: str | None = None
    run_removed: bool = False  # its run is gone (okgit gc --runs), its tags with it


class CampaignSummary(BaseModel):
    campaign_id: str
    started: datetime | None
    kind: str  # ops | model
    status: str  # a final status, or running / interrupted
    device: str | None
    problems: list[ProblemSummary]
    speedup: float | None = None  # a model campaign's end-to-end speedup, where timed


def list_campaigns(repo: Repo) -> list[CampaignSummary]:
    """Every campaign, newest first."""
    return [campaign_summary(repo, c) for c in campaign_ids(repo)]


def campaign_summary(repo: Repo, campaign_id: str) -> CampaignSummary:
    path = campaign_dir(repo, campaign_id)
    summary = fold(campaign_id, _events(path), live=is_held(path / ".lock"))
    runs = path / "ops-repo" / ".okgit" / "runs" if summary.kind == "model" else repo.runs_dir  # where its runs are
    for p in summary.problems:
        p.run_removed = p.run_id is not None and not (runs / p.run_id).is_dir()
    return summary


def _events(path: Path) -> list[Event]:
    return read_events(RunDir(path).journal, models=CAMPAIGN_EVENTS)[0]


def fold(campaign_id: str, events: list[Event], live: bool) -> CampaignSummary:
    """The campaign as its journal tells it; `live`: a process holds it."""
    summary = CampaignSummary(campaign_id=campaign_id, started=None, kind="ops", status="running" if live else "interrupted",
                              device=None, problems=[])
    problems: dict[str, ProblemSummary] = {}
    for e in events:
        if isinstance(e, CampaignStarted):
            summary.started, summary.kind, summary.device = datetime.fromtimestamp(e.ts, timezone.utc), e.kind, e.device
            problems = {o: ProblemSummary(op=o, status="pending") for o in e.ops}
        elif isinstance(e, CampaignFinished):
            summary.status, summary.speedup = e.status or "finished", (e.end_to_end or {}).get("speedup")
        elif isinstance(e, Planned):
            for o, n in zip(e.order, e.iterations):
                if o in problems:
                    problems[o].iterations = n
        elif isinstance(e, (Screened, ProblemStarted, ProblemRun, ProblemFinished)) and e.op in problems:
            _problem(problems[e.op], e, live)
    summary.problems = list(problems.values())
    return summary


def _problem(p: ProblemSummary, e: Screened | ProblemStarted | ProblemRun | ProblemFinished, live: bool) -> None:
    if isinstance(e, Screened) and e.refused:
        p.status = "refused"
    elif isinstance(e, ProblemStarted):
        p.status = "running" if live else "interrupted"
    elif isinstance(e, ProblemRun):
        p.run_id = e.run_id
    elif isinstance(e, ProblemFinished):
        p.status, p.run_id, p.speedup, p.best_tag = e.status or "?", e.run_id or p.run_id, e.speedup, e.best_tag


def run_campaigns(campaigns: list[CampaignSummary]) -> dict[str, str]:
    """run id -> the campaign it belongs to."""
    return {p.run_id: c.campaign_id for c in campaigns for p in c.problems if p.run_id}


def with_campaigns(runs: list[RunSummary], campaigns: list[CampaignSummary]) -> list[RunSummary]:
    owner = run_campaigns(campaigns)
    return [r.model_copy(update={"campaign": owner.get(r.run_id)}) for r in runs]


def campaigns_text(campaigns: list[CampaignSummary]) -> str:
    rows = [[PREFIX + c.campaign_id, c.started.strftime("%Y-%m-%d %H:%M:%S") if c.started else "-", c.kind, c.status,
             f"{sum(p.status not in ('pending', 'running') for p in c.problems)}/{len(c.problems)}",
             fmt_speed(c.speedup), c.device or "-"] for c in campaigns]
    return table(["CAMPAIGN", "STARTED (UTC)", "KIND", "STATUS", "DONE", "END-TO-END", "DEVICE"], rows)


def detail_text(c: CampaignSummary) -> str:
    head = f"campaign {c.campaign_id}  {c.kind}  {c.status}  on {c.device or '-'}" + (
        f"  end-to-end {fmt_speed(c.speedup)}" if c.speedup is not None else "")
    rows = [[p.op, p.status, str(p.iterations) if p.iterations is not None else "-",
             f"{p.run_id} (removed by gc)" if p.run_removed else p.run_id or "-",
             fmt_speed(p.speedup), "-" if p.run_removed else p.best_tag or "-"] for p in c.problems]
    return head + "\n" + table(["PROBLEM", "STATUS", "ITERATIONS", "RUN", "SPEEDUP", "BEST"], rows)


def current_run_dir(repo: Repo, campaign_id: str) -> Path | None:
    """The run directory of the problem the campaign is on now (or its last); None before any."""
    dirs = [e.run_dir for e in _events(campaign_dir(repo, campaign_id)) if isinstance(e, ProblemRun) and e.run_dir]
    return Path(dirs[-1]) if dirs else None
