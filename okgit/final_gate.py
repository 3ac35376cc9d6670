"""The final gate of `okgit optimize` (okgit.run): the search's best timed candidates re-checked
in thorough mode and raced against the baseline in interleaved rounds, which decide the run's
status. A step the machine failed is tried again after waiting; one that still fails ends the
run `error` (`Unjudged`), never with a verdict on the kernel.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from okgit.config import Config
from okgit.errors import OkgitError
from okgit.eval.base import Evaluator
from okgit.eval.parent.rounds import far_off
from okgit.eval.types import Comparison, EvalResult
from okgit.search.types import Attempt, Context
from okgit.status import RunStatus

CONTENDER_SPEEDUP = 0.9  # a runner-up the search timed this far below the reference is not gated
GATE_RETRY_WAITS_S = (10.0, 30.0, 60.0)  # before each new try of a final-gate step the machine failed


class Unjudged(Exception):
    """The final gate could not judge a candidate, after its retries: the run ends `error`."""


def final_gate(ctx: Context, evaluator: Evaluator, config: Config, log) -> tuple[RunStatus, Attempt | None, Comparison | None]:
    """Decide the run's status. A timed winner must hold a thorough re-check and the interleaved
    rounds: faster past the noise in every round is `optimized`, as fast within the noise is
    `matched`; a candidate slower past the noise is never handed out (`slower`, when no other is).
    A step the machine failed (okgit.eval.types.EvalResult.infrastructure_failure) is tried again
    after waiting; if it still fails, the run ends `error`, never with a verdict on the kernel."""
    correct = [a for a in ctx.attempts if a.result.correct and a.tag]
    if not correct:
        return RunStatus.fallback, None, None
    if not ctx.reference.timed or not any(a.result.timed for a in correct):
        return RunStatus.unverified, ctx.best or correct[0], None
    ranked = sorted((a for a in correct if a.result.timed), key=lambda a: -(a.result.speedup or 0.0))
    # The first always (a slower run shows its figures); a runner-up only while the search's own
    # timing leaves it a chance: gating three kernels at 0.4x cost a minute a problem for nothing.
    finalists = ranked[:1] + [a for a in ranked[1:3] if (a.result.speedup or 0.0) >= CONTENDER_SPEEDUP]
    slower: tuple[Attempt, Comparison] | None = None  # the fastest of those that lost: for inspection
    for attempt in finalists:
        comparison = _gated(ctx, evaluator, config, attempt, log)
        if comparison is None:
            continue
        if comparison.optimized:
            return RunStatus.optimized, attempt, comparison
        if not comparison.slower:
            return RunStatus.matched, attempt, comparison
        if slower is None or comparison.speedup > slower[1].speedup:
            slower = attempt, comparison
    if slower:
        return RunStatus.slower, *slower
    return RunStatus.fallback, None, None


def _gated(ctx: Context, evaluator: Evaluator, config: Config, attempt: Attempt, log) -> Comparison | None:
    """One candidate through the final gate: the thorough check, then (when it holds) the
    interleaved rounds against the baseline; None when the check failed."""
    def thorough() -> EvalResult:
        return evaluator.evaluate(ctx.problem, attempt.proposal.source, mode="thorough", backend=attempt.proposal.backend)

    def rounds() -> Comparison:
        return evaluator.compare(ctx.problem, attempt.proposal.source, rounds=10 if config.mode == "thorough" else 5,
                                 backend=attempt.proposal.backend)

    check = _retried(thorough, attempt.cand, "the thorough check", log)
    log("gate", name="thorough", cand=attempt.cand, passed=check.correct,
        detail=check.error.message if check.error else "all correctness gates passed")
    if not check.correct:
        return None
    comparison = _retried(rounds, attempt.cand, "the interleaved rounds", log)
    if disturbed(comparison):
        # Read off the baseline's rounds alone, never the candidate's: the rounds are run once more
        # and the second decides, whatever either says of the candidate.
        log("gate", name="interleaved_disturbed", cand=attempt.cand, passed=not comparison.slower,
            detail=f"{comparison.detail}: a round the machine disturbed; the rounds run again",
            **comparison.model_dump(exclude={"detail"}))
        comparison = _retried(rounds, attempt.cand, "the interleaved rounds", log)
    log("gate", name="interleaved", cand=attempt.cand, passed=not comparison.slower, detail=comparison.detail,
        **comparison.model_dump(exclude={"detail"}))
    return comparison


def disturbed(comparison: Comparison) -> bool:
    """Whether one of the baseline's rounds stands far off its others (okgit.eval.parent.rounds)."""
    return far_off(comparison.baseline_us)


def _retried(step: Callable[[], Any], cand: str, what: str, log) -> Any:
    """`step`'s answer once the machine let it judge: a result that failed for the machine's
    sake, or a comparison whose rounds could not run, is tried again after each wait."""
    cause: str | None = None
    for wait_s in (0.0, *GATE_RETRY_WAITS_S):
        if wait_s:
            log("retry", cand=cand, step=what, cause=cause, wait_s=wait_s,
                message=f"{what} of {cand} could not be judged ({cause}); trying again in {wait_s:.0f} s")
            time.sleep(wait_s)
        try:
            answer = step()
        except OkgitError as e:  # a timing round that failed: the candidate passed its checks just before
            cause = str(e)
            continue
        cause = answer.infrastructure_failure() if isinstance(answer, EvalResult) else None
        if not cause:
            return answer
    raise Unjudged(f"{what} of {cand} could not be judged after {len(GATE_RETRY_WAITS_S) + 1} tries: {cause}")
