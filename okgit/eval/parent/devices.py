"""Devices as okgit names and locks them: physical identities survive CUDA_VISIBLE_DEVICES.

Each physical GPU has its own lock file under okgit's per-user data dir, a readers-writer
lock (okgit.locks.held) across every okgit process of the user: work on the GPU that times
nothing (correctness calls, the reference's preparation, compiling) holds it shared, beside
other such work, and timing (and Inductor's autotuning) holds it exclusively, so nothing else
of okgit runs on the GPU while anything is timed there. A process pinned to "GPU 2" and
seeing it as cuda:0 takes the same lock as an unpinned process using cuda:2.

Where `OKGIT_DEVICE_LEDGER` names a file, every hold appends one line to it
(okgit.eval.protocol.ledger): what held the device (its stage), shared or exclusive, the seconds
waited and held, so that a sweep can say where a problem's time went (okgit.kernelbench.timeline
reads it); a prepared reference adds the device memory its problem is expected to hold.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from okgit.eval.protocol.ledger import append
from okgit.locks import held, waited_for
from okgit.paths import data_dir

Mode = Literal["shared", "exclusive"]
_stage: str | None = None  # what this process is doing, when it says more than the holder (`stage`)


# What a CUDA device needs on Linux, any one of them: NVIDIA's driver (its /proc entry, its control
# node, present in containers given a GPU), WSL's GPU node, ROCm's (torch's "cuda" there too)
_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def visible_gpus() -> list[str]:
    """This process's CUDA devices as torch names ("cuda:0", ...); [] without a GPU.

    Where no GPU driver is present torch is not imported to say so: that import (1.3 s) came
    before a CPU run's parent asked for its first worker; the parent imports torch later, for
    its templates, once the worker's start is under way (the first example's run on a 2-core CPU:
    5.17 s of wall against 5.56, medians of three)."""
    if sys.platform.startswith("linux") and not any(os.path.exists(p) for p in _DRIVER_PATHS):
        return []
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return []
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def physical_id(device: str) -> str:
    """The device's identity outside this process: "cuda:1" under CUDA_VISIBLE_DEVICES=4,5 is "4".

    CPU slots ("cpu:3") are their own identity. An entry of CUDA_VISIBLE_DEVICES may be a
    GPU UUID; it is returned as written.
    """
    kind, _, index = device.partition(":")
    if kind != "cuda":
        return device
    i = int(index or 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return str(i)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return entries[i] if i < len(entries) else str(i)


def physical_name(device: str) -> str:
    """How results name a device: "cuda:<physical id>" or the CPU slot."""
    return f"cuda:{physical_id(device)}" if device.startswith("cuda") else device


def lock_path(device: str) -> Path:
    key = re.sub(r"[^A-Za-z0-9_.-]", "-", physical_name(device))
    return data_dir() / "locks" / f"{key}.lock"


@contextmanager
def device_lock(device: str, mode: Mode = "exclusive", what: str = "device") -> Iterator[float]:
    """Hold `device` across processes, shared or exclusively; yields the seconds spent waiting.

    Not reentrant within one process: a job takes it once, around its work on the GPU. The
    lock dies with its holder, so a killed worker never leaves it held. `what`: the ledger's
    name for the work (`stage` overrides it).
    """
    with held(lock_path(device), shared=mode == "shared") as waited:
        start = time.monotonic()
        try:
            yield waited
        finally:
            _record(what, mode, waited, time.monotonic() - start)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Name what this process does for a while (the final gate, a winner's check): the ledger
    files every hold in it under `name`, whatever took it."""
    global _stage
    before, _stage = _stage, name
    try:
        yield
    finally:
        _stage = before


