"""Runs and their candidates, read only from each run's journal.jsonl (see docs/internals.md)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel

from okgit.fmt import fmt_speed
from okgit.git.repo import Repo
from okgit.git.rundir import RunDir
from okgit.git.workspace import is_live, run_id_time, run_ids

OFFLINE = "offline"  # the search without a model: kernel templates, then autotune


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


def proposer_name(model: str | None) -> str:
    """What searched: `offline` (no model), `replay` (a recorded traces file) or `llm`; the
    one name history, watch, doctor and --help use for the search without a model."""
    if not model:
        return OFFLINE
    return "replay" if model.startswith("replay:") else "llm"


def runs_text(runs: list[RunSummary]) -> str:
    if not runs:
        return "no runs yet (start one with: okgit optimize PATH)"
    rows = [
        [r.run_id, _when(r.started), r.status, fmt_speed(r.speedup), str(r.candidates), r.op or "-",
         r.backend or "-", r.device or "-", r.model or OFFLINE, r.best_tag or "-"]
        for r in runs
    ]
    return table(["RUN", "STARTED (UTC)", "STATUS", "SPEEDUP", "CANDS", "OP", "BACKEND", "DEVICE", "MODEL", "BEST"], rows)


def detail_text(detail: RunDetail) -> str:
    s = detail.summary
    head = (f"run {s.run_id}  {s.status}  speedup {fmt_speed(s.speedup)}  op {s.op or '-'}  "
            f"{s.backend or '-'}/{s.device or '-'}  model {s.model or OFFLINE}  started {_when(s.started)} UTC")
    if not detail.candidates:
        return head + "\nno candidates yet"
    rows = [
        [c.cand, c.tag or "-", c.parent or "-", c.status or "pending", fmt_speed(c.speedup),
         "-" if c.runtime_us is None else f"{c.runtime_us:.1f}", c.origin or "-", _clip(c.intent or "", 60)]
        for c in detail.candidates
    ]
    return head + "\n" + table(["CAND", "TAG", "PARENT", "STATUS", "SPEEDUP", "RUNTIME_US", "ORIGIN", "INTENT"], rows)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns two spaces apart, never wrapped: a pipe (`| grep`) gets whole rows."""
    import io

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False, header_style="")
    for h in headers:
        t.add_column(Text(h), no_wrap=True)
    for row in rows:
        t.add_row(*(Text(cell) for cell in row))  # Text: an intent's "[...]" is not markup
    out = io.StringIO()
    Console(file=out, width=1_000_000, color_system=None, highlight=False).print(t)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def _when(t: datetime | None) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
