"""The message channel between a worker process and the parent: one JSON object per line.

The worker writes on its original stdout, which it keeps to itself: file descriptor 1 is
pointed at stderr before any op code runs, so nothing an op prints can pass for a message. The
parent answers on the worker's stdin. The parent's end (okgit.eval.parent.sandbox) reads with a
deadline and never trusts what it reads beyond its JSON shape.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

READY = {"ready": True}


class Channel:
    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        self._in = sys.stdin

    def send(self, message: dict[str, Any]) -> None:
        self._out.write(json.dumps(message, default=str) + "\n")
        self._out.flush()

    def receive(self) -> dict[str, Any] | None:
        """The parent's next message; None once it closed the channel."""
        line = self._in.readline()
        return json.loads(line) if line.strip() else None
