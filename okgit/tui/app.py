"""`okgit watch RUN`: a live terminal view of one run, fed only by its run directory.

The view polls journal.jsonl and traces.jsonl on a timer, so the same code shows a finished
run, a live one, and a run directory copied from another machine. It is its own process and
only reads: quitting it never touches the run.

`optimize --watch` starts the view before the run has a directory: the view shows a starting
state and learns the directory, or that the run was refused (before or while its reference is
prepared), from a pipe (`attach`). Ctrl-C there stops the run itself, as in
plain mode; `q` closes only the view, and the run goes on printing plain progress.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Callable, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Sparkline

from okgit.fmt import fmt_speed
from okgit.git.rundir import RunDir
from okgit.journal.runview import RunView
from okgit.tui.sources import Sources, Tail
from okgit.tui.widgets import (
    AgentLog,
    DiffView,
    ExperimentTable,
    IntentTree,
    ProfilePanel,
    StatusBar,
)


class WatchApp(App[None]):
    TITLE = "okgit watch"
    CSS = """
    #status { height: 1; background: $boost; }
    #left { width: 3fr; }
    #right { width: 2fr; }
    #spark, ExperimentTable, AgentLog, ProfilePanel, IntentTree, #diff-box { border: round $primary-darken-1; }
    #spark { height: 5; }
    ExperimentTable { height: 1fr; }
    AgentLog { height: 11; }
    ProfilePanel { height: auto; max-height: 16; }
    IntentTree { height: 10; }
    #diff-box { height: 1fr; }
    DiffView { width: auto; }  /* long lines scroll sideways instead of wrapping mid-diff */
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "interrupt", "quit", show=False, priority=True),
        Binding("f", "toggle_failures", "failures only"),
        Binding("j", "cursor(1)", "down", show=False),
        Binding("k", "cursor(-1)", "up", show=False),
    ]

    def __init__(self, run_dir: Path | None, poll_s: float = 0.5, attach: int | None = None,
                 run_pid: int | None = None, follow: Callable[[], Path | None] | None = None) -> None:
        """`run_dir` None: wait for it on `attach`, a pipe from `optimize --watch` that says
        `run <dir>` once the run exists, or `quit` when it was refused. `run_pid`: the
        optimize process that Ctrl-C interrupts. `follow`: a campaign's run of the problem it
        is on now (None before the first); the view moves to each next one as it starts."""
        super().__init__()
        self.follow = follow
        self.poll_s = poll_s
        self.attach = attach  # a non-blocking pipe's file descriptor
        self._pending = ""
        self.run_pid = run_pid
        self.interrupt_run = False  # set by Ctrl-C; `watch` signals the run once the terminal is back
        self.view = RunView()
        self.failures_only = False
        self.selected: str | None = None  # chosen with enter; until then the best candidate
        self._drawn_version = -1
        self.run_dir: Path | None = None
        if run_dir is not None:
            self._open(Path(run_dir))

    def _open(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.journal = Tail(RunDir(run_dir).journal)
        self.sources = Sources(RunDir(run_dir).traces)
        self.view = RunView(run=run_dir.name)

    def compose(self) -> ComposeResult:
        # Widgets are kept as attributes, not queried: a poll that fires while the app shuts
        # down must not trip over panels already unmounted.
        self.status = StatusBar(id="status")
        self.spark = Sparkline([], id="spark")
        self.table = ExperimentTable(id="table")
        self.log_panel = AgentLog(id="log")
        self.profile = ProfilePanel(id="profile")
        self.intents = IntentTree(id="intents")
        self.diff = DiffView(id="diff")
        self.diff_box = VerticalScroll(self.diff, id="diff-box")
        yield self.status
        with Horizontal():
            with Vertical(id="left"):
                yield self.spark
                yield self.table
                yield self.log_panel
            with Vertical(id="right"):
                yield self.profile
                yield self.intents
                yield self.diff_box
        yield Footer()

    def on_mount(self) -> None:
        self.table.border_title = "experiments (enter: select)"
        self.log_panel.border_title = "agent log"
        self.intents.border_title = "intents (priority)"
        self.diff_box.border_title = "diff against the base"
        self.poll()
        self.set_interval(self.poll_s, self.poll)
        self.table.focus()

    def poll(self) -> None:
        if self.follow is not None:
            current = self.follow()
            if current is not None and current != self.run_dir:
                self._open(current)
                self._drawn_version, self.selected = -1, None
            elif current is None:
                self.status.show_starting()
                return
        if self.attach is not None and self._read_pipe():
            return
        if self.run_dir is None:
            self.status.show_starting()
            return
        self.view.apply(self.journal.poll())
        sources_changed = self.sources.poll()
        self.status.show(self.view)  # every tick: elapsed time moves on its own
        if self.view.version != self._drawn_version or sources_changed:
            self._drawn_version = self.view.version
            self.redraw()

    def _read_pipe(self) -> bool:
        """`run <dir>` once the run exists; `quit` when it was refused (also after `run`: its
        reference could not be judged); end of file when the run's process is done with us.
        True when the view is closing."""
        try:
            data = os.read(self.attach, 4096) if self.attach is not None else b""
        except BlockingIOError:  # nothing new
            return False
        self._pending += data.decode()
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if line.startswith("run ") and self.run_dir is None:
                self._open(Path(line[4:]))
            elif line == "quit":
                self.exit()
                return True
        if not data:
            self.attach = None  # the run is over (or gone): read no more
            if self.run_dir is None:  # refused before it began, or the run's process is gone
                self.exit()
                return True
        return False

    def redraw(self) -> None:
        view = self.view
        points = view.progress()
        # A leading zero pins the scale at 0, so bar heights compare to each other honestly
        # (the Sparkline otherwise stretches min..max, and one point fills the box).
        self.spark.data = [0.0, *points] if points else []
        if view.timed:
            self.spark.border_title = f"best speedup over {len(points)} candidates: {fmt_speed(view.best_speedup())}"
        else:
            self.spark.border_title = f"correct candidates (untimed): {int(points[-1]) if points else 0} of {len(points)}"
        self.table.sync(view, self.failures_only)
        self._table_title()
        self.intents.sync(view)
        self.intents.display = bool(view.intents)  # offline runs have none: give the room to the diff
        self.log_panel.sync(view)
        self.show_selected()

    def show_selected(self) -> None:
        cand = self.selected or self.view.winner
        c = self.view.candidates.get(cand) if cand else None
        self.profile.show(c, self.view)
        self.profile.border_title = f"profile of {cand}" if c else "profile"
        self.diff.show(self.sources.diff(cand) if c and cand else "")

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        self.selected = str(message.row_key.value)
        self.show_selected()

    def action_toggle_failures(self) -> None:
        self.failures_only = not self.failures_only
        self.table.sync(self.view, self.failures_only)
        self._table_title()

    def _table_title(self) -> None:
        if not self.failures_only:
            self.table.border_title = "experiments (enter: select)"
        elif any(c.failed for c in self.view.candidates.values()):
            self.table.border_title = "experiments: failures only (f: all)"
        else:  # an empty table must not look like a broken one
            self.table.border_title = "experiments: failures only: no candidate has failed (f: all)"

    def action_interrupt(self) -> None:
        """Ctrl-C: quit the view; under `optimize --watch`, stop the run too, unless it has
        finished already (then there is nothing to stop, and its result stands)."""
        self.interrupt_run = self.run_pid is not None and self.view.finished is None
        self.exit()

    def action_cursor(self, step: int) -> None:
        if step > 0:
            self.table.action_cursor_down()
        else:
            self.table.action_cursor_up()


def watch(run_dir: Path | None, attach_fd: int | None = None, run_pid: int | None = None,
          follow: Callable[[], Path | None] | None = None) -> bool:
    """Show the view until it is closed; True when Ctrl-C there stopped the run."""
    if attach_fd is not None:
        os.set_blocking(attach_fd, False)  # a poll reads what has arrived, never waits
    app = WatchApp(run_dir, attach=attach_fd, run_pid=run_pid, follow=follow)
    app.run()
    if app.interrupt_run and run_pid:
        os.kill(run_pid, signal.SIGINT)  # after the terminal is restored, so the run's last lines show
        return True
    return False
