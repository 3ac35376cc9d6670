"""Every cross-process lock okgit takes: one file each, held through `filelock`.

filelock's Unix lock is an flock on the open file, so a lock dies with its holder: a killed
worker or run never leaves one held. Lock files are kept (never unlinked on release: that
would let two processes hold "the same" lock on two files), and a filesystem without flock
is an error rather than a silent fallback to a lock that outlives a crash.

Used for: okgit's git operations in a repository (`Repo.lock`), a GPU's use
(`okgit.eval.parent.devices`: `held`, shared by work that times nothing, exclusive for timing),
and a run's liveness (`RunSpace.hold`, `is_live`).
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

# A probe (`gc`, `history`) holds a run's lock for an instant; only a holder that lasts
# this many tries is a second process working on the run.
PROBE_TRIES = 10
PROBE_PAUSE_S = 0.05


def _lock(path: Path) -> FileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    # thread_local off: a run's hold may be released by another thread than took it.
    return FileLock(path, thread_local=False, preserve_lock_file=True, fallback_to_soft=False)


@contextmanager
def exclusive(path: Path) -> Iterator[float]:
    """Hold `path` exclusively, waiting as long as it takes; yields the seconds spent waiting.

    Not reentrant: never take a lock while holding it.
    """
    lock = _lock(path)
    start = time.monotonic()
    with lock.acquire():
        yield time.monotonic() - start


@contextmanager
def held(path: Path, shared: bool) -> Iterator[float]:
    """Hold `path` shared (beside other shared holders) or exclusively (alone), waiting as long
    as it takes; yields the seconds spent waiting. A readers-writer lock across processes.

    Writers are not starved: every holder first passes a turnstile (`<path>.gate`, held only
    while it waits for `path`), so once an exclusive holder waits, no new shared holder gets
    past it; it waits only for those already in. flock, like `exclusive`: it dies with its
    holder. Not reentrant, and a shared holder that wants it alone releases it first.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        gate = os.open(path.with_name(path.name + ".gate"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        finally:
            os.close(gate)  # closing releases the turnstile
        yield time.monotonic() - start
    finally:
        os.close(fd)  # closing releases the lock


def waited_for(path: Path) -> bool:
    """Whether another holder waits at `path`'s turnstile (`held`). Asked by a shared holder, that
    is an exclusive one waiting for the shared ones to leave (a shared one passes the turnstile at
    once while no exclusive one holds `path`); one only passing it reads as waiting, which costs a
    needless release and retake, never a wrong hold."""
    gate = path.with_name(path.name + ".gate")
    if not gate.exists():
        return False
    fd = os.open(gate, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def try_hold(path: Path, tries: int = PROBE_TRIES) -> FileLock | None:
    """`path`'s lock, held until released, or None when another process holds it lastingly."""
    lock = _lock(path)
    for attempt in range(tries):
        try:
            lock.acquire(timeout=0)
            return lock
        except Timeout:
            if attempt + 1 < tries:
                time.sleep(PROBE_PAUSE_S)
    return None


def is_held(path: Path, tries: int = 3) -> bool:
    """Whether another process holds `path` (it exists and cannot be taken now)."""
    if not path.exists():
        return False
    lock = try_hold(path, tries)
    if lock is None:
        return True
    lock.release()
    return False
