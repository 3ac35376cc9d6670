"""The adversarial suite: one candidate per exploit class, each judged by real workers on the CPU
(Triton interpreter). tests/cases/<name>/ holds candidate.py and expected.json:
{"op": name of tests/ops/<op>.py, "status": ..., "gate": one gate or a list of acceptable ones,
 optional "timeout_s" / "memory_limit_gb" for an evaluator of its own}."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

CASES = Path(__file__).parents[1] / "cases"
OPS = Path(__file__).parents[1] / "ops"
FAKE_KEY = "sk-fake-0123456789"

# Set before any worker starts: no worker may see it (case reads_credential).
os.environ["OPENAI_API_KEY"] = FAKE_KEY
os.environ["MODAL_TOKEN_SECRET"] = FAKE_KEY

from okgit.eval.parent.local import LocalEvaluator  # noqa: E402
from okgit.problem import load_problem  # noqa: E402


def _cases() -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if (p / "expected.json").is_file())


def _problem(op: str):
    path = OPS / f"{op}.py"
    return load_problem(path, root=str(OPS))


@pytest.mark.slow  # the real evaluator, one candidate each
@pytest.mark.parametrize("name", _cases())
def test_case(name: str, evaluator: LocalEvaluator) -> None:
    expected = json.loads((CASES / name / "expected.json").read_text())
    source = (CASES / name / "candidate.py").read_text()
    problem = _problem(expected["op"])
    if "timeout_s" in expected or "memory_limit_gb" in expected:
        own = LocalEvaluator(device="cpu", timeout_s=expected.get("timeout_s"), prestart=False,
                             memory_limit_bytes=int(expected.get("memory_limit_gb", 0) * 2**30) or None)
        own._prepared = evaluator._prepared  # the reference is the same: reuse it
        try:
            result = own.evaluate(problem, source)
        finally:
            own._prepared = {}
            own.close()
    else:
        result = evaluator.evaluate(problem, source)
    got = (result.status.value, result.error.gate if result.error else None)
    gates = expected.get("gate")
    ok_gates = gates if isinstance(gates, list) else [gates]
    assert got[0] == expected["status"] and got[1] in ok_gates, (
        f"{name}: got {got}, expected {expected['status']} at {gates}\n"
        f"{result.error.message if result.error else ''}")
    if expected["status"] == "correct":
        assert result.correct and not result.timed and result.runtime_us is None
