"""Plain-mode progress lines of a campaign's own events (each problem's run prints its own)."""

from __future__ import annotations

from typing import Any

from okgit.fmt import fmt_speed, fmt_us


def campaign_line(event: dict[str, Any]) -> str | None:
    """The line for a campaign event; None for events that are not the campaign's own."""
    t = event.get("type")
    if t == "campaign_preparing":
        return f"okgit campaign {event.get('run')}: {event.get('doing')}"
    if t == "campaign_started":
        return (f"okgit campaign {event.get('run')}: {len(event.get('ops') or [])} problems on {event.get('device')} "
                f"({event.get('backend')}, {event.get('iterations')} iterations per problem on average)")
    if t == "screened":
        if event.get("refused"):
            return f"  screen {event.get('op')}: refused: {event['refused']}"
        where = f"{fmt_us(event.get('runtime_us'))} us" if event.get("timed") else "untimed"
        head = event.get("headroom")
        return (f"  screen {event.get('op')}: {where}, floor {fmt_us(event.get('floor_us'))} us"
                + (f", headroom {head:.0%}" if head is not None else ""))
    if t == "planned":
        plan = ", ".join(f"{op} {n}" for op, n in zip(event.get("order") or [], event.get("iterations") or []))
        return f"  plan by {event.get('ordered_by')}: {plan}"
    if t == "problem_finished":
        speed = fmt_speed(event.get("speedup"), missing="untimed")
        extra = event.get("reason") or (f"{speed}" + (f", {event['best_tag']}" if event.get("best_tag") else ""))
        return f"  problem {event.get('op')}: {event.get('status')}: {extra}"
    if t == "model_checked":
        return f"  whole model: {event.get('status')}: {event.get('reason')}"
    if t in ("problem_started", "problem_run", "campaign_finished"):
        return ""  # the problem's run announces itself; the summary follows the campaign's end
    return None
