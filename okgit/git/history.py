"""Runs and their candidates as `okgit history` lists them: a projection of each run's
journal folded into its RunView (okgit.journal.runview); their text is okgit.views.tables's."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel

from okgit.git.repo import Repo
from okgit.git.rundir import RunDir
from okgit.git.workspace import is_live, run_id_time, run_ids
from okgit.journal.runview import RUNNING, RunView, proposer_name


class RunSummary(BaseModel):
    run_id: str
    started: datetime | None
    op: str
    status: str  # a final status, or `running` / `interrupted`
    speedup: float | None
    best_tag: str | None
    device: str | None
    backend: str | None
    model: str | None
    proposer: str  # offline (no model: templates, then autotune) | llm | replay
    candidates: int
    campaign: str | None = None  # the campaign this run is a problem of (okgit.campaign.listing)


class CandidateRow(BaseModel):
    cand: str
    tag: str | None = None  # set once the candidate was accepted (committed)
    parent: str | None = None
    origin: str | None = None
    intent: str | None = None
    status: str | None = None  # None: proposed, not evaluated yet
    speedup: float | None = None
    runtime_us: float | None = None


class RunDetail(BaseModel):
    summary: RunSummary
    candidates: list[CandidateRow]


def list_runs(repo: Repo) -> list[RunSummary]:
    """Every run, newest first."""
    return [run_detail(repo, run_id).summary for run_id in run_ids(repo)]


def run_detail(repo: Repo, run_id: str) -> RunDetail:
    return detail(run_id, run_view(repo, run_id), live=is_live(repo.run_dir(run_id)))


def run_view(repo: Repo, run_id: str) -> RunView:
    """The run's journal, folded."""
    view = RunView(run=run_id)
    view.apply(RunDir(repo.run_dir(run_id)).events())
    return view


def detail(run_id: str, view: RunView, live: bool) -> RunDetail:
    """The run as history shows it, from its journal's fold; `live`: a process holds it."""
    finished, best = view.finished, view.best
    if finished:
        status, speedup, best_tag = view.status, finished.speedup, finished.best_tag
    else:
        status = "running" if live else "interrupted"
        speedup = best.speedup if best else None
        best_row = view.candidates.get(best.cand) if best else None
        best_tag = best_row.tag if best_row else None
    start = view.started_event
    summary = RunSummary(
        run_id=run_id,
        started=datetime.fromtimestamp(start.ts, timezone.utc) if start else run_id_time(run_id),
        op=view.op, status=status, speedup=speedup, best_tag=best_tag,
        device=start.device if start else None, backend=start.backend if start else None, model=view.model,
        proposer=proposer_name(view.model), candidates=len(view.candidates),
    )
    rows = [CandidateRow(cand=c.cand, tag=c.tag, parent=c.parent, origin=c.origin, intent=c.intent,
                         status=None if c.status == RUNNING else c.status, speedup=c.speedup, runtime_us=c.runtime_us)
            for c in view.candidates.values()]
    return RunDetail(summary=summary, candidates=rows)
