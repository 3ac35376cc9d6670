"""Append-only JSON-lines files: the run's journal (events) and traces (full records).

The journal is the single source for `history`, `watch` and reports: each line is an object
with `type`, `ts` (unix seconds), `run` and the event's fields, flushed as it is written;
`Journal` checks each event against its model (okgit.events) before it writes it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel

from okgit.events import check_event


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


class JsonlWriter:
    def __init__(self, path: Path, run: str) -> None:
        self.path = Path(path)
        self.run = run
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type, "ts": round(time.time(), 3), "run": self.run, **fields}
        line = json.dumps(event, default=_default) + "\n"
        # One write of a whole line in append mode: readers never see two events interleaved.
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        return json.loads(line)  # what readers of the file see: plain JSON, no pydantic objects


class Journal(JsonlWriter):
    """journal.jsonl's writer: an event of an unknown type, or one whose fields its model does
    not accept, is a bug in the writer and raises before anything is written."""

    def write(self, type: str, **fields: Any) -> dict[str, Any]:
        check_event(type, json.loads(json.dumps(fields, default=_default)))
        return super().write(type, **fields)


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


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    events, _ = read_jsonl(path)
    yield from events
