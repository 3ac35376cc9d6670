"""Plain-mode progress lines of a campaign's own events (each problem's run prints its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from okgit.fmt import fmt_speed, fmt_us
from okgit.journal.campaign import (
    CampaignEvent,
    CampaignStarted,
    ModelChecked,
    Planned,
    ProblemFinished,
    Screened,
)


def campaign_line(event: CampaignEvent) -> str:
    """The line for one of the campaign's own events; "" for those that print nothing (the
    problem's run announces itself; the summary follows the campaign's end)."""
    line = _LINES.get(type(event))
    return line(event) if line else ""


def _started(e: CampaignStarted) -> str:
    return (f"okgit campaign {e.run}: {len(e.ops)} problems on {e.device} "
            f"({e.backend}, {e.iterations} iterations per problem on average)")


def _screened(e: Screened) -> str:
    if e.refused:
        return f"  screen {e.op}: refused: {e.refused}"
    where = f"{fmt_us(e.runtime_us)} us" if e.timed else "untimed"
    return (f"  screen {e.op}: {where}, floor {fmt_us(e.floor_us)} us"
            + (f", headroom {e.headroom:.0%}" if e.headroom is not None else ""))


def _planned(e: Planned) -> str:
    return f"  plan by {e.ordered_by}: " + ", ".join(f"{op} {n}" for op, n in zip(e.order, e.iterations))


def _problem_finished(e: ProblemFinished) -> str:
    speed = fmt_speed(e.speedup, missing="untimed")
    extra = e.reason or (f"{speed}" + (f", {e.best_tag}" if e.best_tag else ""))
    return f"  problem {e.op}: {e.status}: {extra}"


def _model_checked(e: ModelChecked) -> str:
    return f"  whole model: {e.status}: {e.reason}"


_LINES: dict[type[CampaignEvent], Callable[[Any], str]] = {
    CampaignStarted: _started, Screened: _screened, Planned: _planned, ProblemFinished: _problem_finished,
    ModelChecked: _model_checked,
}
