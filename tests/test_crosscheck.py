"""The sweep's own check of a winner (okgit.kernelbench.baselines.check) and the evaluator agree
on every case of the adversarial suite (tests/cases): the baselines process checks with the
evaluator's contract and code, in a process and evaluator of its own, so a winner the evaluator
passed is never called wrong by the sweep, nor the other way round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_eval_cases import CASES, OPS, _cases

from okgit.eval.parent.local import LocalEvaluator
from okgit.eval.types import Status
from okgit.kernelbench import baselines
from okgit.problem import load_problem

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def evaluators():
    pair = LocalEvaluator(device="cpu"), LocalEvaluator(device="cpu")  # the sweep's check prepares on its own
    yield pair
    for ev in pair:
        ev.close()


@pytest.mark.parametrize("name", [n for n in _cases() if not {"timeout_s", "memory_limit_gb"}
                                  & json.loads((CASES / n / "expected.json").read_text()).keys()])
def test_the_sweeps_check_and_the_evaluator_agree(name: str, evaluators) -> None:
    evaluator, sweeps = evaluators
    op = json.loads((CASES / name / "expected.json").read_text())["op"]
    source = (CASES / name / "candidate.py").read_text()
    ref = Path(OPS / f"{op}.py")
    verdict = evaluator.evaluate(load_problem(ref, root=str(OPS)), source)
    disagreement, error = baselines.check(ref, source, "cpu", evaluator=sweeps)
    if verdict.status is Status.correct:
        assert disagreement is None and error is None, f"{name}: the evaluator passed it, the sweep says {disagreement or error}"
    elif verdict.status is Status.incorrect:  # the same verdict; the first failing gate of an address cache may differ
        assert disagreement and error is None, (name, disagreement, error)
    else:
        assert disagreement is None and error and verdict.status.value in error, (name, error)
