"""The Evaluator interface and a tiny in-memory evaluator for tests of the search and the CLI."""

from __future__ import annotations

from typing import Callable, Protocol

from okgit.eval.types import Comparison, EvalResult, Mode, Reference, Status
from okgit.problem import Problem


class Evaluator(Protocol):
    """Judges candidates against a problem's reference. Implementations: local, modal, in-memory."""

    device: str

    def reference(self, problem: Problem) -> Reference:
        """Validate and measure the reference. Raises OkgitError when the op file cannot run."""

    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        """Every correctness gate, then timing where the device allows it."""

    def compare(self, problem: Problem, source: str, *, rounds: int = 5, backend: str = "triton") -> Comparison:
        """The final gate: interleaved rounds of reference and candidate in fresh processes."""


class InMemoryEvaluator:
    """Judges by a function of the source, without running anything. For tests of the search only."""

    def __init__(self, judge: Callable[[str], EvalResult], device: str = "cpu") -> None:
        self.judge = judge
        self.device = device
        self.calls: list[str] = []

    def reference(self, problem: Problem) -> Reference:
        return Reference(device=self.device, timed=False)

    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        self.calls.append(source)
        return self.judge(source)

    def compare(self, problem: Problem, source: str, *, rounds: int = 5, backend: str = "triton") -> Comparison:
        result = self.judge(source)
        if result.status is not Status.correct or not result.timed:
            raise ValueError("compare needs a timed, correct candidate")
        base = result.ref_runtime_us or 1.0
        cand = result.runtime_us or 1.0
        return Comparison(
            rounds=rounds,
            baseline_us=[base] * rounds,
            candidate_us=[cand] * rounds,
            noise=0.0,
            wins=rounds if cand < base else 0,
            sign_test_p=0.5**rounds,
            speedup=base / cand,
            optimized=cand < base,
        )
