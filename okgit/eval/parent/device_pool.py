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

import functools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from queue import Queue
from typing import TYPE_CHECKING, Any, TypeVar

from okgit.eval.base import EvaluatorBase
from okgit.eval.parent.devices import physical_id, physical_name, visible_gpus

if TYPE_CHECKING:
    from okgit.eval.base import Evaluator
    from okgit.eval.types import Comparison, EvalResult, Mode, ProfileData, Reference
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
                running = set(futures)
                while running:  # in short waits: a signal's handler runs in this (main) thread, promptly
                    running = wait(running, timeout=0.5).not_done
            except BaseException:  # Ctrl-C: start nothing new; running jobs see the signal themselves
                stop.set()
                raise
        for f in futures:
            error = f.exception()
            if error is not None and not isinstance(error, _Cancelled):
                raise error
        return [f.result() for f in futures]

    def evaluator(self, make: Callable[[str], Evaluator] | None = None) -> PoolEvaluator:
        """The Evaluator over this pool's slots (`make(device)` builds one slot's evaluator)."""
        return PoolEvaluator(self, make)


class _Cancelled(Exception):
    """A job not started because an earlier one failed."""


class PoolEvaluator(EvaluatorBase):
    """The Evaluator over a pool: a batch's candidates run concurrently, one per slot.

    Each slot has its own evaluator, sharing nothing with the others (`make(device)`, default:
    the local evaluator on that device, with its own judge, idle workers and prepared
    reference), and a slot runs one job at a time, so no evaluator is used by two threads: a
    candidate's speedup is against the reference timed on its own GPU, and the judge that
    answers its checks sits on that GPU, under that GPU's lock. Everything but a batch (the
    reference, one candidate, the final gate's interleaved rounds) runs on the first slot.
    Each result names its slot's physical device.
    """

    def __init__(self, pool: DevicePool, make: Callable[[str], Evaluator] | None = None) -> None:
        self.pool = pool
        self.width = len(pool.slots)
        self.device = pool.slots[0].name
        build = make or functools.partial(_local_evaluator, host_share=len(pool.slots))
        self.evaluators: list[Evaluator] = []
        try:
            self.evaluators += [build(slot.device) for slot in pool.slots]
        except BaseException:
            self.close()
            raise

    def reference(self, problem: Problem) -> Reference:
        return self.evaluators[0].reference(problem).model_copy(update={"device": self.device})

    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        result = self.evaluators[0].evaluate(problem, source, mode=mode, backend=backend)
        return result.model_copy(update={"device": self.device})

    def evaluate_many(self, problem: Problem, sources: list[str], *, mode: Mode = "fast",
                      backend: str = "triton") -> list[EvalResult]:
        def job(source: str, slot: Slot) -> EvalResult:
            result = self.evaluators[slot.index].evaluate(problem, source, mode=mode, backend=backend)
            return result.model_copy(update={"device": slot.name})

        return self.pool.map(job, sources)

    def compare(self, problem: Problem, source: str, *, rounds: int = 5, backend: str = "triton") -> Comparison:
        return self.evaluators[0].compare(problem, source, rounds=rounds, backend=backend)

    def profile(self, problem: Problem, source: str, **kw: Any) -> ProfileData | None:
        profile = getattr(self.evaluators[0], "profile", None)  # a plugin's evaluator may have no pass
        return profile(problem, source, **kw) if profile else None

    def close(self) -> None:
        for ev in self.evaluators:
            close = getattr(ev, "close", None)
            if close is not None:
                close()


def local_evaluator(device: str | None = None, reference_timeout_s: float | None = None,
                    profiler: str | None = None) -> Evaluator:
    """`okgit optimize`'s local evaluator: over every visible GPU when there are several (and
    `device` is not "cpu"), else a LocalEvaluator on its one device. `profiler`: the tools the
    run's profiling pass will ask for (LocalEvaluator)."""
    gpus = [] if device == "cpu" else visible_gpus()
    if len(gpus) > 1:
        pool = DevicePool(gpus)
        return pool.evaluator(functools.partial(_local_evaluator, host_share=len(pool.slots),
                                                reference_timeout_s=reference_timeout_s, profiler=profiler))
    return _local_evaluator(device, reference_timeout_s=reference_timeout_s, profiler=profiler)


def _local_evaluator(device: str | None, host_share: int = 1, reference_timeout_s: float | None = None,
                     profiler: str | None = None) -> Evaluator:
    from okgit.eval.parent.local import LocalEvaluator

    # "cuda:N": one GPU of several; a CPU slot ("cpu:1") is the CPU; the slots share the host's memory
    return LocalEvaluator(device="cpu" if device and device.startswith("cpu") else device, host_share=host_share,
                          reference_timeout_s=reference_timeout_s, profiler=profiler)
