"""Which candidates the profiling pass reads, when, and what the journal says of it.

The evaluator's pass (okgit.eval.parent.profiling) reads hardware counters in a fresh worker,
apart from timing; it costs seconds per candidate, so the search spends it where it pays: on the
reference, once, and after each batch on every correct timed candidate within PROFILE_WITHIN of
the best so far (the best among them). The profile it returns replaces the candidate's in the
search's context (the critic, the autotune phase and the report read it there) and is written
as a `profiled` event; the verdict, already written, is never touched.

The pass keeps to a share of the search's time: once it has taken more than PROFILE_SHARE of the
wall time since the search began, it waits until the search has run long enough again (the
reference, the first best and the best as the search ends are always profiled, and passes that
took under PROFILE_FREE_S in all are never paused). A resumed run keeps its earlier calls' account: their passes count towards
the two that always run, their seconds towards the share, their wall towards the search's time
(each call had taken its two passes afresh: on the H200 a sweep's resumed L2/91 was profiled 5
times in 3 calls, 144 s of its 718). A tool that is missing or not permitted is said once, in a note.
"""

from __future__ import annotations

import time
from typing import Any

from okgit.journal.events import Event, Profiled
from okgit.search.types import Attempt, Context

PROFILE_WITHIN = 0.03  # a correct candidate this close to the best speedup is profiled too
PROFILE_SHARE = 0.10  # of the search's wall time, at most, once the first two passes are done
ALWAYS = 2  # passes that run whatever they cost: the reference's and the first best's
# passes that have cost less than this in all are never paused: over a search of milliseconds (an
# evaluator in memory) the share is the noise of the clock, and a whole pass costs seconds
PROFILE_FREE_S = 1.0


class ProfilePass:
    def __init__(self, evaluator: Any, ctx: Context, tools: str = "auto") -> None:
        self.evaluator = evaluator
        self.ctx = ctx
        self.tools = tools
        earlier = [e for e in ctx.earlier if isinstance(e, Profiled)]  # a resumed run's
        self.started = time.monotonic() - _wall_s(ctx.earlier)
        self.spent_s = sum(e.seconds for e in earlier)
        self.passes = len(earlier)
        self.done: set[str | None] = {e.cand for e in earlier}
        self.noted: set[str] = set()
        self.off = tools == "off" or getattr(evaluator, "profile", None) is None

    def reference(self) -> None:
        """The baseline's pass, once per run, where the reference is timed."""
        ctx = self.ctx
        if self.off or not ctx.reference.timed or None in self.done:
            return
        prof = self._profile(ctx.problem.source, ctx.backend, ctx.reference.profile, ctx.reference.runtime_us,
                             baseline=True)
        if prof is not None:
            ctx.reference = ctx.reference.model_copy(update={"profile": prof})
            self._log(None, prof)

    def after(self, attempts: list[Attempt]) -> None:
        """After a batch: its candidates within PROFILE_WITHIN of the best, the best first."""
        best = self.ctx.best
        if self.off or best is None or not best.result.timed or not best.result.speedup:
            return
        close = [a for a in attempts if a.cand not in self.done and a.result.correct and a.result.timed
                 and (a.result.speedup or 0.0) >= (1 - PROFILE_WITHIN) * best.result.speedup]
        for attempt in sorted(close, key=lambda a: -(a.result.speedup or 0.0)):
            if not self._affordable():
                return
            prof = self._profile(attempt.proposal.source, attempt.proposal.backend, attempt.result.profile,
                                 attempt.result.runtime_us)
            if prof is None:
                return
            attempt.result.profile = prof
            self._log(attempt.cand, prof)

    def winner(self) -> None:
        """The search's best as it ends, where no pass read it yet: whatever the share, since the
        report, `okgit show` and `watch` set the winner's counters beside the reference's (on an
        H100's sweep, 2026-12-05, the pause had left 6 of 7 winners without them)."""
        best = self.ctx.best
        if self.off or best is None or best.cand in self.done or not best.result.correct or not best.result.timed:
            return
        prof = self._profile(best.proposal.source, best.proposal.backend, best.result.profile, best.result.runtime_us,
                             last=True)
        if prof is not None:
            best.result.profile = prof
            self._log(best.cand, prof)

    def _affordable(self) -> bool:
        elapsed = time.monotonic() - self.started
        if self.passes < ALWAYS or self.spent_s <= max(PROFILE_SHARE * elapsed, PROFILE_FREE_S):
            return True
        self._note("paused", f"profiling pass: paused, it has taken {self.spent_s:.0f} s of the search's "
                             f"{elapsed:.0f} s (at most {PROFILE_SHARE:.0%}); it goes on as the search does")
        return False

    def _profile(self, source: str, backend: str, base: Any, runtime_us: float | None, baseline: bool = False,
                 last: bool = False) -> Any:
        t0 = time.monotonic()
        prof = self.evaluator.profile(self.ctx.problem, source, backend=backend, base=base, runtime_us=runtime_us,
                                      tools=self.tools, baseline=baseline, last=last)
        self.spent_s += time.monotonic() - t0
        self.passes += 1
        if prof is None:  # an evaluator without a pass (in memory, Modal)
            self.off = True
        return prof

    def _log(self, cand: str | None, prof: Any) -> None:
        self.done.add(cand)
        for tool, why in prof.not_run.items():
            self._note(f"{tool}: {why}", f"profiling pass: {tool} did not run: {why}")
        self.ctx.log("profiled", cand=cand, profile=prof, seconds=round(prof.profile_s or 0.0, 3), tools=prof.tools)

    def _note(self, key: str, message: str) -> None:
        if key not in self.noted:
            self.noted.add(key)
            self.ctx.log("note", message=message)


def _wall_s(events: list[Event]) -> float:
    """The wall time a resumed run's earlier calls took: from each call's first event (the run's
    start or a resumption) to its last."""
    total, start, last = 0.0, None, None
    for e in events:
        if e.type in ("run_started", "resumed") and start is not None and last is not None:
            total += last - start
            start = None
        if start is None:
            start = e.ts
        last = e.ts
    return total + (last - start if start is not None and last is not None else 0.0)
