"""One-shot uses of the local evaluator: `okgit eval CAND --ref REF` on two files, and the
sweep's own check of a winner (the evaluator's contract and code, so the two cannot disagree)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from okgit.errors import OkgitError
from okgit.eval.parent.local import LocalEvaluator
from okgit.eval.types import EvalResult, Mode, Status
from okgit.problem import Problem, load_problem


def evaluate_file(cand: str | Path, ref: str | Path, device: str | None = None, mode: Mode = "fast",
                  backend: str | None = "triton") -> EvalResult:
    """`okgit eval CAND --ref REF`: the reference file's Model against the candidate file."""
    ref_path = Path(ref).resolve()
    cand_path = Path(cand)
    if not cand_path.is_file():
        raise OkgitError(f"{cand}: no such file")
    problem = load_problem(ref_path, root=str(ref_path.parent))
    with LocalEvaluator(device=device, prestart=False) as evaluator:
        return evaluator.evaluate(problem, cand_path.read_text(), mode=mode, backend=backend or "triton")


def check_winner(evaluator: Any, problem: Problem, source: str, backend: str = "triton") -> tuple[str | None, str | None]:
    """The sweep's own check of a winner (okgit.kernelbench.baselines, and on Modal
    okgit.eval.modal.remote): the evaluator's contract and code, so the two cannot disagree.
    (disagreement: the winner gives a wrong answer, error: no verdict here); both None when it holds.
    A file this evaluator already passed in thorough mode (the run's final gate, the same bytes and
    prepared reference) holds without another evaluation: the fast check is a subset of that one
    (5-6 s of a sweep problem's 140 on KernelBench's level 1, an H100, 2026-12-05)."""
    if evaluator.passed_thorough(problem, source, backend=backend):
        return None, None
    check = evaluator.evaluate(problem, source, mode="fast", backend=backend)
    why = f"{check.error.gate}: {_first_and_last_line(check.error.message)}" if check.error else check.status.value
    if check.status is Status.incorrect:
        return why[:300], None
    if check.status is not Status.correct:  # rejected, or the worker died: no figure for it
        return None, f"the winner's check here ended {check.status.value}: {why}"[:300]
    return None, None


def _first_and_last_line(text: str) -> str:
    """A message on one line: its first line, and its last (a traceback's exception) when they differ."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ... ".join(dict.fromkeys([lines[0], lines[-1]])) if lines else "no message"
