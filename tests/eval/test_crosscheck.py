"""How the sweep's own check of a winner (okgit.kernelbench.baselines.check, through
okgit.eval.parent.one_shot.check_winner) reads a verdict, for every case of the adversarial suite
(tests/cases): it says what the evaluator said. test_eval_cases.py runs the check itself beside
the real evaluator on one case of each op, verdict and kind of gate."""

from __future__ import annotations

import json

import pytest
from test_eval_cases import CASES, OPS, _agree, _cases

from okgit.eval.base import InMemoryEvaluator
from okgit.eval.parent.one_shot import check_winner
from okgit.eval.types import EvalError, EvalResult, Status
from okgit.problem import load_problem


@pytest.mark.parametrize("name", _cases())
def test_the_sweeps_check_reads_every_cases_verdict_as_the_evaluator_gave_it(name: str) -> None:
    """Each case's expected verdict, as the evaluator returns it, through the sweep's check: the
    same answer, on one line that names the failing gate."""
    expected = json.loads((CASES / name / "expected.json").read_text())
    gates = expected.get("gate")
    gate = gates[0] if isinstance(gates, list) else gates
    status = Status(expected["status"])
    verdict = EvalResult(status=status, correct=status is Status.correct, error=EvalError(
        gate=gate, message=f"{name}: the first line\n  File \"candidate.py\", line 3\nValueError: the last line") if gate else None)
    problem = load_problem(OPS / f"{expected['op']}.py", root=str(OPS))
    disagreement, error = check_winner(InMemoryEvaluator(lambda source: verdict), problem, "the winner's source")
    _agree(name, verdict, disagreement, error)
    said = disagreement or error
    if gate:
        assert said == (f"{gate}: {name}: the first line ... ValueError: the last line" if disagreement else
                        f"the winner's check here ended {status.value}: {gate}: {name}: the first line ... "
                        "ValueError: the last line")
