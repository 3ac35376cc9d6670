"""A run's directory, `.okgit/runs/<run>/`: the one place its file names are spelled (a
campaign's directory, okgit.git.campaigns, holds the same journal, report and diff).

Every writer (workspace, run, report, figures) and reader (history, patch, watch, traces, the
KernelBench sweep) takes its paths from here (docs/internals.md, "What a run leaves").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from okgit.errors import OkgitError
from okgit.journal.events import Event
from okgit.journal.files import read_events


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def journal(self) -> Path:
        """journal.jsonl: the run's events (okgit.journal.events), appended as they happen."""
        return self.path / "journal.jsonl"

    @property
    def traces(self) -> Path:
        """traces.jsonl: full records (the base's source, each candidate's, model calls)."""
        return self.path / "traces.jsonl"

    @property
    def report(self) -> Path:
        return self.path / "report.md"

    @property
    def diff(self) -> Path:
        """report.diff: the winner against the base, empty when nothing passed every gate."""
        return self.path / "report.diff"

    @property
    def result(self) -> Path:
        """result.json: the RunResult, what `optimize --json` prints."""
        return self.path / "result.json"

    def winner_diff(self, name: str, unfinished: str, no_winner: Callable[[], str]) -> str:
        """report.diff's text, as apply, verify and show take it from a run or a campaign
        (`name`): refused with `unfinished` before it is written, with `no_winner()`'s reason
        when it is empty."""
        if not self.diff.is_file():
            raise OkgitError(unfinished)
        diff = self.diff.read_text()
        if not diff.strip():
            raise OkgitError(f"{name} has no winner ({no_winner()}): its report.diff is empty")
        return diff

    def events(self) -> list[Event]:
        """The journal's events as their models (okgit.journal.events)."""
        return read_events(self.journal)[0]
