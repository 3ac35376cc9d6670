"""`okgit watch` where its output is not a terminal (a pipe, a file, a CI log): the run's events
as plain-mode progress lines (okgit.views.progress), from the first, until the run has finished
or no process holds it any more. The full-screen view needs a terminal; without one it would
write its screens into the pipe and wait for a key that never comes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from okgit.git.rundir import RunDir
from okgit.git.workspace import is_live
from okgit.journal.events import Event, RunFinished
from okgit.tui.sources import Tail

POLL_S = 0.5


def follow(run_dir: Path, on_event: Callable[[Event], None], sleep: Callable[[float], None] = time.sleep) -> None:
    """Every event of the run's journal to `on_event`, as they are written, until its
    run_finished, or until no process holds the run and nothing is left to read (an interrupted
    or crashed run, a finished run's copy from another machine)."""
    tail = Tail(RunDir(run_dir).journal)
    while True:
        live = is_live(run_dir)  # before the poll: a run ending between the two has its last events read
        for event in tail.poll():
            on_event(event)
            if isinstance(event, RunFinished):
                return
        if not live:
            return
        sleep(POLL_S)
