"""One sweep problem in its own process (okgit.kernelbench.solve): its run, then the check of
its winner with the run's own evaluator, so the reference the run prepared serves the check
too; a signal leaves a run that the next call resumes. In process, with the in-memory
evaluator, on a real git repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from okgit.eval.base import InMemoryEvaluator
from okgit.eval.types import EvalError, EvalResult, Status
from okgit.git.repo import git
from okgit.kernelbench.reader import find_problems
from okgit.kernelbench.runs import init_repo
from okgit.kernelbench.solve import solve
from okgit.status import RunStatus

FIXTURE = Path(__file__).parents[1] / "kb_fixture"
pytestmark = pytest.mark.slow  # each a whole run (templates lowered, commits, a report): seconds
FLAGS = {"device": "cpu", "iterations": 2}


def fast(source: str) -> EvalResult:
    return EvalResult(status=Status.correct, correct=True, timed=True, device="cuda:0", runtime_us=5.0,
                      ref_runtime_us=10.0, speedup=2.0)


class Counting(InMemoryEvaluator):
    """Counts the references it prepares and records each evaluation's mode; `interrupt_at`: the
    evaluation that a Ctrl-C stops."""

    def __init__(self, interrupt_at: int | None = None) -> None:
        super().__init__(fast, device="cuda:0", ref_runtime_us=10.0)
        self.references = 0
        self.interrupt_at = interrupt_at
        self.modes: list[str] = []

    def reference(self, problem):
        self.references += 1
        return super().reference(problem)

    def evaluate(self, problem, source, *, mode="fast", backend="triton"):
        if self.interrupt_at is not None and len(self.calls) + 1 >= self.interrupt_at:
            raise KeyboardInterrupt()
        self.modes.append(mode)
        return super().evaluate(problem, source, mode=mode, backend=backend)


def repo(tmp_path: Path) -> Path:
    problem = find_problems(FIXTURE, level=2)[0]
    work = tmp_path / "repo"
    init_repo(work, problem.file_name, problem.path.read_text())
    return work / problem.file_name


def journal(op: Path, run_id: str) -> list[dict]:
    path = op.parent / ".okgit" / "runs" / run_id / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_winner_is_checked_by_the_runs_own_evaluator_on_its_prepared_reference(tmp_path):
    op = repo(tmp_path)
    evaluator = Counting()
    solved = solve(op, FLAGS, evaluator=evaluator)
    assert solved.run is not None and solved.run["status"] == RunStatus.optimized
    assert solved.checked and solved.disagreement is None and solved.check_error is None
    assert evaluator.references == 1  # the check prepared nothing of its own
    winner = git("show", f"{solved.run['best_tag']}:{op.name}", cwd=op.parent)
    # the last evaluation: the final gate's thorough check of the winner's file as tagged, which
    # answers the sweep's check (a fast one would be a subset of it): no evaluation after it
    assert evaluator.calls[-1] == winner and evaluator.modes[-1] == "thorough"
    assert set(solved.walls) >= {"reference", "search", "final gate", "check"}


def test_a_winner_that_fails_the_check_is_said_to_disagree(tmp_path):
    op = repo(tmp_path)
    wrong = EvalResult(status=Status.incorrect, correct=False, device="cuda:0",
                       error=EvalError(gate="correctness", message="s2: 3 of 512 elements outside tolerance"))
    # the run up to the final gate is the test above's, Inductor's seed (a compile of ~30 s) included:
    # here without the seed, which the verdict after the gate does not depend on
    flags = {**FLAGS, "inductor": False}
    first = solve(op, flags, evaluator=Counting())
    assert first.run is not None and first.run["status"] == RunStatus.optimized
    # a finished run resumed by a later call (its evaluator new, no thorough verdict in it) checks
    # its winner afresh, and that check says the winner is wrong
    solved = solve(op, flags, resume=first.run["run_id"], evaluator=InMemoryEvaluator(lambda source: wrong))
    assert solved.run == first.run
    assert solved.disagreement and "outside tolerance" in solved.disagreement and solved.check_error is None


def test_an_interrupted_run_is_said_so_and_the_next_call_resumes_it(tmp_path):
    op = repo(tmp_path)
    # without Inductor's seed, as below: a stop and a resume do not depend on it (the first test's
    # run has the seed's process beside its search; here it would start once in each call)
    flags = {**FLAGS, "inductor": False}
    first = solve(op, flags, evaluator=Counting(interrupt_at=2))
    assert first.interrupted and first.run is None
    runs = [d.name for d in (op.parent / ".okgit" / "runs").iterdir()]
    assert len(runs) == 1
    assert journal(op, runs[0])[-1]["status"] == RunStatus.interrupted
    again = solve(op, flags, resume=runs[0], evaluator=Counting())
    assert not again.interrupted and again.run is not None and again.run["run_id"] == runs[0]
    assert again.run["status"] == RunStatus.optimized and again.checked
    assert any(e["type"] == "resumed" for e in journal(op, runs[0]))
    # resuming a run that has finished prepares nothing for the run and checks its winner again
    evaluator = Counting()
    third = solve(op, flags, resume=runs[0], evaluator=evaluator)
    assert third.run == again.run and third.checked and evaluator.references == 0


def test_a_run_stopped_between_a_verdict_and_its_tag_tags_it_on_resume(tmp_path, monkeypatch):
    """A signal after a candidate is judged correct (its verdict and trace written) and before it
    is committed and tagged: the resumed run tags it, rather than ending `fallback` with a correct
    kernel it never handed out (the race the real sweep stopped in flight, tests/bench/test_sweep_dev_script.py,
    met under load)."""
    from okgit.git.workspace import RunSpace

    op = repo(tmp_path)
    flags = {**FLAGS, "inductor": False}
    accept = RunSpace.accept

    def stopped(self, cand, source, message):
        raise KeyboardInterrupt()

    monkeypatch.setattr(RunSpace, "accept", stopped)
    first = solve(op, flags, evaluator=Counting())
    assert first.interrupted
    (run_id,) = [d.name for d in (op.parent / ".okgit" / "runs").iterdir()]
    events = journal(op, run_id)
    assert any(e["type"] == "evaluated" and e["correct"] for e in events)
    assert not any(e["type"] == "accepted" for e in events)
    monkeypatch.setattr(RunSpace, "accept", accept)
    again = solve(op, flags, resume=run_id, evaluator=Counting())
    assert again.run is not None and again.run["status"] == RunStatus.optimized and again.run["best_tag"]
    assert [e["cand"] for e in journal(op, run_id) if e["type"] == "accepted"][0] == "c001"
