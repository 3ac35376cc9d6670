"""The pool of pre-started workers (okgit.eval.parent.pool): on a GPU it refills in batches and
hands a worker out only once no start of its own is in progress (a start holds the device shared,
and a timing waits for it); on a CPU the next worker starts as one is taken; timing-only workers
(the final gate's rounds: no profiler session at their start) wait in a line of their own. Real
workers."""

from __future__ import annotations

import pytest

from okgit.eval.parent import forks
from okgit.eval.parent.pool import WorkerPool
from okgit.eval.parent.sandbox import default_memory_limit
from okgit.eval.protocol.jobs import Job
from tests.eval.test_eval_local import OPS


def _ready(worker) -> bool:
    return worker.wait_ready(0.0)  # already said it is ready: no start in progress


def test_a_batched_pool_refills_once_empty_and_hands_out_only_when_no_start_is_in_progress():
    pool = WorkerPool(default_memory_limit(), idle=2, batched=True)
    try:
        first = pool.take("cpu")  # empty: a batch for this job and the two next
        queue = pool.idle[("cpu", False)]
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
        (next_one,) = pool.idle[("cpu", False)]
        assert next_one is not first and not _ready(next_one)  # starting while the job runs
        first.close()
    finally:
        pool.close()


def test_timing_only_workers_wait_in_a_line_of_their_own_and_none_is_kept_idle():
    pool = WorkerPool(default_memory_limit(), idle=2, batched=True)
    try:
        pool.prestart("cpu", at_least=2, timing_only=True)  # the rounds ahead
        rounds = pool.idle[("cpu", True)]
        assert len(rounds) == 2 and all(w.timing_only for w in rounds) and ("cpu", False) not in pool.idle
        taken = [pool.take("cpu", timing_only=True) for _ in range(3)]  # the third: its own worker only
        assert all(w.timing_only for w in taken) and rounds == [] and ("cpu", False) not in pool.idle
        job = pool.take("cpu")  # an evaluation's worker: the other line, topped up as ever
        assert not job.timing_only and len(pool.idle[("cpu", False)]) == 2 and rounds == []
        assert len(pool.idle_workers("cpu")) == 2
        for w in (*taken, job):
            w.close()
    finally:
        pool.close()


@pytest.mark.slow  # a judge prepares the reference; workers forked and spawned
@pytest.mark.parametrize("started", ["forked", "spawned"])
def test_a_timing_only_worker_gets_its_flag_and_refuses_a_job_that_profiles(started, monkeypatch):
    """Forked from the zygote or spawned, the worker hears it is timing-only: a job that profiles
    (its first profiled call would pay the profiler's session with the device held alone) fails
    plainly, and a timing round's job runs."""
    from okgit.eval.parent.local import LocalEvaluator
    from okgit.problem import load_problem

    evaluator = LocalEvaluator(device="cpu", prestart=False)
    try:
        problem = load_problem(OPS / "relu.py", root=str(OPS))
        prep = evaluator.prepared(problem)  # by a forked judge either way: the workers are what is checked
        if started == "spawned":
            monkeypatch.setattr(forks, "fork", lambda *a, **k: None)
        seeds = [c for c in prep.cases if c.kind == "seed"]

        def job(profile: bool) -> Job:
            return evaluator._candidate_job(problem, prep, "torch", cases=seeds, check=False, profile=profile)

        _, refused = evaluator._run(job(True), problem.source, 120.0, None, timing_only=True)
        assert refused is not None and refused["failure"]["message"] == "a timing-only worker was given a job that profiles"
        _, ran = evaluator._run(job(False), problem.source, 120.0, None, timing_only=True)
        assert ran is not None and "failure" not in ran, ran
        _, evaluation = evaluator._run(job(True), problem.source, 120.0, None)
        assert evaluation is not None and "failure" not in evaluation, evaluation
    finally:
        evaluator.close()
