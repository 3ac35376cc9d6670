"""A worker's or judge's start on the GPU, under the device's lock.

A process's start works on the device: its CUDA context (memory the driver hands out and maps),
its first allocation, the warm-up's kernel (okgit.eval.worker.calls.start, warm_up; Proton's
session in a profiling pass's worker). Until 2026-12-04 a start held nothing, so it ran beside
any timing. On the H200's sweep on c0219f9, 4 of the 5 final-gate comparisons with a far-off
round (one arm 1.1-2.8x its other rounds) had it in their first round, the one that runs while
the gate's freshly started workers come up (`LocalEvaluator.prestart_for`), and no hold of
another problem overlapped the timings'.

The parent names its device's lock file in the process's environment (okgit.eval.parent.sandbox.worker_env);
the process holds it shared from before CUDA comes up until its warm-up is done, as any other
work that times nothing (okgit.eval.parent.devices): a start waits for a timing in progress, and
a timing for the starts in progress. The parent never waits for a process's start while it holds
the device itself (it would wait behind a timing that waits for it): it waits for `ready` first.

torch.profiler's session, which an evaluation's worker then opens empty to pay its one-time cost
before its job (okgit.eval.worker.calls.open_profiler; a judge opens it in a thread beside its
preparation, after its start), runs no kernel, so it holds nothing (`let_go`): on the H200's sweep on 9d7c409 (2026-12-05) it was 3.4-4.5 s of a
5-6 s start, and timings waited behind starts for 198 of their 359 s of waiting.
bench/disturb.py's `session` row found it slows no timing beside it (an H100, 2026-12-05: rounds
within the spread of those beside processes that only bring CUDA up).

Whether a start disturbs a timing at all, so that the hold could go (it held the device for 26 of
the H100 sweep's 107 minutes on a96f65a): not shown harmless. bench/disturb.py's four idle/start
pairs (an H100, 2026-12-07) gave round medians of 727.0 us idle and 728.0 beside starts, and 16 of
64 idle rounds against 21 of 64 start rounds more than 2% above the lowest idle one; the start
rounds spread wider in two of the four pairs. The hold stays.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from okgit.eval.protocol.ledger import LEDGER_ENV, append
from okgit.locks import held

DEVICE_LOCK_ENV = "OKGIT_DEVICE_LOCK"
STAGE = "process start"  # the ledger's stage of a start's hold
_steps: list[tuple[str, float]] = []  # (step, when it ended) within the start in progress
_LET_GO = ""  # among the steps: where the hold ended


def step(name: str) -> None:
    """One step of the start is done (its CUDA context, the warm-up, a profiler session): the
    ledger's line for the start says what each step held the device for."""
    _steps.append((name, time.monotonic()))


@contextmanager
def device_start(role: str) -> Iterator[Callable[[], None]]:
    """Hold the device named by the environment shared (nothing where none is named: a CPU's
    process); the name leaves the environment, so nothing the job runs later reads it there, and
    so does the ledger's, where the hold is written (`role`: worker or judge, with its steps).
    Yields `let_go`: called inside, it gives the device back there, for steps that run no kernel
    (the profiler's session); the ledger's line names those apart (`after`)."""
    path = os.environ.pop(DEVICE_LOCK_ENV, "")
    ledger = os.environ.pop(LEDGER_ENV, "")
    if not path:
        yield lambda: None
        return
    hold = contextlib.ExitStack()
    waited = hold.enter_context(held(Path(path), shared=True))
    since = time.monotonic()
    held_s: float | None = None  # the hold's seconds, once it ended
    _steps.clear()

    def let_go() -> None:
        nonlocal held_s
        if held_s is None:
            held_s = time.monotonic() - since
            _steps.append((_LET_GO, time.monotonic()))
            hold.close()

    try:
        yield let_go
    finally:
        let_go()
    steps: dict[str, float] = {}
    after: dict[str, float] = {}
    into, last = steps, since
    for name, ended in _steps:
        if name == _LET_GO:
            into, last = after, ended
            continue
        into[name], last = round(ended - last, 3), ended
    append({"stage": STAGE, "role": role, "mode": "shared", "wait_s": round(waited, 3), "held_s": round(held_s or 0.0, 3),
            "steps": steps, **({"after": after} if after else {})}, ledger)
