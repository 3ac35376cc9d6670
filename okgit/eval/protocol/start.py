"""A worker's or judge's start on the GPU, under the device's lock.

A process's start works on the device: its CUDA context (memory the driver hands out and maps),
its first allocation, the warm-up's kernel and profiler session (okgit.eval.worker.calls.start,
warm_up; Proton's session in a profiling pass's worker). Until 2026-12-04 a start held nothing,
so it ran beside any timing. On the H200's sweep on c0219f9, 4 of the 5 final-gate comparisons
with a far-off round (one arm 1.1-2.8x its other rounds) had it in their first round, the one that
runs while the gate's freshly started workers come up (`LocalEvaluator.prestart_for`), and no
hold of another problem overlapped the timings'.

The parent names its device's lock file in the process's environment (okgit.eval.parent.sandbox.worker_env);
the process holds it shared from before CUDA comes up until it is ready, as any other work that
times nothing (okgit.eval.parent.devices): a start waits for a timing in progress, and a timing
for the starts in progress. The parent never waits for a process's start while it holds the
device itself (it would wait behind a timing that waits for it): it waits for `ready` first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from okgit.eval.protocol.ledger import LEDGER_ENV, append
from okgit.locks import held

DEVICE_LOCK_ENV = "OKGIT_DEVICE_LOCK"
STAGE = "process start"  # the ledger's stage of a start's hold
_steps: list[tuple[str, float]] = []  # (step, when it ended) within the start in progress


def step(name: str) -> None:
    """One step of the start is done (its CUDA context, the warm-up, a profiler session): the
    ledger's line for the start says what each step held the device for."""
    _steps.append((name, time.monotonic()))


@contextmanager
def device_start(role: str) -> Iterator[None]:
    """Hold the device named by the environment shared (nothing where none is named: a CPU's
    process); the name leaves the environment, so nothing the job runs later reads it there, and
    so does the ledger's, where the hold is written (`role`: worker or judge, with its steps)."""
    path = os.environ.pop(DEVICE_LOCK_ENV, "")
    ledger = os.environ.pop(LEDGER_ENV, "")
    if not path:
        yield
        return
    with held(Path(path), shared=True) as waited:
        since = last = time.monotonic()
        _steps.clear()
        yield
        held_s = time.monotonic() - since
    steps = {}
    for name, ended in _steps:
        steps[name], last = round(ended - last, 3), ended
    append({"stage": STAGE, "role": role, "mode": "shared", "wait_s": round(waited, 3), "held_s": round(held_s, 3),
            "steps": steps}, ledger)
