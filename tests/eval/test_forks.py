"""Workers and judges forked from a zygote (okgit.eval.parent.forks, okgit.eval.worker.zygote): each
starts from the zygote, never from the worker before it; with the environment a spawned one would
have; under a reaper of its own that outlives it; spawned instead once its zygote is gone. Real
processes throughout."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
from test_reaper import _gone  # exited within a moment: its pipes close a moment before

from okgit.eval.parent import forks
from okgit.eval.parent.local import LocalEvaluator
from okgit.eval.parent.sandbox import WorkerProcess, _rss_bytes, _tree_rss_bytes, default_memory_limit, worker_env
from okgit.eval.protocol.reaper import descendants, exited
from okgit.eval.types import Status
from okgit.problem import load_problem

WORKER = ("cpu", "okgit.eval.worker")
OPS = Path(__file__).resolve().parent.parent / "ops"


def _environ(worker: WorkerProcess) -> dict[str, str]:
    """The environment of the worker proper, the one process below its reaper."""
    assert worker.wait_ready(120) and worker.forked(60) and worker.proc.pid is not None  # its pid comes on the status pipe
    (pid,) = descendants(worker.proc.pid)
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


def test_a_forked_worker_has_the_environment_a_spawned_one_would_have_then(monkeypatch):
    # A credential is no part of a worker's environment: the first worker forks from the zygote
    # every other test's workers fork from; a variable of the environment's own starts another.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.delenv("TORCH_OKGIT_PROBE", raising=False)
    first = WorkerProcess("cpu", default_memory_limit())
    try:
        assert isinstance(first.proc, forks.Forked)
        env = _environ(first)
        assert "TORCH_OKGIT_PROBE" not in env and "OPENAI_API_KEY" not in env
        assert env["TRITON_INTERPRET"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
        monkeypatch.setenv("TORCH_OKGIT_PROBE", "1")  # the next worker forks from a zygote with this
        second = WorkerProcess("cpu", default_memory_limit())
        try:
            assert isinstance(second.proc, forks.Forked)
            env = _environ(second)
            assert env["TORCH_OKGIT_PROBE"] == "1" and "OPENAI_API_KEY" not in env
        finally:
            second.close()
    finally:
        first.close()


def test_on_a_cpu_the_judge_and_the_workers_fork_from_one_zygote():
    """Their environments are the same there: torch, triton and both programs' modules are imported
    once a run (in two zygotes they took 10.5 s of CPU on a 2-core machine, in one 4.6 s)."""

    def parent(pid: int | None) -> int:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

    judge = WorkerProcess("cpu", default_memory_limit(), program="okgit.eval.judge")
    worker = WorkerProcess("cpu", default_memory_limit())
    try:
        assert judge.wait_ready(120) and worker.wait_ready(120)
        assert isinstance(judge.proc, forks.Forked) and isinstance(worker.proc, forks.Forked)
        assert judge.forked(60) and worker.forked(60)  # each reaper's pid read from its status pipe
        zygote = forks._ZYGOTES[("cpu", "okgit.eval.judge")]
        assert forks._ZYGOTES[WORKER] is zygote
        assert {parent(judge.proc.pid), parent(worker.proc.pid)} == {zygote.proc.pid}  # each reaper its fork
    finally:
        judge.close()
        worker.close()


def test_a_forked_workers_budget_counts_the_worker_not_its_reaper():
    """The reaper is a fork of the zygote: its resident pages are torch's, shared with the worker."""
    worker = WorkerProcess("cpu", default_memory_limit())
    try:
        assert worker.wait_ready(120) and worker.forked(60) and worker.proc.pid is not None  # its pid comes on the status pipe
        reaper = worker.proc.pid
        (pid,) = descendants(reaper)
        assert _rss_bytes(reaper) > 50 * 2**20  # torch's pages, as the zygote had them
        assert _tree_rss_bytes(reaper) == pytest.approx(_rss_bytes(pid), rel=0.2)
        worker.memory_limit = _rss_bytes(pid) + 32 * 2**20  # the worker's own memory fits
        assert not worker.over_budget()
    finally:
        worker.close()
    assert not worker.alive() and _gone(reaper)


