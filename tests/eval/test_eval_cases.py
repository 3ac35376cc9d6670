"""The adversarial suite: one candidate per exploit class, each judged by real workers on the CPU
(Triton interpreter). tests/cases/<name>/ holds candidate.py and expected.json:
{"op": name of tests/ops/<op>.py, "status": ..., "gate": one gate or a list of acceptable ones,
 optional "timeout_s" / "memory_limit_gb" for an evaluator of its own}. The candidates' kernels
take large blocks (8192 elements; the matrix products K whole): the interpreter runs each program
in Python, and a few programs reach every gate as many small ones do.

The sweep's own check of a winner (okgit.kernelbench.baselines.check) agrees with each verdict:
it checks with the evaluator's contract and code (okgit.eval.parent.one_shot.check_winner) in an
evaluator of its own that prepares the reference again, so a winner the evaluator passed is
never called wrong by the sweep, nor the other way round. Both run the same code, so one case of
each op, verdict and kind of gate (static: nothing runs; or a gate that runs the candidate), the
first by name, stands for the rest here; test_crosscheck.py reads every case's verdict through
the sweep's check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

CASES = Path(__file__).parents[1] / "cases"
OPS = Path(__file__).parents[1] / "ops"
FAKE_KEY = "sk-fake-0123456789"
# What a case's message must say beside its gate: the failing mode and the buffer named
MESSAGES = {"mode_bn_fixed_training": ("eval-mode output 0", "m0"),
            "mode_bn_stats_not_updated": ("buffer bn.running_mean after the training-mode call",)}

# Set before any worker starts: no worker may see it (case reads_credential).
os.environ["OPENAI_API_KEY"] = FAKE_KEY
os.environ["MODAL_TOKEN_SECRET"] = FAKE_KEY

from okgit.eval.parent.local import LocalEvaluator  # noqa: E402
from okgit.eval.types import EvalResult, Status  # noqa: E402
from okgit.kernelbench import baselines  # noqa: E402
from okgit.problem import load_problem  # noqa: E402


def _cases() -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if (p / "expected.json").is_file())


def _expected(name: str) -> dict:
    return json.loads((CASES / name / "expected.json").read_text())


def _problem(op: str):
    path = OPS / f"{op}.py"
    return load_problem(path, root=str(OPS))


def _representatives() -> list[str]:
    first: dict[tuple[str, str, bool], str] = {}
    for name in _cases():
        expected = _expected(name)
        if not {"timeout_s", "memory_limit_gb"} & expected.keys():  # an evaluator of their own
            first.setdefault((expected["op"], expected["status"], expected.get("gate") == "static"), name)
    return sorted(first.values())


_VERDICTS: dict[str, EvalResult] = {}  # each case judged once in a test process: the cross-check reads it again


def _verdict(name: str, evaluator: LocalEvaluator) -> EvalResult:
    if name in _VERDICTS:
        return _VERDICTS[name]
    expected = _expected(name)
    source = (CASES / name / "candidate.py").read_text()
    problem = _problem(expected["op"])
    if "timeout_s" in expected or "memory_limit_gb" in expected:
        limit = int(expected.get("memory_limit_gb", 0) * 2**30) or None
        own = LocalEvaluator(device="cpu", timeout_s=expected.get("timeout_s"), prestart=False, memory_limit_bytes=limit)
        own._prepared = evaluator._prepared  # the reference is the same: reuse it
        try:
            result = own.evaluate(problem, source)
        finally:
            own._prepared = {}
            own.close()
    else:
        result = evaluator.evaluate(problem, source)
    _VERDICTS[name] = result
    return result


def _agree(name: str, verdict: EvalResult, disagreement: str | None, error: str | None) -> None:
    """The sweep's check (disagreement, error) says what the evaluator's verdict says."""
    if verdict.status is Status.correct:
        assert disagreement is None and error is None, f"{name}: the evaluator passed it, the sweep says {disagreement or error}"
    elif verdict.status is Status.incorrect:  # the same verdict; the first failing gate of an address cache may differ
        assert disagreement and error is None, (name, disagreement, error)
    else:
        assert disagreement is None and error and verdict.status.value in error, (name, error)


@pytest.mark.slow  # the real evaluator, one candidate each
@pytest.mark.parametrize("name", _cases())
def test_case(name: str, evaluator: LocalEvaluator) -> None:
    expected = _expected(name)
    result = _verdict(name, evaluator)
    got = (result.status.value, result.error.gate if result.error else None)
    gates = expected.get("gate")
    ok_gates = gates if isinstance(gates, list) else [gates]
    assert got[0] == expected["status"] and got[1] in ok_gates, (
        f"{name}: got {got}, expected {expected['status']} at {gates}\n"
        f"{result.error.message if result.error else ''}")
    if expected["status"] == "correct":
        assert result.correct and not result.timed and result.runtime_us is None
    for needle in MESSAGES.get(name, ()):
        assert needle in result.error.message, (name, result.error.message)


@pytest.fixture(scope="module")
def sweeps():  # the sweep's check prepares on its own, with nothing started ahead, as baselines.check makes it
    ev = LocalEvaluator(device="cpu", prestart=False)
    yield ev
    ev.close()


@pytest.mark.slow  # the real evaluator's verdict (test_case's), and a second evaluator that prepares on its own
@pytest.mark.parametrize("name", _representatives())
def test_the_sweeps_check_and_the_evaluator_agree(name: str, evaluator: LocalEvaluator, sweeps) -> None:
    source = (CASES / name / "candidate.py").read_text()
    ref = Path(OPS / f"{_expected(name)['op']}.py")
    disagreement, error = baselines.check(ref, source, "cpu", evaluator=sweeps)
    _agree(name, _verdict(name, evaluator), disagreement, error)
