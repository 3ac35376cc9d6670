"""The inner loop's bookkeeping for one intent: an attempt and its repair budgets.

An attempt is one implementation of an intent and its repairs. A failed candidate is either
a compile failure (the file did not run: a compile error, a crash, a reply with no usable
code, a file already evaluated) or a mismatch (it ran and was wrong, or a gate rejected it).
Each has its own budget of repairs within the attempt (`compile_retries`,
`mismatch_retries`); the failure past a budget ends the attempt as failed, and the intent's
next attempt starts again from the intent's base instead of the broken file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from okgit.eval.types import EvalResult, Status
from okgit.search.critic import describe_result
from okgit.search.extract import lookup_symbols
from okgit.search.types import Attempt

Failure = Literal["compile", "mismatch"]  # the two budgets a failed candidate counts against


def failure_of(result: EvalResult | None) -> Failure:
    if result is None or result.status in (Status.compile_error, Status.error):
        return "compile"
    return "mismatch"


@dataclass
class Refine:
    compile_retries: int
    mismatch_retries: int
    fix_from: Attempt | None = None  # the failed candidate the next prompt asks to repair
    feedback: str = ""  # what the last reply or candidate came to, for the next prompt
    compile_failures: int = 0
    mismatch_failures: int = 0

    def failed(self, failure: Failure) -> bool:
        """Count a failure of this attempt; True when it was past its repair budget."""
        if failure == "compile":
            self.compile_failures += 1
            return self.compile_failures > self.compile_retries
        self.mismatch_failures += 1
        return self.mismatch_failures > self.mismatch_retries

    def restart(self, feedback: str = "") -> None:
        """A new attempt: full repair budgets, from the intent's base."""
        self.fix_from, self.feedback = None, feedback
        self.compile_failures = self.mismatch_failures = 0

    def repairs(self) -> str:
        return f"{self.compile_failures} compile and {self.mismatch_failures} mismatch failures"


def failure_feedback(attempt: Attempt) -> str:
    """What the next prompt says about a failed candidate: the gate, its message, the
    differences, and for a compile failure what the installed toolchain says of the names."""
    result = attempt.result
    lines = [f"{attempt.cand} failed.", describe_result(result)]
    if result.status is Status.incorrect:
        lines.append("Find where the computation departs from the reference (indexing, masks, dtype, accumulation).")
    elif result.status is Status.rejected:
        lines.append("The evaluator rejected it; the gate's message and the rule of that gate above say why.")
    if result.error and result.status in (Status.compile_error, Status.error):
        found = lookup_symbols(result.error.message, attempt.proposal.backend)
        if found:
            lines.append("From the installed toolchain:\n" + found)
    lines.append("Fix it, keeping the idea.")
    return "\n".join(lines)
