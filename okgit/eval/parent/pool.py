"""Pre-started idle workers, per device: each is taken for one job (okgit.eval.parent.sandbox)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from okgit.eval.parent.sandbox import WorkerProcess


class WorkerPool:
    """One idle, pre-started worker per device; `take()` hands it out and starts the next."""

    def __init__(self, memory_limit: int, base_dir: Path | None = None, idle: int = 1) -> None:
        self.memory_limit = memory_limit
        self.idle_count = idle  # back-to-back jobs outrun one pre-started worker (torch + CUDA start)
        # outputs travel through files: keep them in memory where the machine allows
        shm = Path("/dev/shm")
        self.base_dir = base_dir or (shm if shm.is_dir() and os.access(shm, os.W_OK) else None)
        self.idle: dict[str, list[WorkerProcess]] = {}

    def take(self, device: str, *, prestart_next: bool = True) -> WorkerProcess:
        """The oldest idle worker (fresh one if none), topping the idle ones up again."""
        queue = self.idle.setdefault(device, [])
        worker = None
        while queue and worker is None:
            w = queue.pop(0)
            if w.forked() and w.alive():
                worker = w
            else:
                w.close()
        worker = worker or WorkerProcess(device, self.memory_limit, self.base_dir)
        if prestart_next:
            self.prestart(device)
        return worker

    def prestart(self, device: str, at_least: int = 0) -> None:
        queue = self.idle.setdefault(device, [])
        while len(queue) < max(self.idle_count, at_least):
            queue.append(WorkerProcess(device, self.memory_limit, self.base_dir))

    def wait_warm(self, device: str, timeout_s: float) -> bool:
        """Wait until every idle worker of `device` is ready (a benchmark of warm evaluations)."""
        deadline = time.monotonic() + timeout_s
        return all(w.wait_ready(deadline - time.monotonic()) for w in self.idle.get(device, []))

    def close(self) -> None:
        for queue in self.idle.values():
            for worker in queue:
                worker.close()
        self.idle.clear()
