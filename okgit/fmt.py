"""How numbers read in okgit's text outputs (history, progress, watch, report, sweep), so
the same figure looks the same everywhere."""

from __future__ import annotations

from typing import Protocol

from okgit.status import CORRECT


class GateError(Protocol):
    """A gate's failure as journal events and EvalResult carry it."""

    gate: str
    message: str


def fmt_speed(x: float | None, missing: str = "-") -> str:
    """A speedup as every output states it: `1.23x`."""
    return f"{x:.2f}x" if x is not None else missing


def fmt_count(n: int, noun: str) -> str:
    """`1 iteration`, `2 iterations`: a count with its noun (a regular plural)."""
    return f"{n} {noun}{'s' * (n != 1)}"


def fmt_outcome(speedup: float | None, status: str) -> str:
    """A run's speedup, or why it has none: untimed (a correct kernel on a CPU), or no winner."""
    return fmt_speed(speedup, missing="untimed" if status in CORRECT else "no winner")


def fmt_us(x: float | None) -> str:
    return f"{x:.1f}" if x is not None else "-"


def fmt_error(error: GateError | None, width: int = 80) -> str:
    if not error:
        return ""
    text = f"{error.gate}: {error.message}".replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def fmt_duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