def test_a_forked_workers_exit_reaches_a_thread_that_waits_and_one_that_polls():
    """A signal's handler lists the live workers (poll) while a job waits on one (wait)."""
    worker = WorkerProcess("cpu", default_memory_limit())
    try:
        assert worker.wait_ready(120)
        waited: list[int] = []
        waiter = threading.Thread(target=lambda: waited.append(worker.proc.wait(60)))
        waiter.start()
        worker.proc.stdin.close()  # no job: it exits
        polled = None
        deadline = time.monotonic() + 60
        while polled is None and time.monotonic() < deadline:
            polled = worker.proc.poll()
        waiter.join(60)
        assert waited == [0] and polled == 0
    finally:
        worker.close()


def test_workers_are_spawned_once_their_zygote_ended_on_its_own(monkeypatch):
    monkeypatch.setattr(forks, "_REFUSED", set())  # the refusal stays in this test
    first = WorkerProcess("cpu", default_memory_limit())
    try:
        assert isinstance(first.proc, forks.Forked) and first.wait_ready(120)
        zygote = forks._ZYGOTES[WORKER].proc
        zygote.kill()
        zygote.wait()
        second = WorkerProcess("cpu", default_memory_limit())
        try:
            assert isinstance(second.proc, subprocess.Popen) and second.wait_ready(120)
        finally:
            second.close()
        assert first.alive()  # a forked worker is not its zygote's: it lives on
    finally:
        first.close()
    monkeypatch.undo()
    again = WorkerProcess("cpu", default_memory_limit())  # a new zygote for the tests after this one
    try:
        assert isinstance(again.proc, forks.Forked) and again.wait_ready(120)
    finally:
        again.close()


SLEEPER_OP = '''import os
import sys

import torch
import torch.nn as nn

# a process in a session of its own, which a kill of the judge's process group would miss
pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "import time; time.sleep(3600)"], dict(os.environ),
                     setsid=True)
open({pid_file!r}, "w").write(str(pid))


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
'''


# Put on the zygote's path: the import of its fourth module, okgit.eval.worker.candidate (after
# the judge's own and triton), marked in a file and held up HOLD_S. The zygote sleeps meanwhile: a
# fork made before the hold is seen here within milliseconds, so a second tells before from after.
HOLD_S = 1
SLOW_CANDIDATE_IMPORT = f"""
import os, sys, time
class _Slow:
    def find_spec(self, name, path=None, target=None):
        if name == "okgit.eval.worker.candidate":
            with open(os.environ["OKGIT_TEST_MARK"], "a") as f:
                f.write(f"{{time.time()}}\\n")
            time.sleep({HOLD_S})
        return None
sys.meta_path.insert(0, _Slow())
"""


