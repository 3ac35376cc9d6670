"""The search's screen of launch-setting variants (okgit.search.driver, SCREEN_MARGIN): a variant
timed slower than the best past the margin is dropped unchecked, with a note that gives both
times; one that may be faster, and every proposal that is not a variant, is evaluated in full.
The in-memory evaluator decides; the real screen's timing runs on a GPU only
(tests/eval/test_eval_gpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from okgit.eval.base import InMemoryEvaluator
from okgit.eval.types import EvalResult, Status
from okgit.problem import Problem, load_problem
from okgit.search.driver import SCREEN_MARGIN, Budget, Search
from okgit.search.types import Context, Proposal

PROBLEM = Problem(path="op.py", source="import torch\n")
OPS = Path(__file__).parents[1] / "ops"
REF_US = 200.0
# each source's time: evaluated ones at this, screened ones at this too (one timer)
TIMES = {"base": 100.0, "slow": 110.0, "close": 100.0 * (1 + SCREEN_MARGIN / 2), "fast": 90.0, "plain slow": 150.0}


def verdict(source: str) -> EvalResult:
    us = TIMES[source]
    return EvalResult(status=Status.correct, correct=True, timed=True, runtime_us=us, ref_runtime_us=REF_US,
                      speedup=REF_US / us, device="cuda:0", mode="fast")


class Variants:
    """Proposes `base` (not a variant), then the given sources as variants of it (screen=True),
    except those named "plain ..." (screen=False)."""

    name = "variants"

    def __init__(self, sources: list[str]) -> None:
        self.queue = ["base", *sources]

    def propose(self, ctx: Context) -> Proposal | None:
        if not self.queue:
            return None
        source = self.queue.pop(0)
        variant = source != "base" and not source.startswith("plain")
        return Proposal(source=source, origin="autotune:c001" if variant else "test", intent=f"Try {source}.",
                        screen=variant)


def run(sources: list[str], screener=lambda s: TIMES[s], budget: Budget | None = None):
    events: list[dict] = []
    evaluator = InMemoryEvaluator(verdict, device="cuda:0", ref_runtime_us=REF_US, screener=screener)
    ctx = Context(problem=PROBLEM, reference=evaluator.reference(PROBLEM), backend="triton", device="cuda:0",
                  log=lambda type, **fields: events.append({"type": type, **fields}))
    search = Search(ctx, evaluator, budget or Budget(iterations=10), accept=lambda a: f"tag-{a.cand}")
    search.run([Variants(sources)])
    return search, evaluator, events


def test_a_variant_slower_than_the_best_is_dropped_unchecked_and_the_others_are_evaluated():
    search, evaluator, events = run(["slow", "close", "fast"])
    assert evaluator.screened == ["slow", "close", "fast"]  # every variant timed first; `base` was not
    assert evaluator.calls == ["base", "close", "fast"]  # the slow one never evaluated
    assert [a.proposal.source for a in search.ctx.attempts] == ["base", "close", "fast"]
    assert [a.cand for a in search.ctx.attempts] == ["c001", "c002", "c003"]  # a dropped variant gets no id
    assert search.ctx.best.proposal.source == "fast"
    (note,) = [e["message"] for e in events if e["type"] == "note" and "dropped unchecked" in e["message"]]
    assert "Try slow." in note and "110.0 us" in note and "1.10x the best (c001, 100.0 us)" in note, note
    assert search.evaluated == 4  # it counts as an iteration


def test_dropped_variants_count_against_the_iterations_and_the_patience():
    _, evaluator, _ = run(["slow"] * 1 + [f"slow {i}" for i in range(5)],
                          screener=lambda s: 110.0, budget=Budget(iterations=4, patience=10))
    assert evaluator.calls == ["base"] and len(evaluator.screened) == 3  # 1 evaluated + 3 dropped = 4
    search, evaluator, events = run([f"slow {i}" for i in range(6)], screener=lambda s: 110.0,
                                    budget=Budget(iterations=20, patience=2))
    assert len(evaluator.screened) == 2 and "no improvement in 2" in search.stop_reason


def test_nothing_is_screened_without_a_timed_best_a_timing_or_a_variant():
    _, evaluator, _ = run(["plain slow"])
    assert evaluator.screened == [] and evaluator.calls == ["base", "plain slow"]  # not a variant
    _, evaluator, _ = run(["slow"], screener=lambda s: None)  # nothing timed (a CPU), or the timing failed
    assert evaluator.calls == ["base", "slow"]


@pytest.mark.slow  # the real evaluator
def test_a_cpu_screens_nothing(evaluator):
    """Nothing is timed on a CPU: the real evaluator's screen answers None, so every variant is
    evaluated (and the autotune phase proposes none there anyway)."""
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    assert evaluator.screen(problem, (OPS / "relu_triton.py").read_text()) is None


def test_a_resumed_runs_earlier_best_screens_nothing():
    """A resumed run's best was timed in an earlier session, maybe on another card: nothing is
    screened against it until this search has timed a best of its own."""
    from okgit.search.types import Attempt

    events: list[dict] = []
    evaluator = InMemoryEvaluator(verdict, device="cuda:0", ref_runtime_us=REF_US, screener=lambda s: TIMES[s])
    ctx = Context(problem=PROBLEM, reference=evaluator.reference(PROBLEM), backend="triton", device="cuda:0",
                  log=lambda type, **fields: events.append({"type": type, **fields}))
    earlier = Attempt(cand="c001", proposal=Proposal(source="base", origin="test"), result=verdict("base"))
    ctx.attempts.append(earlier)
    ctx.best = earlier
    search = Search(ctx, evaluator, Budget(iterations=10), accept=lambda a: f"tag-{a.cand}")
    proposer = Variants(["slow"])
    proposer.queue.remove("base")  # evaluated before the resume
    search.run([proposer])
    assert evaluator.screened == [] and evaluator.calls == ["slow"]
