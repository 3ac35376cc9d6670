"""One contract for module modes and state (docs/design.md, "Module modes and state"): the
evaluator checks a mode-dependent reference in training mode, its buffers afterwards, and eval
mode, naming the failing mode; the lowering keeps the mode dynamic. Real workers, real Triton
kernels under the interpreter; the adversarial candidates are tests/cases/mode_*, judged (and
their messages read: the failing mode named) by test_eval_cases.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from okgit.eval.types import Reference
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

TESTS = Path(__file__).parents[1]
OPS = TESTS / "ops"
pytestmark = pytest.mark.slow  # the real evaluator


def problem(op: str):
    return load_problem(OPS / f"{op}.py", root=str(OPS))


def lowered(op: str) -> list[str]:
    p = problem(op)
    ctx = Context(problem=p, reference=Reference(device="cpu", timed=False), backend="triton", device="cpu",
                  log=lambda type, **fields: None)
    return [proposal.source for proposal in plan(ctx)]


def test_the_lowering_of_a_batch_norm_reads_the_mode_and_is_right_in_both(evaluator) -> None:
    sources = lowered("batch_norm")
    assert sources
    for source in sources:
        # Either an aten batch norm whose training flag is not a constant, or a fused kernel
        # handed the mode at call time: never a mode fixed when the code was generated.
        if "batch_norm.default(" in source:
            assert ", True, " not in source.split("batch_norm.default(")[1].split("\n")[0]
        else:  # the batchnorm kind's launcher, handed the flag
            assert ", self.training, " in source
        assert "self.training" in source
    result = evaluator.evaluate(problem("batch_norm"), sources[0])
    assert result.correct, result.error
    passed = {g.name for g in result.gates if g.passed}
    assert {"train_mode", "state", "eval_mode"} <= passed


def test_a_reference_without_modes_gets_no_modes_case(evaluator) -> None:
    prep = evaluator.prepared(problem("relu"))
    assert not [c for c in prep.cases if c.kind == "modes"]
    assert [c.id for c in evaluator.prepared(problem("dropout")).cases if c.kind == "modes"] == ["m0"]
