"""The pool of pre-started workers (okgit.eval.parent.pool): on a GPU it refills in batches and
hands a worker out only once no start of its own is in progress (a start holds the device shared,
and a timing waits for it); on a CPU the next worker starts as one is taken. Real workers."""

from __future__ import annotations

from okgit.eval.parent.pool import WorkerPool
from okgit.eval.parent.sandbox import default_memory_limit


def _ready(worker) -> bool:
    return worker.wait_ready(0.0)  # already said it is ready: no start in progress


def test_a_batched_pool_refills_once_empty_and_hands_out_only_when_no_start_is_in_progress():
    pool = WorkerPool(default_memory_limit(), idle=2, batched=True)
    try:
        first = pool.take("cpu")  # empty: a batch for this job and the two next
        queue = pool.idle["cpu"]
        assert len(queue) == 2 and all(_ready(w) for w in queue) and _ready(first)
        assert first.ready_wait_s > 0.0 and all(w.ready_wait_s == 0.0 for w in queue)  # the wait counted once
        second = pool.take("cpu")
        assert len(queue) == 1 and second.ready_wait_s < first.ready_wait_s  # no start: nothing waited for
        third = pool.take("cpu")
        assert queue == []  # nothing started behind the jobs' backs
        fourth = pool.take("cpu")
        assert len(queue) == 2 and all(_ready(w) for w in queue)  # the next batch, started and done
        for w in (first, second, third, fourth):
            w.close()
    finally:
        pool.close()


def test_an_unbatched_pool_starts_the_next_worker_as_one_is_taken():
    pool = WorkerPool(default_memory_limit(), idle=1)
    try:
        pool.prestart("cpu")
        first = pool.take("cpu")
        (next_one,) = pool.idle["cpu"]
        assert next_one is not first and not _ready(next_one)  # starting while the job runs
        first.close()
    finally:
        pool.close()
