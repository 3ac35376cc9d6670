"""Pre-started idle workers, per device: each is taken for one job (okgit.eval.parent.sandbox)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from okgit.eval.parent.sandbox import WorkerProcess

STARTUP_TIMEOUT_S = 300.0  # a worker's start: forked or spawned, its imports and its device


class WorkerPool:
    """Idle, pre-started workers per device; `take()` hands out the oldest.

    `batched` (a GPU): a worker's start holds the device shared (okgit.eval.protocol.start), so a
    timing waits for every start in progress, and refilling the pool one worker per job made a
    job's timing wait for its successor's start (on the H200's sweep on 1326172, 2026-12-05, timings
    waited 4-8 s again and again while no hold the ledger then recorded was in progress: 170 s of
    the 443 s the ledgers span, waiting with the device's known holders idle). There the pool refills
    only once it is empty, with a batch started at once, and `take()` waits until every start in the
    pool is done before it hands a worker out: a problem's jobs then wait for starts once per batch,
    and no start of its own runs beside its timings. Elsewhere (a CPU, nothing held) the next
    worker starts as one is taken, behind the job's back.

    Timing-only workers (`timing_only`: the final gate's rounds, which neither check nor profile)
    wait in a line of their own: they skip the profiler session an evaluation's worker opens once up.
    They are started for the rounds ahead (`prestart`) or one per job, never kept idle beyond that."""

    def __init__(self, memory_limit: int, base_dir: Path | None = None, idle: int = 1, batched: bool = False) -> None:
        self.memory_limit = memory_limit
        self.idle_count = idle  # back-to-back jobs outrun one pre-started worker (torch + CUDA start)
        self.batched = batched
        # outputs travel through files: keep them in memory where the machine allows
        shm = Path("/dev/shm")
        self.base_dir = base_dir or (shm if shm.is_dir() and os.access(shm, os.W_OK) else None)
        self.idle: dict[tuple[str, bool], list[WorkerProcess]] = {}  # by device and timing-only

    def take(self, device: str, *, prestart_next: bool = True, timing_only: bool = False) -> WorkerProcess:
        """The oldest idle worker (fresh one if none), the pool topped up again."""
        queue = self.idle.setdefault((device, timing_only), [])
        waited = 0.0
        if self.batched:
            if prestart_next and not queue:  # this job's worker, and the next jobs' unless timing-only
                self.prestart(device, at_least=1 if timing_only else self.idle_count + 1, timing_only=timing_only)
            waited = self._settle(queue)
        worker = None
        while queue and worker is None:
            w = queue.pop(0)
            if w.forked() and w.alive():
                worker = w
            else:
                w.close()
        worker = worker or WorkerProcess(device, self.memory_limit, self.base_dir, timing_only=timing_only)
        worker.ready_wait_s += waited  # the job waited for its batch: its worker's start, as it reports
        if prestart_next and not self.batched and not timing_only:
            self.prestart(device)
        return worker

    def _settle(self, queue: list[WorkerProcess]) -> float:
        """Wait until every worker in `queue` has started (or failed to); the seconds it took."""
        t0 = time.monotonic()
        for w in queue:
            before = w.ready_wait_s
            w.wait_ready(max(0.0, t0 + STARTUP_TIMEOUT_S - time.monotonic()))
            w.ready_wait_s = before  # counted once, for the job that waited (`take`)
        return time.monotonic() - t0

    def prestart(self, device: str, at_least: int = 0, timing_only: bool = False) -> None:
        queue = self.idle.setdefault((device, timing_only), [])
        while len(queue) < max(0 if timing_only else self.idle_count, at_least):
            queue.append(WorkerProcess(device, self.memory_limit, self.base_dir, timing_only=timing_only))

    def drop_timing_only(self, device: str) -> None:
        """Close the timing-only workers left idle (rounds that ended early): no job of another kind
        takes them, and each holds a CUDA context."""
        for worker in self.idle.pop((device, True), []):
            worker.close()

    def idle_workers(self, device: str) -> list[WorkerProcess]:
        """Every idle worker of `device`, of either line."""
        return [w for (d, _), queue in self.idle.items() if d == device for w in queue]

    def wait_warm(self, device: str, timeout_s: float) -> bool:
        """Wait until every idle worker of `device` is ready (a benchmark of warm evaluations)."""
        deadline = time.monotonic() + timeout_s
        return all(w.wait_ready(deadline - time.monotonic()) for w in self.idle_workers(device))

    def close(self) -> None:
        for queue in self.idle.values():
            for worker in queue:
                worker.close()
        self.idle.clear()
