"""The sweep's own check of a winner (okgit.kernelbench.baselines.check) and the evaluator agree
on the adversarial suite (tests/cases): the baselines process checks with the evaluator's
contract and code, in an evaluator of its own that prepares the reference again, so a winner the
evaluator passed is never called wrong by the sweep, nor the other way round.

Both sides run the same code (okgit.eval.parent.local.check_winner), so one case of each op and verdict
stands for the rest (test_eval_cases judges every case): the first case, by name, of each op,
verdict and kind of gate (static: nothing runs; or a gate that runs the candidate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_eval_cases import CASES, OPS, _cases

from okgit.eval.parent.local import LocalEvaluator
from okgit.eval.types import Status
from okgit.kernelbench import baselines
from okgit.problem import load_problem

pytestmark = pytest.mark.slow  # the real evaluator, and a second one that prepares on its own


def _representatives() -> list[str]:
    first: dict[tuple[str, str, bool], str] = {}
    for name in _cases():
        expected = json.loads((CASES / name / "expected.json").read_text())
        if not {"timeout_s", "memory_limit_gb"} & expected.keys():  # an evaluator of their own
            first.setdefault((expected["op"], expected["status"], expected.get("gate") == "static"), name)
    return sorted(first.values())


@pytest.fixture(scope="module")
def sweeps():
    ev = LocalEvaluator(device="cpu")  # the sweep's check prepares on its own
    yield ev
    ev.close()


def test_every_op_and_verdict_of_the_suite_is_represented() -> None:
    names = _representatives()
    assert {"cache_on_data_ptr", "dummy_kernel_torch_compute", "imports_okgit", "launch_raised_fallback"} <= set(names)
    statuses = {json.loads((CASES / n / "expected.json").read_text())["status"] for n in names}
    assert statuses == {"correct", "incorrect", "rejected", "error", "compile_error"}


@pytest.mark.parametrize("name", _representatives())
def test_the_sweeps_check_and_the_evaluator_agree(name: str, evaluator, sweeps) -> None:
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
