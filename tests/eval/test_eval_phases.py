"""Where an evaluation's seconds go (okgit.eval.parent.phases): the real evaluator's phases on the
CPU, present, non-negative and adding up to its wall; how the clocks fold; and how a sweep adds
them up per problem from the journal and says so in its report."""

from __future__ import annotations

from pathlib import Path

import pytest

from okgit.eval.parent.phases import PHASES, fold, with_other
from okgit.eval.types import Status
from okgit.journal.events import Evaluated, ProposalEvent
from okgit.journal.runview import RunView
from okgit.kernelbench.runs import _outcome
from okgit.kernelbench.scoring import ProblemResult, SweepReport, summarize
from okgit.problem import load_problem

OPS = Path(__file__).parents[1] / "ops"


@pytest.mark.slow  # the real evaluator: a worker and the judge under the interpreter
def test_an_evaluation_says_where_its_seconds_went(evaluator):
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    evaluator.reference(problem)  # prepared: what follows is one evaluation of a candidate
    result = evaluator.evaluate(problem, (OPS / "relu_triton.py").read_text())
    assert result.status is Status.correct, result.error
    phases = result.phase_s
    assert list(phases) == list(PHASES)  # every phase, in order
    assert all(seconds >= 0 for seconds in phases.values())
    assert sum(phases.values()) <= result.wall_s + len(phases) * 0.0005  # each rounded to milliseconds
    # the worker's first call compiles the kernel (the interpreter: no compile, still a call), the
    # other calls are checked, the judge compares each, and the worker's process ends
    for name in ("load", "first_call", "draw", "inputs_kept", "calls", "judge_open", "judge_compare",
                 "judge_fingerprint", "exit"):
        assert phases[name] > 0, name
    assert phases["reference"] < 0.05  # prepared before: not prepared again
    assert phases["timing"] == phases["device_wait"] == 0  # a CPU times nothing
    # the verdict itself is not changed by the clock: no gate reads it
    assert all(g.passed for g in result.gates)


def test_the_clocks_fold_into_the_phases_and_add_up_to_the_wall():
    worker = {"load": 0.1, "compile": 0.2, "construct": 0.05, "first_call": 1.0, "draw": 0.3, "seeds": 0.4,
              "repeat": 0.2, "judge": 0.9, "timing": 0.5, "device_wait": 0.25, "write": 0.01}
    judge = {"expected": 0.5, "open": 0.02, "compare": 0.2, "fingerprint": 0.03, "release": 0.05}
    parent = {"static": 0.01, "reference": 0.0, "worker_start": 0.2, "lock_wait": 0.1, "exit": 0.05, "verdict": 0.02}
    phases = with_other(fold(parent, worker, judge, worker_wall=4.5), wall=6.0)
    assert phases["load"] == 0.35 and phases["calls"] == 0.6  # the worker's gates are its checked calls
    assert phases["judge_expected"] == 0.5 and phases["judge_compare"] == 0.2 and phases["judge_release"] == 0.05
    assert phases["judge_open"] == 0.02 and phases["judge_fingerprint"] == 0.03
    assert phases["relay"] == 0.1  # the worker waited 0.9 s for answers the judge spent 0.8 s on
    assert phases["exit"] == round(0.05 + 0.01 + (4.5 - sum(worker.values())), 3)
    assert phases["other"] == round(6.0 - sum(v for k, v in phases.items() if k != "other"), 3)
    assert abs(sum(phases.values()) - 6.0) < 0.005
    assert with_other({"calls": 2.0}, wall=1.0)["other"] == 0  # never negative


def test_a_sweep_adds_up_each_problems_evaluation_phases_and_reports_them():
    view = RunView()
    events = [ProposalEvent(ts=1, run="r", cand="c1", origin="o", intent="", parent=None, backend="triton"),
              Evaluated(ts=2, run="r", cand="c1", status="correct", correct=True, timed=True, speedup=1.0,
                        runtime_us=1.0, ref_runtime_us=1.0, error=None, profile=None, wall_s=3.0,
                        phase_s={"calls": 1.0, "judge_expected": 1.5, "other": 0.5, "timing": 0.0}),
              ProposalEvent(ts=3, run="r", cand="c2", origin="o", intent="", parent=None, backend="triton"),
              Evaluated(ts=4, run="r", cand="c2", status="incorrect", correct=False, timed=False, speedup=None,
                        runtime_us=None, ref_runtime_us=None, error=None, profile=None, wall_s=2.0,
                        phase_s={"calls": 0.5, "judge_expected": 1.25, "other": 0.25})]
    view.apply(events)
    outcome = _outcome({"status": "optimized", "best_tag": "t"}, view)
    assert outcome["eval_phase_s"] == {"calls": 1.5, "judge_expected": 2.75, "other": 0.75}
    assert outcome["gpu_s"] == 5.0
    problem = ProblemResult(key="level1/1_X", level=1, id=1, name="X", **outcome)
    report = SweepReport(dir=".", out=".", device="cuda", problems=[problem], summary=summarize([problem]))
    text = report.markdown()
    assert "Where the candidate evaluations' seconds went" in text
    assert "| level1/1_X | 2 | 5.0 | 1.5 | 2.8 | 0.8 |" in text


def test_a_cpu_evaluations_processes_run_torch_on_one_thread():
    """Threads gain nothing at a CPU's scaled shapes and cost the most on a loaded host (calls.start)."""
    import torch

    from okgit.eval.worker import calls

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        calls.start(torch, "cpu")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
