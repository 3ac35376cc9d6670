"""A local pool of devices: jobs run concurrently, each on its own device, behind per-device locks.

Two promises:
- Two timings never share a GPU, across every okgit process of the user: each physical
  device has its own fcntl lock file under okgit's per-user data dir. Locks are keyed by the
  physical device (through CUDA_VISIBLE_DEVICES), so a process pinned to "GPU 2" and
  seeing it as cuda:0 takes the same lock as an unpinned process using cuda:2.
- Work that needs no device overlaps: a pool may hold more slots than devices (slots are
  dealt round-robin); spawning a worker, importing torch and starting CUDA happen before a
  job takes its device's lock. Everything that runs on the GPU holds the lock (correctness
  calls, the parent's comparisons, a sweep's torch.compile warm-up), since it would disturb
  another job's timing.

Written for any number of devices; CPU "devices" (cpu:0, cpu:1, ...) are slots of the same
kind, which is how the scheduling is tested on machines without GPUs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from queue import Queue
from typing import TYPE_CHECKING, TypeVar

from okgit.eval.devices import physical_id, physical_name, visible_gpus

if TYPE_CHECKING:
    from okgit.eval.base import Evaluator
    from okgit.eval.types import EvalResult, Mode
    from okgit.problem import Problem

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Slot:
    index: int  # the slot's number in its pool
    device: str  # the device as this process addresses it: "cuda:1", "cpu:0"

    @property
    def name(self) -> str:
        """The physical device, for results and reports ("cuda:5" under CUDA_VISIBLE_DEVICES=4,5)."""
        return physical_name(self.device)

    def env(self) -> dict[str, str]:
        """Environment that pins a child process to this slot's device (and only to it)."""
        if self.device.startswith("cuda"):
            return {"CUDA_VISIBLE_DEVICES": physical_id(self.device)}
        return {"CUDA_VISIBLE_DEVICES": ""}  # a CPU slot: hide GPUs so nothing lands on one


class DevicePool:
    """Run jobs concurrently over `slots` slots dealt round-robin over `devices`."""

    def __init__(self, devices: list[str], slots: int | None = None) -> None:
        if not devices:
            raise ValueError("a pool needs at least one device")
        n = slots or len(devices)
        if n < 1:
            raise ValueError("a pool needs at least one slot")
        self.devices = list(devices)
        self.slots = [Slot(index=i, device=devices[i % len(devices)]) for i in range(n)]

    @classmethod
    def local(cls, parallel: int = 1, device: str | None = None) -> DevicePool:
        """GPUs when there are some (and device is not "cpu"), else `parallel` CPU slots."""
        gpus = [] if device == "cpu" else visible_gpus()
        if gpus:
            return cls(gpus, slots=parallel)
        return cls([f"cpu:{i}" for i in range(parallel)])

    def map(self, fn: Callable[[T, Slot], R], items: Iterable[T]) -> list[R]:
        """fn(item, slot) for every item, at most one job per slot at a time; results in input order.

        A job's exception stops the scheduling of jobs not yet started and is raised once the
        running ones have finished (they are not killed half way: each owns a device).
        """
        free: Queue[Slot] = Queue()
        for slot in self.slots:
            free.put(slot)
        stop = threading.Event()

        def run(item: T) -> R:
            slot = free.get()
            try:
                if stop.is_set():
                    raise _Cancelled()
                return fn(item, slot)
            except _Cancelled:
                raise
            except BaseException:
                stop.set()
                raise
            finally:
                free.put(slot)

        items = list(items)
        with ThreadPoolExecutor(max_workers=len(self.slots), thread_name_prefix="okgit-pool") as ex:
            futures: list[Future[R]] = [ex.submit(run, item) for item in items]
            try:
                wait(futures)
            except BaseException:  # Ctrl-C: start nothing new; running jobs see the signal themselves
                stop.set()
                raise
        for f in futures:
            error = f.exception()
            if error is not None and not isinstance(error, _Cancelled):
                raise error
        return [f.result() for f in futures]

    def evaluate(self, problem: Problem, sources: list[str], *, mode: Mode = "fast", backend: str = "triton",
                 evaluator: Callable[[str], Evaluator] | None = None) -> list[EvalResult]:
        """Evaluate candidates concurrently, one per slot; each result names its physical device.

        `evaluator(device)` builds the evaluator of one slot (default: the local evaluator on
        that device, which holds `device_lock` while its worker uses the GPU).
        """
        make = evaluator or _local_evaluator
        evaluators: dict[int, Evaluator] = {}

        def job(source: str, slot: Slot) -> EvalResult:
            ev = evaluators.get(slot.index) or evaluators.setdefault(slot.index, make(slot.device))
            result = ev.evaluate(problem, source, mode=mode, backend=backend)
            return result.model_copy(update={"device": slot.name})

        return self.map(job, sources)


class _Cancelled(Exception):
    """A job not started because an earlier one failed."""


def _local_evaluator(device: str) -> Evaluator:
    from okgit.eval.local import LocalEvaluator

    return LocalEvaluator(device="cpu" if device.startswith("cpu") else device)  # cuda:N: one GPU of several
