"""The one search loop: every proposer (templates, autotune, llm, replay) runs through it.

The driver owns numbering, evaluation, acceptance and the budgets; proposers only propose
and read back what happened from `ctx.attempts`. A proposer with `propose_batch(ctx, n)`
hands over up to n candidates at once, evaluated at once (`Evaluator.evaluate_many`) when the
evaluator runs several at a time (`width`); they are recorded in proposal order.

A proposal that is worth checking only if it is faster (`Proposal.screen`: the autotune phase's
variants in launch settings, the Inductor seeds, the templates) is timed first where the evaluator can
(`Evaluator.screen`: a fast timing, no correctness call) and a best timed by this search exists
(a resumed run's earlier best may have been timed on another card); slower than the best by more
than SCREEN_MARGIN, it is dropped unchecked: a `note` says so with both times, it gets no
candidate id, and it counts as an iteration and against the patience, as a candidate that set no
new best. A dropped proposal could only have lost; one that may be faster is evaluated in full,
as any other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from okgit.eval.base import Evaluator
from okgit.eval.types import EvalResult, Mode
from okgit.search.profiling import ProfilePass
from okgit.search.types import Attempt, Context, Proposal, Proposer, source_key

# A proposer that keeps proposing what was already evaluated has nothing new to say.
MAX_DUPLICATES = 3
# A screened variant slower than the best by more than this is dropped unchecked: above what one
# fast timing of the same code varies by (medians of 10 samples: 1-3% on the H200)
SCREEN_MARGIN = 0.03
DROPPED = "dropped unchecked"  # the end of a screened variant's note (bench/sweep_dev.py counts them)


@dataclass
class Budget:
    iterations: int = 12  # evaluated candidates, all proposers together, and screened variants dropped
    # Correct candidates in a row that set no new best. A failed candidate neither counts nor
    # resets it: failures are bounded by the model's repair budgets and by the iterations, so a
    # model repairing one idea three times is not mistaken for a search that stopped improving.
    patience: int = 6
    time_s: float | None = None
    usd: float | None = None
    target_speedup: float | None = None


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
        profiler: str = "auto",
    ) -> None:
        self.ctx = ctx
        self.evaluator = evaluator
        self.budget = budget
        self.accept = accept
        self.mode = mode
        self.started = time.monotonic()
        if budget.time_s is not None:  # proposers check it before each model call
            ctx.deadline = self.started + budget.time_s
        self.since_best = 0
        self.evaluated = len(ctx.attempts)  # a resumed run's iteration budget counts what it did
        self.stop_reason = ""
        self.seen = {source_key(a.proposal.source) for a in ctx.attempts}
        self.earlier = {a.cand for a in ctx.attempts}  # a resumed run's: timed in an earlier session, maybe on another card
        log = ctx.log

        def counting_log(type: str, **fields):
            if type in ("llm_call", "evaluated"):  # model calls and priced GPU-seconds share the dollar budget
                ctx.spent_usd += float(fields.get("cost_usd") or 0.0)
            return log(type, **fields)

        ctx.log = counting_log
        # the profiling pass apart from timing (okgit.search.profiling): `profiler` names its tools
        self.profiling = ProfilePass(evaluator, ctx, profiler)

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
        for proposer in proposers:  # work that needs nothing of the search begins beside it
            begin = getattr(proposer, "begin", None)
            if begin:
                begin(self.ctx)
        self.profiling.reference()
        for proposer in proposers:
            duplicates = 0
            while not self.should_stop():
                batch = self._propose(proposer)
                if batch is None:
                    break
                fresh = []
                for proposal in batch:
                    key = source_key(proposal.source)
                    if key in self.seen:
                        duplicates += 1
                        continue
                    duplicates = 0
                    self.seen.add(key)
                    fresh.append(proposal)
                if fresh:
                    fresh = self._screen(fresh)
                    if fresh:
                        self.step_many(fresh)
                elif duplicates >= MAX_DUPLICATES:
                    break
            # A proposer may return None because a budget ran out inside its own call.
            if self.stop_reason or self.should_stop():
                break
        self.profiling.winner()
        for proposer in proposers:
            finish = getattr(proposer, "finish", None)
            if finish:
                finish(self.ctx)
        return self.stop_reason or "proposers exhausted"

    def _screen(self, proposals: list[Proposal]) -> list[Proposal]:
        """The proposals to evaluate: each screened one timed first, and dropped where it is slower
        than the best past SCREEN_MARGIN (see the module's docstring)."""
        best = self.ctx.best
        best_us = best.result.runtime_us if best is not None and best.result.timed else None
        screen = getattr(self.evaluator, "screen", None)  # a plugin's evaluator may have none
        if not best_us or best is None or screen is None or best.cand in self.earlier:
            return proposals
        kept = []
        for proposal in proposals:
            us = screen(self.ctx.problem, proposal.source, backend=proposal.backend) if proposal.screen else None
            if us is None or us <= best_us * (1 + SCREEN_MARGIN):
                kept.append(proposal)
                continue
            self.evaluated += 1
            self.since_best += 1
            self.ctx.log("note", message=f"{proposal.origin}: {proposal.intent} timed {us:.1f} us before any check, "
                                         f"{us / best_us:.2f}x the best ({best.cand}, {best_us:.1f} us): {DROPPED}")
        return kept

    def _propose(self, proposer: Proposer) -> list[Proposal] | None:
        """What the proposer has at once, at most what the evaluator runs at once and what the
        iteration and patience budgets leave (never a candidate a one-at-a-time search would
        not have reached); None when it has nothing more."""
        room = min(getattr(self.evaluator, "width", 1), self.budget.iterations - self.evaluated,
                   self.budget.patience - self.since_best)
        propose_batch = getattr(proposer, "propose_batch", None)
        if room > 1 and propose_batch is not None:
            return propose_batch(self.ctx, room)[:room] or None
        proposal = proposer.propose(self.ctx)
        return None if proposal is None else [proposal]

    def step(self, proposal: Proposal) -> Attempt:
        return self.step_many([proposal])[0]

    def step_many(self, proposals: list[Proposal]) -> list[Attempt]:
        """Evaluate a batch at once (grouped by backend), then record each candidate in proposal
        order, whatever order its results came in: its `proposal` and `evaluated` events, trace,
        acceptance and standing, one candidate after another, so every reader of the journal
        (progress lines, watch, history) sees what a one-at-a-time search writes. A lone
        candidate's `proposal` is written before it is evaluated (shown running meanwhile)."""
        first = len(self.ctx.attempts) + 1
        cands = [f"c{first + i:03d}" for i in range(len(proposals))]
        if len(proposals) == 1:
            self._announce(cands[0], proposals[0])
        results = self._evaluate(proposals)
        attempts = []
        for cand, proposal, result in zip(cands, proposals, results):
            if len(proposals) > 1:
                self._announce(cand, proposal)
            attempts.append(self._record(cand, proposal, result))
        self.profiling.after(attempts)  # after the verdicts are written: it never changes one
        return attempts

    def _announce(self, cand: str, proposal: Proposal) -> None:
        self.ctx.log("proposal", cand=cand, origin=proposal.origin, intent=proposal.intent, parent=proposal.parent,
                     backend=proposal.backend)

    def _evaluate(self, proposals: list[Proposal]) -> list[EvalResult]:
        problem, results = self.ctx.problem, dict[int, EvalResult]()
        for backend in dict.fromkeys(p.backend for p in proposals):
            mine = [i for i, p in enumerate(proposals) if p.backend == backend]
            sources = [proposals[i].source for i in mine]
            evaluate_many = getattr(self.evaluator, "evaluate_many", None)
            out = (evaluate_many(problem, sources, mode=self.mode, backend=backend) if evaluate_many else
                   [self.evaluator.evaluate(problem, s, mode=self.mode, backend=backend) for s in sources])
            results.update(zip(mine, out))
        return [results[i] for i in range(len(proposals))]

    def _gpu_usd(self, result: EvalResult) -> float | None:
        """What an evaluation's GPU time cost, where the evaluator prices it (Modal: `usd_per_s`):
        the job's seconds, and the container's start when it was a cold one."""
        price = getattr(self.evaluator, "usd_per_s", None)
        if not price or result.wall_s is None:
            return None
        billed = result.wall_s + ((result.queue_s or 0.0) if result.cold_start else 0.0)
        return round(billed * price, 6)

    def _record(self, cand: str, proposal: Proposal, result: EvalResult) -> Attempt:
        ctx = self.ctx
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
            cost_usd=self._gpu_usd(result),
            kernel_shapes=result.kernel_shapes,
            phase_s=result.phase_s or None,
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
        elif result.correct:
            self.since_best += 1
        return attempt
