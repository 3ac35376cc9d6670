"""Runs and their candidates, read only from each run's journal.jsonl (see docs/internals.md);
their text is okgit.presentation's."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel

from okgit.git.repo import Repo
from okgit.git.rundir import RunDir
from okgit.git.workspace import is_live, run_id_time, run_ids
from okgit.presentation import proposer_name


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
    run_dir = repo.run_dir(run_id)
    events = RunDir(run_dir).events()
    return _fold(run_id, events, live=is_live(run_dir))


def _fold(run_id: str, events: list[dict[str, Any]], live: bool) -> RunDetail:
    started: dict[str, Any] = {}
    finished: dict[str, Any] | None = None
    best: dict[str, Any] | None = None
    rows: dict[str, CandidateRow] = {}
    for e in events:
        kind = e.get("type")
        if kind == "run_started":
            started = started or e  # a resume writes another; the first one holds the start
            finished = None
        elif kind == "run_finished":
            finished = e
        elif kind == "resumed":
            finished = None  # an interrupted run goes on
        elif kind == "best":
            best = e
        elif kind in ("proposal", "evaluated", "accepted") and e.get("cand"):
            row = rows.setdefault(e["cand"], CandidateRow(cand=e["cand"]))
            fields = {"proposal": ("origin", "intent", "parent"), "evaluated": ("status", "speedup", "runtime_us"),
                      "accepted": ("tag",)}[kind]
            for name in fields:
                if name in e:
                    setattr(row, name, e[name])
    if finished:
        status, speedup, best_tag = finished.get("status") or "finished", finished.get("speedup"), finished.get("best_tag")
    else:
        status = "running" if live else "interrupted"
        speedup = best.get("speedup") if best else None
        best_row = rows.get(best.get("cand", "")) if best else None
        best_tag = best_row.tag if best_row else None
    ts = started.get("ts")
    summary = RunSummary(
        run_id=run_id,
        started=datetime.fromtimestamp(ts, timezone.utc) if ts is not None else run_id_time(run_id),
        op=started.get("op", ""),
        status=status, speedup=speedup, best_tag=best_tag,
        device=started.get("device"), backend=started.get("backend"), model=started.get("model"),
        proposer=proposer_name(started.get("model")), candidates=len(rows),
    )
    return RunDetail(summary=summary, candidates=list(rows.values()))
