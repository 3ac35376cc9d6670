"""Append-only JSON-lines files: a run's or a campaign's journal (events) and a run's traces
(full records).

A journal is the single source for `history`, `watch`, progress and reports: each line is an
object with `type`, `ts` (unix seconds), `run` and the event's fields, flushed as it is
written. `Journal` checks each line against its model (okgit.journal.events, .campaign) before
it writes it; `read_events` reads lines back as those models.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from okgit.journal.events import EVENTS, Event, check_event, parse_event


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


class JsonlWriter:
    """Lines of any shape, unchecked: traces.jsonl's writer."""

    def __init__(self, path: Path, run: str) -> None:
        self.path = Path(path)
        self.run = run
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, type: str, **fields: Any) -> None:
        self.append(self.line(type, fields))

    def line(self, type: str, fields: dict[str, Any]) -> str:
        return json.dumps({"type": type, "ts": round(time.time(), 3), "run": self.run, **fields}, default=_default)

    def append(self, line: str) -> None:
        # One write of a whole line in append mode: readers never see two events interleaved.
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


class Journal:
    """A journal's writer: an event of a type `models` does not hold, or one whose fields its
    model does not accept, is a bug in the writer and raises before anything is written."""

    def __init__(self, path: Path, run: str, models: dict[str, type[Event]] = EVENTS) -> None:
        self.file = JsonlWriter(path, run)
        self.models = models

    def write(self, type: str, **fields: Any) -> Event:
        """The event as its model: what a reader of the file gets for this line."""
        line = self.file.line(type, fields)
        event = check_event(json.loads(line), self.models)
        self.file.append(line)
        return event


def read_jsonl(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete lines from byte `offset` on, and the offset after the last complete line.

    A half-written last line is left for the next read, so a live run can be tailed.
    """
    path = Path(path)
    if not path.exists():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    events = []
    for raw in data[:end].splitlines():
        if raw.strip():
            try:
                events.append(json.loads(raw))
            except json.JSONDecodeError:
                continue  # a torn line from a crashed writer; the rest stays readable
    return events, offset + end


def read_events(path: Path, offset: int = 0, models: dict[str, type[Event]] = EVENTS) -> tuple[list[Event], int]:
    """`read_jsonl`'s lines as their models; a line no model reads is skipped (`parse_event`)."""
    lines, offset = read_jsonl(path, offset)
    return [e for e in map(lambda line: parse_event(line, models), lines) if e is not None], offset