@pytest.mark.slow  # two zygotes import everything, each held up HOLD_S
@pytest.mark.parametrize("kind", ["cuda", "cpu"])
def test_on_a_gpu_a_judge_is_forked_once_its_own_imports_are_in(tmp_path, kind):
    """A GPU's judge forks once torch, numpy and its own modules are imported; a worker, and on a
    CPU the judge too, once the zygote imported everything (triton, the worker's modules,
    Inductor's runtime, torch._dynamo). Both asked for at once, as a run does: on a GPU the
    judge's fork comes before the zygote's fourth import ends, the worker's after it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_CANDIDATE_IMPORT)
    mark = tmp_path / "mark"
    root = str(Path(__file__).resolve().parents[2])
    env = {**worker_env("cpu"), "PYTHONPATH": os.pathsep.join([str(site), root]), "OKGIT_TEST_MARK": str(mark)}
    zygote = forks.Zygote((kind, tuple(sorted(env.items()))))
    asked = []
    try:
        for program in ("okgit.eval.judge", "okgit.eval.worker"):  # each fails at its CUDA here: no matter
            (tmp_path / program).mkdir()
            asked.append(zygote.fork(program, tmp_path / program, []))
        judge, worker = asked
        assert judge is not None and worker is not None
        assert judge.started(120)
        judge_at = time.time()
        assert worker.started(120)
        worker_at = time.time()
        held_up_until = float(mark.read_text().split()[0]) + HOLD_S
        if kind == "cuda":
            assert judge_at < held_up_until <= worker_at
        else:
            assert held_up_until <= judge_at
    finally:
        for handle in asked:
            if handle is not None:
                handle.close()
        zygote.kill()


@pytest.mark.slow  # a zygote's imports
def test_a_request_a_zygote_cannot_serve_is_said_on_that_workers_stderr_and_the_next_is_forked(tmp_path, monkeypatch):
    zygote = forks.Zygote(("cpu", tuple(sorted(worker_env("cpu").items()))))
    try:
        for name, program in (("unknown", "os"), ("unreadable", "okgit.eval.worker"), ("worker", "okgit.eval.worker")):
            (tmp_path / name).mkdir()
            with monkeypatch.context() as m:
                if name == "unreadable":  # the request's bytes are not JSON
                    m.setattr(forks.json, "dumps", lambda _: "{not json")
                handle = zygote.fork(program, tmp_path / name, [])
            assert handle is not None
            try:
                if name == "worker":
                    assert handle.started(120)  # the zygote goes on after the two it could not serve
                else:
                    assert handle.wait(120) == 1 and handle.pid is None  # never forked past its reaper
                    said = (tmp_path / name / "stderr.log").read_text()
                    assert f"not a program a zygote forks: {'None' if name == 'unreadable' else repr(program)}" in said
            finally:
                handle.close()
    finally:
        zygote.kill()


@pytest.mark.slow  # a judge prepares a reference
def test_what_a_forked_judge_left_in_a_session_of_its_own_ends_with_it_and_its_exit_reaches_the_parent(tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    op = tmp_path / "op.py"
    op.write_text(SLEEPER_OP.format(pid_file=str(pid_file)))
    ev = LocalEvaluator(device="cpu", prestart=False)
    try:
        ev.reference(load_problem(op, root=str(tmp_path)))
        (prep,) = ev._prepared.values()
        judge = prep.judge
        assert isinstance(judge.proc, forks.Forked)
        sleeper = int(pid_file.read_text())
        assert not exited(sleeper)
        judge.proc.stdin.close()  # the judge's end: it exits on its own, its reaper after it
        assert judge.proc.wait(60) == 0
        assert _gone(sleeper)
    finally:
        ev.close()


@pytest.mark.slow  # two evaluations
def test_a_forked_worker_holds_nothing_of_the_candidate_before_it(evaluator, tmp_path):
    """Each worker is forked from the zygote, which never ran a candidate: a mark the first
    candidate leaves in its process at import (Python's recursion limit) is not there for the
    second, which would see it in the same process."""
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    honest = (OPS / "relu_triton.py").read_text()
    marks = honest + "\nimport sys\nsys.setrecursionlimit(4321)\n"
    checks = honest + "\nimport sys\nassert sys.getrecursionlimit() != 4321, 'a mark of the candidate before'\n"
    first = evaluator.evaluate(problem, marks)
    second = evaluator.evaluate(problem, checks)
    assert first.status is Status.correct and second.status is Status.correct, (first.error, second.error)


@pytest.mark.slow  # the real evaluator
def test_a_forked_worker_has_inductors_runtime_before_its_job(evaluator):
    """The zygote imports what the Inductor seeds import (about a second in a fresh process on a
    CPU, in every evaluation's load before): the candidate finds it loaded at its own import."""
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    honest = (OPS / "relu_triton.py").read_text()
    checks = honest + ("\nimport sys\nassert 'torch._inductor.runtime.triton_helpers' in sys.modules, "
                       "'Inductor runtime not loaded before the job'\n")
    result = evaluator.evaluate(problem, checks)
    assert result.status is Status.correct, result.error


@pytest.mark.gpu
@pytest.mark.slow  # the real evaluator on a GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_workers_and_judges_are_forked_and_each_brings_up_cuda_itself(gpu_evaluator):
    """The zygote imported torch with its CUDA build and never initialised CUDA (it would have
    refused to fork): the judge and the workers are forked, and a candidate is judged and timed."""
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    result = gpu_evaluator.evaluate(problem, (OPS / "relu_triton.py").read_text())
    assert result.status is Status.correct and result.runtime_us, result.error
    judges = [prep.judge for prep in gpu_evaluator._prepared.values()]
    idle = [w for queue in gpu_evaluator.pool.idle.values() for w in queue]
    assert judges and idle and all(isinstance(w.proc, forks.Forked) for w in judges + idle)
