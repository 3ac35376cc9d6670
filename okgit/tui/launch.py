"""`optimize --watch`: the CLI starts `okgit watch` in its own process on the terminal.

It starts before the run has a directory (the view shows a starting state) and is told it
through a pipe, which also says `quit` when the run is refused while its reference is prepared. Ctrl-C in the view signals the optimize process, so the run stops as in
plain mode; `q` closes only the view, and plain progress takes the terminal back.
No textual here: the view's process imports it, not the run's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from okgit.journal.events import Event, InterruptedEvent
from okgit.views.progress import Printer

INTERRUPTED_RUN = 130  # the view's exit status when Ctrl-C there stopped the run


class WatchProcess:
    def __init__(self, root: Path) -> None:
        read_fd, write_fd = os.pipe()
        self._fd: int | None = write_fd
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "okgit", "watch", "--attach", str(read_fd), "--run-pid", str(os.getpid())],
                cwd=root, pass_fds=(read_fd,))
        finally:
            os.close(read_fd)

    def mute(self, printer: Printer) -> None:
        """Plain progress is held while the view is open and catches up once it closes."""
        printer.muted = self.open

        def closed() -> None:
            self.proc.wait()
            printer.view_closed(stopping=self.proc.returncode == INTERRUPTED_RUN)

        threading.Thread(target=closed, daemon=True).start()

    def attach(self, run_dir: Path) -> None:
        self._say(f"run {run_dir}")

    def open(self, event: Event | None = None) -> bool:
        """Whether the view still holds the terminal (plain progress waits until it does not)."""
        if isinstance(event, InterruptedEvent) and self.proc.poll() is None:
            try:  # Ctrl-C in the view: it signals us as it exits; let it give the terminal back
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        return self.proc.poll() is None

    def abort(self) -> None:
        """The run was refused before it began: close the view at once."""
        if self.open():
            self._say("quit")
            self.proc.wait()

    def wait(self) -> None:
        self._say(None)
        self.proc.wait()

    def _say(self, line: str | None) -> None:
        """One line to the view; None (and `quit`) ends the pipe: the view reads no more."""
        if self._fd is None:
            return
        try:
            if line is not None:
                os.write(self._fd, f"{line}\n".encode())
        except OSError:  # the view is gone already
            pass
        if line is None or line == "quit":
            os.close(self._fd)
            self._fd = None
