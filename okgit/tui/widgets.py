"""The watch view's panels. Each one is drawn from a RunView (or a diff's text) by `sync`/`show`,
and keeps just enough of what it last drew to redraw only what changed."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.widgets import DataTable, Log, Static, Tree

from okgit.fmt import fmt_duration, fmt_error, fmt_speed, fmt_us
from okgit.journal.runview import OFFLINE, RUNNING, Candidate, RunView
from okgit.search.profile_text import side_by_side
from okgit.status import RunStatus, Status

STATUS_STYLE = {
    Status.correct: "bold green",
    Status.incorrect: "bold red",
    Status.compile_error: "magenta",
    Status.rejected: "yellow",
    Status.error: "bold red",
    RUNNING: "cyan",
}

PREPARING = "preparing"  # the run exists, its reference has not been run yet

RUN_STATUS_STYLE = {
    RunStatus.optimized: "bold green",
    RunStatus.matched: "yellow",
    RunStatus.unverified: "cyan",
    RunStatus.fallback: "red",
    RunStatus.slower: "red",
    RunStatus.interrupted: "bold red",
    RunStatus.error: "bold red",
    RUNNING: "bold cyan",
    PREPARING: "cyan",
}


class StatusBar(Static):
    def show_starting(self) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" okgit ", style="bold reverse")
        t.append("  starting: loading the op file and running its reference (Ctrl-C stops, q hides this view)  ")
        t.append("starting", style="bold cyan")
        self.update(t)

    def show(self, view: RunView, now: float | None = None) -> None:
        now = time.time() if now is None else now
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f" {view.run} ", style="bold reverse")
        if view.started is None and view.finished is None:  # the run exists; its evaluator is starting
            t.append("  preparing: starting the evaluator, then the reference runs (no event yet)  ")
            t.append(PREPARING, style=RUN_STATUS_STYLE[PREPARING])
            self.update(t)
            return
        name = view.reference.hardware.get("device") if view.reference else None
        device = f"{view.device} ({name})" if name and name != view.device else view.device or "?"
        t.append(f" {view.op}  {device} · {view.backend or '?'} · {view.model or OFFLINE}")
        total = f"/{view.iterations}" if view.iterations else ""
        t.append(f"  iter {view.evaluated}{total}  ${view.cost_usd:.4f}  {fmt_duration(view.elapsed(now))}  ")
        # Until the reference event, the run is still being prepared (on a CPU that takes a while).
        status = PREPARING if view.status == RUNNING and not view.reference and not view.candidates else view.status
        t.append(status, style=RUN_STATUS_STYLE.get(status, "bold"))
        if view.finished and view.finished.speedup is not None:
            t.append(f" {fmt_speed(view.finished.speedup)}", style="bold")
        elif view.status == RUNNING and view.last_ts:
            # A run that died without a word looks "running" forever; the age says otherwise.
            t.append(f" (last event {fmt_duration(now - view.last_ts)} ago)", style="dim")
        self.update(t)


class ExperimentTable(DataTable):
    COLUMNS = ("cand", "origin", "intent", "status", "speedup", "runtime us")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        for name in self.COLUMNS:
            self.add_column(name, key=name)
        self._drawn: dict[str, tuple[str, ...]] = {}

    def sync(self, view: RunView, failures_only: bool) -> None:
        shown = [c for c in view.candidates.values() if c.failed or not failures_only]
        if [c.cand for c in shown][: len(self._drawn)] != list(self._drawn):
            # The filter changed which rows exist: redraw, keeping the cursor on its candidate.
            keep = self.highlighted()
            self.clear()
            self._drawn = {}
            self._add(shown, view)
            if keep in self._drawn:
                self.move_cursor(row=list(self._drawn).index(keep))
            return
        for c in shown[: len(self._drawn)]:
            row = self._row(c, view)
            if row != self._drawn[c.cand]:
                for name, old, new, cell in zip(self.COLUMNS, self._drawn[c.cand], row, self._cells(row, c)):
                    if old != new:
                        self.update_cell(c.cand, name, cell, update_width=True)  # running -> compile_error
                self._drawn[c.cand] = row
        self._add(shown[len(self._drawn):], view)

    def highlighted(self) -> str | None:
        if not self.row_count:
            return None
        return list(self._drawn)[min(self.cursor_row, len(self._drawn) - 1)]

    def _add(self, cands: list[Candidate], view: RunView) -> None:
        for c in cands:
            row = self._row(c, view)
            self.add_row(*self._cells(row, c), key=c.cand)
            self._drawn[c.cand] = row

    @staticmethod
    def _row(c: Candidate, view: RunView) -> tuple[str, ...]:
        mark = " *" if c.cand == view.winner else ""
        speed = fmt_speed(c.speedup) if c.timed else ("untimed" if c.correct else "-")
        return (c.cand + mark, c.origin, c.intent, c.status, speed, fmt_us(c.runtime_us))

    @staticmethod
    def _cells(row: tuple[str, ...], c: Candidate) -> list[Any]:
        cells: list[Any] = list(row)
        cells[2] = row[2] if len(row[2]) <= 32 else row[2][:31] + "…"  # leave room for the numbers
        cells[3] = Text(row[3], style=STATUS_STYLE.get(c.status, ""))
        cells[4] = Text(row[4], justify="right")
        cells[5] = Text(row[5], justify="right")
        return cells


class IntentTree(Tree[str]):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("intents", **kwargs)
        self.show_root = False
        self._drawn: list[tuple[Any, ...]] = []
        self.root.add_leaf("(no intents yet)")

    def sync(self, view: RunView) -> None:
        state = [tuple(vars(i).values()) for i in view.intents.values()]
        if state == self._drawn:
            return
        self._drawn = state
        self.clear()
        children: dict[str | None, list] = {}
        for intent in view.intents.values():
            parent = intent.parent if intent.parent in view.intents else None
            children.setdefault(parent, []).append(intent)

        def add(node, parent: str | None) -> None:
            for intent in sorted(children.get(parent, []), key=lambda i: -(i.priority or 0.0)):
                label = Text(f"{intent.priority:.2f} " if intent.priority is not None else "- ", style="bold")
                label.append(intent.description or intent.id, style="dim strike" if intent.status == "pruned" else "")
                facts = [intent.status or "", f"{intent.attempts} tries" if intent.attempts else "",
                         fmt_speed(intent.best_speedup) if intent.best_speedup is not None else ""]
                if any(facts):
                    label.append(f"  [{', '.join(f for f in facts if f)}]", style="dim")
                if children.get(intent.id):
                    add(node.add(label, expand=True), intent.id)
                else:
                    node.add_leaf(label)

        add(self.root, None)


def bar(fraction: float, width: int = 20) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


class ProfilePanel(Static):
    def show(self, c: Candidate | None, view: RunView) -> None:
        if c is None:
            self.update(Text("select a candidate (enter) to see its profile", style="dim"))
            return
        t = Text()
        t.append(f"{c.cand}", style="bold")
        t.append(f"  {c.origin}  ")
        t.append(c.status, style=STATUS_STYLE.get(c.status, ""))
        if c.timed:
            t.append(f"  {fmt_speed(c.speedup)}  {fmt_us(c.runtime_us)} us vs {fmt_us(view.reference.runtime_us if view.reference else None)} us")
        elif c.correct:
            t.append("  untimed (correctness only on this device)", style="dim")
        if c.tag:
            t.append(f"\n{c.tag}", style="dim")
        if c.error:
            t.append(f"\n{fmt_error(c.error, 240)}", style="red")
        p = c.profile or {}
        if p:
            t.append(f"\nbottleneck  {p.get('bottleneck_type', 'unknown')}")
            gauges = [("roofline", "roofline_position"), ("bandwidth", "bandwidth_utilization"),
                      ("compute", "compute_utilization"), ("occupancy", "occupancy"), ("cache hit", "cache_hit_rate")]
            for label, key in gauges:
                value = p.get(key)
                if value is not None:
                    t.append(f"\n{label:<11} {bar(value)} {value * 100:5.1f}%")
            if p.get("launch_count") is not None:
                t.append(f"\nlaunches    {p['launch_count']}")
            for k in (p.get("top_kernels") or [])[:3]:
                custom = " (custom)" if k.get("custom") else ""
                t.append(f"\n  {k.get('name', '?')[:40]}  {fmt_us(k.get('time_us'))} us ×{k.get('calls', 1)}{custom}", style="dim")
            rows = side_by_side(p, view.reference.profile if view.reference else None)
            if rows:
                t.append(f"\n{'':<34} {c.cand} | reference", style="bold")
                for figure, mine, theirs in rows:
                    t.append(f"\n{figure[:33]:<34} {mine} | {theirs}")
        elif c.status != RUNNING:
            t.append("\nno profile (untimed or failed before timing)", style="dim")
        d = c.diagnosis
        if d:
            t.append(f"\ncritic: {d.specific_issue or d.bottleneck_type}", style="italic")
            if d.recommendation:
                t.append(f"\n  -> {d.recommendation}", style="italic")
        self.update(t)


class DiffView(Static):
    STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"), ("#", "dim"))

    def show(self, diff: str) -> None:
        t = Text(no_wrap=True)
        for line in diff.splitlines():
            style = next((s for prefix, s in self.STYLES if line.startswith(prefix)), "")
            t.append(line + "\n", style=style)
        self.update(t)


class AgentLog(Log):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._written = 0

    def sync(self, view: RunView) -> None:
        for line in view.log_lines(self._written):
            self.write_line(line)
        self._written = len(view.log)
