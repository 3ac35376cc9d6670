"""Where the view's data comes from: the run's journal.jsonl (as events) and traces.jsonl,
tailed.

Both files are read by byte offset, so a poll costs only what was appended since the last
one, and a half-written last line waits for the next poll (okgit.journal.files.read_jsonl).
Nothing here touches git: a run directory copied from another machine shows the same.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from okgit.journal.events import Event
from okgit.journal.files import read_events, read_jsonl


class Tail:
    """A journal's events appended since the last poll."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def poll(self) -> list[Event]:
        events, self.offset = read_events(self.path, self.offset)
        return events


class Sources:
    """The base source (the `reference` trace record) and every candidate's source."""

    def __init__(self, traces: Path) -> None:
        self.traces = traces
        self.offset = 0
        self.base: str | None = None
        self.path = "op.py"
        self.candidates: dict[str, str] = {}

    def poll(self) -> bool:
        changed = False
        records: list[dict[str, Any]]
        records, self.offset = read_jsonl(self.traces, self.offset)
        for rec in records:
            if rec.get("type") == "reference" and isinstance(rec.get("source"), str):
                self.base, self.path = rec["source"], rec.get("path") or self.path
                changed = True
            elif rec.get("type") == "candidate" and isinstance(rec.get("source"), str):
                self.candidates[str(rec.get("cand"))] = rec["source"]
                changed = True
        return changed

    def diff(self, cand: str) -> str:
        """A unified diff of `cand` against the base, or a line saying why there is none."""
        source = self.candidates.get(cand)
        if source is None:
            return f"# no source for {cand} in traces.jsonl yet"
        if self.base is None:
            # Runs recorded before the base went into traces: show the candidate whole.
            return f"# traces.jsonl holds no base source; {cand} in full:\n" + source
        lines = difflib.unified_diff(
            self.base.splitlines(keepends=True), source.splitlines(keepends=True),
            fromfile=f"a/{self.path}", tofile=f"b/{self.path} ({cand})",
        )
        text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        return text or f"# {cand} is identical to the base"
