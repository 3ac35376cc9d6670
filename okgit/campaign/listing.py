"""Campaigns as `okgit history` lists them, read only from each campaign's journal.jsonl."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from okgit.campaign.store import PREFIX, campaign_dir, campaign_ids
from okgit.fmt import fmt_speed
from okgit.git.history import RunSummary
from okgit.git.journal import read_jsonl
from okgit.git.repo import Repo
from okgit.locks import is_held
from okgit.presentation import table


class ProblemSummary(BaseModel):
    op: str
    status: str  # pending, running, or the problem's final status
    run_id: str | None = None
    iterations: int | None = None
    speedup: float | None = None
    best_tag: str | None = None


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
    events, _ = read_jsonl(path / "journal.jsonl")
    return fold(campaign_id, events, live=is_held(path / ".lock"))


def fold(campaign_id: str, events: list[dict[str, Any]], live: bool) -> CampaignSummary:
    started: dict[str, Any] = {}
    finished: dict[str, Any] | None = None
    problems: dict[str, ProblemSummary] = {}
    for e in events:
        kind, op = e.get("type"), e.get("op")
        if kind == "campaign_started":
            started = e
            problems = {o: ProblemSummary(op=o, status="pending") for o in e.get("ops") or []}
        elif kind == "screened" and op in problems and e.get("refused"):
            problems[op].status = "refused"
        elif kind == "planned":
            for o, n in zip(e.get("order") or [], e.get("iterations") or []):
                if o in problems:
                    problems[o].iterations = n
        elif kind == "problem_started" and op in problems:
            problems[op].status = "running" if live else "interrupted"
        elif kind == "problem_run" and op in problems:
            problems[op].run_id = e.get("run_id")
        elif kind == "problem_finished" and op in problems:
            p = problems[op]
            p.status, p.run_id, p.speedup, p.best_tag = e.get("status") or "?", e.get("run_id") or p.run_id, \
                e.get("speedup"), e.get("best_tag")
        elif kind == "campaign_finished":
            finished = e
    status = (finished.get("status") or "finished") if finished else ("running" if live else "interrupted")
    end = (finished or {}).get("end_to_end") or {}
    ts = started.get("ts")
    return CampaignSummary(
        campaign_id=campaign_id, started=datetime.fromtimestamp(ts, timezone.utc) if ts is not None else None,
        kind=started.get("kind", "ops"), status=status, device=started.get("device"),
        problems=list(problems.values()), speedup=end.get("speedup"))


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
    rows = [[p.op, p.status, str(p.iterations) if p.iterations is not None else "-", p.run_id or "-",
             fmt_speed(p.speedup), p.best_tag or "-"] for p in c.problems]
    return head + "\n" + table(["PROBLEM", "STATUS", "ITERATIONS", "RUN", "SPEEDUP", "BEST"], rows)


def current_run_dir(repo: Repo, campaign_id: str) -> Path | None:
    """The run directory of the problem the campaign is on now (or its last); None before any."""
    events, _ = read_jsonl(campaign_dir(repo, campaign_id) / "journal.jsonl")
    dirs = [str(e["run_dir"]) for e in events if e.get("type") == "problem_run" and e.get("run_dir")]
    return Path(dirs[-1]) if dirs else None
