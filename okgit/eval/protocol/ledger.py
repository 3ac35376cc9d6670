"""The device ledger: where `OKGIT_DEVICE_LEDGER` names a file, each hold of a device's lock
appends one line to it (okgit.eval.parent.devices; a worker's or judge's start,
okgit.eval.protocol.start), so that a sweep can say where a problem's time went
(okgit.kernelbench.timeline reads it)."""

from __future__ import annotations

import json
import os
import time

LEDGER_ENV = "OKGIT_DEVICE_LEDGER"


def append(entry: dict[str, object], path: str | None = None) -> None:
    """One line, with the writer's pid and the wall clock; `path` None: the environment's ledger."""
    path = path if path is not None else os.environ.get(LEDGER_ENV)
    if not path:
        return
    line = json.dumps({**entry, "pid": os.getpid(), "t": round(time.time(), 3)}) + "\n"
    try:  # one short line in append mode: whole, among the lines of other processes
        with open(path, "a") as f:
            f.write(line)
    except OSError:
        pass  # the ledger is an account, never a reason for work to fail
