"""How runs read in text: the tables of `okgit history` and `doctor`. Pure: strings in,
strings out."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from okgit.fmt import fmt_speed
from okgit.journal.runview import OFFLINE

if TYPE_CHECKING:
    from okgit.git.history import RunDetail, RunSummary

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