class DeviceHold:
    """A process's hold on its device, by regions: `region("shared")` around GPU work that times
    nothing, `region("exclusive")` around timing (and Inductor's autotuning); outside every
    region nothing is held (a compile on the CPU keeps no timing waiting). The strongest open
    region decides; `upgrade()` makes the hold exclusive until its regions close or `downgrade()`
    (a worker's timing, until it says the timing is done). Regions may nest and come from several
    threads: a thread inside an exclusive region never waits for another's. `device` None (a CPU): nothing is locked,
    and the hold's time is still written to the ledger."""

    def __init__(self, device: str | None, what: str) -> None:
        self.device, self.what = device, what
        self.mode: Mode | None = None
        self._open = {"shared": 0, "exclusive": 0}
        self._upgraded = False
        self._state = threading.Lock()
        self._held: contextlib.AbstractContextManager[float] | None = None
        self._waited = self._since = 0.0
        # what ran in the hold, for the ledger: each open labelled region (its label, since when),
        # and the seconds each label has been open during the current hold
        self._labels: dict[int, tuple[str, float]] = {}
        self._label_s: dict[str, float] = {}

    @contextmanager
    def region(self, mode: Mode, label: str | None = None) -> Iterator[None]:
        """`label`: what runs in the region (an Inductor benchmark function, a timing), written with
        the seconds it took beside each hold it fell in."""
        with self._state:
            self._open[mode] += 1
            self._settle()
            token = self._open_label(label)  # once held: it belongs to the hold it runs in
        try:
            yield
        finally:
            with self._state:
                self._open[mode] -= 1
                self._close_label(token)
                if not self._upgraded or not any(self._open.values()):
                    self._close_label(0)  # an upgrade's label ends with it
                self._upgraded = self._upgraded and any(self._open.values())
                self._settle()

    def upgrade(self, label: str | None = None) -> None:
        """Hold the device alone until the open regions close; `label`: what for (the worker's gate)."""
        with self._state:
            self._upgraded = any(self._open.values())
            self._settle()
            if self._upgraded and label and 0 not in self._labels:
                self._labels[0] = (label, time.monotonic())

    def downgrade(self) -> None:
        """Back from an upgrade to what the open regions want (shared): the job's timing is done and
        what is left of it (checking the timed outputs, writing its result, its process's exit) times
        nothing. A timing of another job that waits goes first (no new shared hold gets past it)."""
        with self._state:
            self._close_label(0)
            self._upgraded = False
            self._settle()

    def _open_label(self, label: str | None) -> int | None:
        if not label:
            return None
        token = max(self._labels, default=0) + 1
        self._labels[token] = (label, time.monotonic())
        return token

    def _close_label(self, token: int | None) -> None:
        if token is not None and token in self._labels:
            self._count_label(*self._labels.pop(token))

    def _count_label(self, label: str, opened: float) -> None:
        if self.mode is not None:
            self._label_s[label] = self._label_s.get(label, 0.0) + time.monotonic() - max(opened, self._since)

    def make_way(self, away: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext) -> bool:
        """Where this hold is shared (not upgraded) and another process waits to hold the device
        alone, let go and take it shared again, behind that one: a job's correctness work then keeps
        a timing waiting for one call, not for all of them (on the H200's sweep, 2026-12-04, an
        exclusive request waited behind shared holds for 12.6 of 48.5 minutes, evaluations' for
        most of it). Called between a job's calls, its GPU work finished. True where it made way.
        `away` is entered before letting go and left once the device is held again: the worker
        whose hold this is stays stopped all that while (sandbox.WorkerProcess.paused), so no
        thread of an untrusted candidate launches GPU work beside the other job's timing."""
        with self._state:
            if self.mode != "shared" or self.device is None or not waited_for(lock_path(self.device)):
                return False
            with away():
                self._release()
                self._settle()
            return True

    def _release(self) -> None:
        """Let go of what is held, its time written to the ledger."""
        if self.mode is not None:
            if self._held is not None:
                self._held.__exit__(None, None, None)
                self._held = None
            for label, opened in self._labels.values():
                self._count_label(label, opened)
            _record(self.what, self.mode, self._waited, time.monotonic() - self._since, self._label_s)
        self.mode, self._label_s = None, {}

    def _settle(self) -> None:
        """Hold what the open regions want; never wait for one mode while holding the other (two
        upgraders would deadlock)."""
        wanted: Mode | None = ("exclusive" if self._open["exclusive"] or self._upgraded else
                               "shared" if self._open["shared"] else None)
        if wanted == self.mode:
            return
        self._release()
        if wanted is not None:
            start = time.monotonic()
            if self.device is not None:
                self._held = held(lock_path(self.device), shared=wanted == "shared")
                self._held.__enter__()
            self.mode, self._waited, self._since = wanted, time.monotonic() - start, time.monotonic()


def record_footprint(nbytes: int, judge_phases: list[list[object]] | None = None,
                     worker_phases: dict[str, int] | None = None) -> None:
    """The device memory this process's problem is expected to hold (from its prepared reference),
    with what drove it where known: the judge's memory by phase of its preparation, and the peak
    a candidate's worker reserved in each of its gates."""
    append({"footprint_bytes": int(nbytes), **({"judge_phases": judge_phases} if judge_phases else {}),
            **({"worker_phases": worker_phases} if worker_phases else {})})


def _record(what: str, mode: Mode, waited_s: float, held_s: float, labels: dict[str, float] | None = None) -> None:
    """One hold; `labels`: the seconds each labelled region was open in it (nested ones overlap)."""
    entry: dict[str, object] = {"stage": _stage or what, "mode": mode, "wait_s": round(waited_s, 3),
                                "held_s": round(held_s, 3)}
    if labels:
        entry["for"] = {label: round(seconds, 3) for label, seconds in labels.items()}
    append(entry)
