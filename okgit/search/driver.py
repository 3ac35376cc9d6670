"""The one search loop: every proposer (templates, autotune, llm, replay) runs through it.

The driver owns numbering, evaluation, acceptance and the budgets; proposers only propose
and read back what happened from `ctx.attempts`.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Callable

from okgit.eval.base import Evaluator
from okgit.eval.types import Mode
from okgit.search.types import Attempt, Context, Proposer

# A proposer that keeps proposing what was already evaluated has nothing new to say.
MAX_DUPLICATES = 3


@dataclass
class Budget:
    iterations: int = 12  # evaluated candidates, all proposers together
    patience: int = 6  # evaluated candidates in a row without a new best
    time_s: float | None = None
    usd: float | None = None
    target_speedup: float | None = None


def source_key(source: str) -> str:
    return hashlib.sha256(source.strip().encode()).hexdigest()[:16]


def is_better(attempt: Attempt, best: Attempt | None) -> bool:
    """Correct beats nothing; among timed candidates the faster wins. Untimed never displaces."""
    if not attempt.result.correct:
        return False
    if best is None:
        return True
    return attempt.result.timed and (attempt.result.speedup or 0.0) > (best.result.speedup or 0.0)


class Search:
    def __init__(
        self,
        ctx: Context,
        evaluator: Evaluator,
        budget: Budget,
        accept: Callable[[Attempt], str | None],
        mode: Mode = "fast",
    ) -> None:
        self.ctx = ctx
        self.evaluator = evaluator
        self.budget = budget
        self.accept = accept
        self.mode = mode
        self.started = time.monotonic()
        self.since_best = 0
        self.evaluated = len(ctx.attempts)  # a resumed run's iteration budget counts what it did
        self.stop_reason = ""
        self.seen = {source_key(a.proposal.source) for a in ctx.attempts}
        log = ctx.log

        def counting_log(type: str, **fields):
            if type == "llm_call":
                ctx.spent_usd += float(fields.get("cost_usd") or 0.0)
            return log(type, **fields)

        ctx.log = counting_log

    @property
    def spent_usd(self) -> float:
        return self.ctx.spent_usd

    def should_stop(self) -> bool:
        b, best = self.budget, self.ctx.best
        if self.evaluated >= b.iterations:
            self.stop_reason = f"iteration budget ({b.iterations}) reached"
        elif self.since_best >= b.patience:
            self.stop_reason = f"no improvement in {b.patience} candidates"
        elif b.time_s is not None and time.monotonic() - self.started >= b.time_s:
            self.stop_reason = f"time budget ({b.time_s:.0f} s) reached"
        elif b.usd is not None and self.spent_usd >= b.usd:
            self.stop_reason = f"dollar budget (${b.usd:.2f}) reached"
        elif b.target_speedup and best and (best.result.speedup or 0.0) >= b.target_speedup:
            self.stop_reason = f"target speedup {b.target_speedup}x reached"
        return bool(self.stop_reason)

    def run(self, proposers: list[Proposer]) -> str:
        """Run proposers in order until each is exhausted or a budget ends the search."""
        for proposer in proposers:
            duplicates = 0
            while not self.should_stop():
                proposal = proposer.propose(self.ctx)
                if proposal is None:
                    break
                key = source_key(proposal.source)
                if key in self.seen:
                    duplicates += 1
                    if duplicates >= MAX_DUPLICATES:
                        break
                    continue
                duplicates = 0
                self.seen.add(key)
                self.step(proposal)
            # A proposer may return None because a budget ran out inside its own call.
            if self.stop_reason or self.should_stop():
                break
        for proposer in proposers:
            finish = getattr(proposer, "finish", None)
            if finish:
                finish(self.ctx)
        return self.stop_reason or "proposers exhausted"

    def step(self, proposal) -> Attempt:
        ctx = self.ctx
        cand = f"c{len(ctx.attempts) + 1:03d}"
        ctx.log("proposal", cand=cand, origin=proposal.origin, intent=proposal.intent, parent=proposal.parent, backend=proposal.backend)
        result = self.evaluator.evaluate(ctx.problem, proposal.source, mode=self.mode, backend=proposal.backend)
        ctx.log(
            "evaluated",
            cand=cand,
            status=result.status.value,
            correct=result.correct,
            timed=result.timed,
            speedup=result.speedup,
            runtime_us=result.runtime_us,
            ref_runtime_us=result.ref_runtime_us,
            error=result.error,
            profile=result.profile,
            wall_s=result.wall_s,
        )
        attempt = Attempt(cand=cand, proposal=proposal, result=result)
        ctx.trace(
            "candidate", cand=cand, origin=proposal.origin, intent=proposal.intent,
            parent=proposal.parent, source=proposal.source, result=result,
        )
        if result.correct:
            attempt.tag = self.accept(attempt)
        ctx.attempts.append(attempt)
        self.evaluated += 1
        if is_better(attempt, ctx.best):
            ctx.best = attempt
            self.since_best = 0
            ctx.log("best", cand=cand, speedup=result.speedup)
        else:
            self.since_best += 1
        return attempt
