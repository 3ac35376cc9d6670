"""The sweep's own check of a winner (okgit.kernelbench.baselines.check) and the evaluator agree
on the adversarial suite (tests/cases): the baselines process checks with the evaluator's
contract and code, in an evaluator of its own that prepares the reference again, so a winner the
evaluator passed is never called wrong by the sweep, nor the other way round.

Both sides run the same code (okgit.eval.parent.local.check_winner), so one case of each op and
verdict stands for the rest with real evaluators (test_eval_cases judges every case): the first
case, by name, of each op, verdict and kind of gate (static: nothing runs; or a gate that runs
the candidate). How the sweep's check reads a verdict is checked for every case's verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_eval_cases import CASES, OPS, _cases

from okgit.eval.base import InMemoryEvaluator
from okgit.eval.parent.local import LocalEvaluator, check_winner
from okgit.eval.types import EvalError, EvalResult, Status
from okgit.kernelbench import baselines
from okgit.problem import load_problem


def _representatives() -> list[str]:
    first: dict[tuple[str, str, bool], str] = {}
    for name in _cases():
        expected = json.loads((CASES / name / "expected.json").read_text())
        if not {"timeout_s", "memory_limit_gb"} & expected.keys():  # an evaluator of their own
            first.setdefault((expected["op"], expected["status"], expected.get("gate") == "static"), name)
    return sorted(first.values())


@pytest.fixture(scope="module")
def sweeps():  # the sweep's check prepares on its own
    ev = LocalEvaluator(device="cpu")
    yield ev
    ev.close()


def _agree(name: str, verdict: EvalResult, disagreement: str | None, error: str | None) -> None:
    """The sweep's check (disagreement, error) says what the evaluator's verdict says."""
    if verdict.status is Status.correct:
        assert disagreement is None and error is None, f"{name}: the evaluator passed it, the sweep says {disagreement or error}"
    elif verdict.status is Status.incorrect:  # the same verdict; the first failing gate of an address cache may differ
        assert disagreement and error is None, (name, disagreement, error)
    else:
        assert disagreement is None and error and verdict.status.value in error, (name, error)


@pytest.mark.slow  # the real evaluator, and a second one that prepares on its own
@pytest.mark.parametrize("name", _representatives())
def test_the_sweeps_check_and_the_evaluator_agree(name: str, evaluator, sweeps) -> None:
    op = json.loads((CASES / name / "expected.json").read_text())["op"]
    source = (CASES / name / "candidate.py").read_text()
    ref = Path(OPS / f"{op}.py")
    verdict = evaluator.evaluate(load_problem(ref, root=str(OPS)), source)
    disagreement, error = baselines.check(ref, source, "cpu", evaluator=sweeps)
    _agree(name, verdict, disagreement, error)


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
