"""A run's directory, `.okgit/runs/<run>/`: the one place its file names are spelled.

Every writer (workspace, run, report, figures) and reader (history, patch, watch, traces, the
KernelBench sweep) takes its paths from here (docs/internals.md, "What a run leaves").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from okgit.git.journal import read_jsonl


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def journal(self) -> Path:
        """journal.jsonl: the run's events (okgit.events), appended as they happen."""
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

    def events(self) -> list[dict[str, Any]]:
        return read_jsonl(self.journal)[0]
