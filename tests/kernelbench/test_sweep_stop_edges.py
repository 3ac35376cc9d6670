"""A sweep's stop at its edges: a problem stopped as its process starts (before that process can
take SIGTERM as Ctrl-C) and a problem stopped while it runs again alone after running out of
memory are both left to the next sweep, never recorded as finished with an error."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from okgit.eval.parent.device_pool import Slot
from okgit.kernelbench import runs, sweep
from okgit.kernelbench.reader import find_problems
from okgit.kernelbench.scoring import ProblemResult

FIXTURE = Path(__file__).parents[1] / "kb_fixture"


@pytest.mark.slow  # the sweep's problem processes, one made to start slowly
def test_a_problem_stopped_as_its_process_starts_is_left_in_flight_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    (problem,) = find_problems(FIXTURE, 1, "1")
    slow_start = tmp_path / "site"
    slow_start.mkdir()
    (slow_start / "sitecustomize.py").write_text("import time\ntime.sleep(5)\n")  # Python still starting at the stop
    stop = threading.Event()
    stop.set()  # the sweep's stop came as the problem started: SIGTERM within the process's first half second
    with pytest.raises(runs.ProblemInterrupted):
        runs.run_problem(problem, Slot(0, "cpu:0"), {"device": "cpu", "iterations": 1}, tmp_path / "out", 120.0,
                         timer=None, gpu=False, cross_check=False, device="cpu:0", stop=stop,
                         extra_env={"PYTHONPATH": str(slow_start)})
    assert (tmp_path / "out" / "in_flight" / f"{runs.slug(problem)}.json").is_file()


def test_a_stopped_process_is_told_apart_from_a_failed_one(tmp_path):
    (problem,) = find_problems(FIXTURE, 1, "1")
    space = runs.Workspace(problem, tmp_path, {}, threading.Event())
    ended = runs.subprocess.CompletedProcess([], -15, "", "")
    assert not space.stopped(ended)  # killed by something else: a failure, recorded
    space.stop.set()
    assert space.stopped(ended) and not space.stopped(runs.subprocess.CompletedProcess([], 0, "", ""))
    assert space.stopped(runs.subprocess.CompletedProcess([], 130, "", ""))


def test_a_problem_stopped_while_it_runs_again_alone_is_left_to_the_next_sweep(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    calls: list[str] = []

    def run(p, slot, flags, out_dir, timeout_s, *, stop, **kw) -> ProblemResult:
        calls.append(p.key)
        if p.key == "level1/2_RowSum" and calls.count(p.key) == 2:  # its run again alone: the sweep stops now
            stop.set()
            raise runs.ProblemInterrupted()
        if p.key != "level1/2_RowSum":
            return ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, status="unverified", correct=True,
                                 device=kw["device"])
        return ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, status="error", device=kw["device"],
                             error="CUDA out of memory. Tried to allocate 2 GiB")

    monkeypatch.setattr(sweep, "_run_problem", run)
    report = sweep.run_sweep(FIXTURE, level=1, parallel=2, flags={"device": "cpu"}, out=tmp_path)
    assert calls.count("level1/2_RowSum") == 2
    assert report.pending == ["level1/2_RowSum"]
    assert not (tmp_path / "state" / "level1_2_RowSum.json").exists()  # the next sweep runs it, not reads its error
    assert (tmp_path / "state" / "level1_1_ScaledRelu.json").is_file()
