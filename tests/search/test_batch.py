"""Batches of proposals through the driver: evaluated at once where the evaluator runs several,
recorded in proposal order whatever order their results arrive in, within the budgets.
No worker processes here (tests/eval/test_pool.py and tests/eval/test_modal.py run real ones)."""

from __future__ import annotations

import threading

from okgit.eval.base import InMemoryEvaluator
from okgit.eval.parent.device_pool import DevicePool
from okgit.eval.types import EvalResult, Status
from okgit.problem import Problem
from okgit.search.driver import Budget, Search
from okgit.search.types import Context, Proposal, propose_several

PROBLEM = Problem(path="op.py", source="import torch\n")


def result(source: str) -> EvalResult:
    correct = "wrong" not in source
    return EvalResult(status=Status.correct if correct else Status.incorrect, correct=correct, device="cpu", mode="fast")


class Batches:
    """Proposes `sources` in order; `propose_batch` hands over as many as asked at once."""

    name = "batches"

    def __init__(self, sources: list[str], backends: dict[str, str] | None = None) -> None:
        self.queue = list(sources)
        self.backends = backends or {}
        self.asked: list[int] = []  # the limit of each propose_batch call

    def propose(self, ctx: Context) -> Proposal | None:
        if not self.queue:
            return None
        source = self.queue.pop(0)
        return Proposal(source=source, origin="test", backend=self.backends.get(source, "triton"))

    def propose_batch(self, ctx: Context, limit: int) -> list[Proposal]:
        self.asked.append(limit)
        return propose_several(self, ctx, limit)


def search(evaluator, budget: Budget | None = None) -> tuple[Search, list[dict]]:
    events: list[dict] = []
    ctx = Context(problem=PROBLEM, reference=InMemoryEvaluator(result).reference(PROBLEM), backend="triton",
                  device="cpu", log=lambda type, **fields: events.append({"type": type, **fields}))
    return Search(ctx, evaluator, budget or Budget(iterations=10), accept=lambda a: f"tag-{a.cand}"), events


def candidate_events(events: list[dict]) -> list[tuple[str, str]]:
    return [(e["type"], e["cand"]) for e in events if "cand" in e]


class OutOfOrder:
    """One slot's evaluator: "a" finishes only once "b" has, so results arrive b before a."""

    b_done = threading.Event()
    finished: list[str] = []
    closed: list[str] = []

    def __init__(self, device: str) -> None:
        self.device = device

    def evaluate(self, problem, source, *, mode="fast", backend="triton") -> EvalResult:
        if source == "a":
            assert OutOfOrder.b_done.wait(30), "a and b were not evaluated at once"
        OutOfOrder.finished.append(source)
        if source == "b":
            OutOfOrder.b_done.set()
        return result(source)

    def close(self) -> None:
        OutOfOrder.closed.append(self.device)


def test_a_batch_is_evaluated_at_once_and_journaled_in_proposal_order():
    OutOfOrder.b_done.clear()
    OutOfOrder.finished, OutOfOrder.closed = [], []
    with DevicePool(["cpu:0", "cpu:1"]).evaluator(OutOfOrder) as evaluator:
        assert evaluator.width == 2
        s, events = search(evaluator)
        proposer = Batches(["a", "b", "wrong c"])
        s.run([proposer])
    assert OutOfOrder.finished[:2] == ["b", "a"]  # b's result came first: they ran at the same time
    assert proposer.asked[0] == 2  # the evaluator's width
    assert candidate_events(events) == [
        ("proposal", "c001"), ("evaluated", "c001"), ("best", "c001"),
        ("proposal", "c002"), ("evaluated", "c002"),
        ("proposal", "c003"), ("evaluated", "c003"),
    ]
    assert [a.proposal.source for a in s.ctx.attempts] == ["a", "b", "wrong c"]
    assert [a.tag for a in s.ctx.attempts] == ["tag-c001", "tag-c002", None]  # every candidate judged, accepted alone
    assert {a.result.device for a in s.ctx.attempts[:2]} == {"cpu:0", "cpu:1"}  # each names its slot
    assert sorted(OutOfOrder.closed) == ["cpu:0", "cpu:1"]  # `with` closed both slots' evaluators


def test_batches_stay_within_the_iteration_and_patience_budgets():
    sources = ["a"] + [f"no better {i}" for i in range(9)]  # correct, untimed: never a new best
    one_at_a_time, _ = search(InMemoryEvaluator(result), Budget(iterations=6, patience=3))
    one_at_a_time.run([Batches(sources)])
    s, _ = search(InMemoryEvaluator(result, width=4), Budget(iterations=6, patience=3))
    proposer = Batches(sources)
    assert "no improvement in 3" in s.run([proposer])
    # 3 at once (what patience leaves), then one: a new best could have reset it
    assert proposer.asked == [3]
    assert [a.proposal.source for a in s.ctx.attempts] == [a.proposal.source for a in one_at_a_time.ctx.attempts]
    assert len(s.ctx.attempts) == 4
    s, _ = search(InMemoryEvaluator(result, width=4), Budget(iterations=3))
    proposer = Batches([f"v{i}" for i in range(9)])
    s.run([proposer])
    assert proposer.asked == [3] and len(s.ctx.attempts) == 3  # never more than the iterations left


def test_a_one_at_a_time_evaluator_gets_one_proposal_at_a_time():
    evaluator = InMemoryEvaluator(result)
    s, events = search(evaluator)
    proposer = Batches(["a", "b"])
    s.run([proposer])
    assert proposer.asked == [] and evaluator.calls == ["a", "b"]
    assert candidate_events(events)[:2] == [("proposal", "c001"), ("evaluated", "c001")]


def test_a_batch_of_two_backends_is_evaluated_per_backend_and_kept_in_order():
    seen: list[tuple[tuple[str, ...], str]] = []

    class PerBackend(InMemoryEvaluator):
        def evaluate_many(self, problem, sources, *, mode="fast", backend="triton"):
            seen.append((tuple(sources), backend))
            return super().evaluate_many(problem, sources, mode=mode, backend=backend)

    s, _ = search(PerBackend(result, width=4))
    s.run([Batches(["t1", "c1", "t2", "c1", "wrong t3"], backends={"c1": "cuda"})])
    # the first batch of 4 holds c1 twice: evaluated once; wrong t3 comes in the next batch
    assert seen == [(("t1", "t2"), "triton"), (("c1",), "cuda"), (("wrong t3",), "triton")]
    assert [a.proposal.source for a in s.ctx.attempts] == ["t1", "c1", "t2", "wrong t3"]
    assert [a.cand for a in s.ctx.attempts] == ["c001", "c002", "c003", "c004"]


class Begins(Batches):
    """Says when it was asked to begin, and when to propose, in one shared order."""

    def __init__(self, name: str, sources: list[str], order: list[str]) -> None:
        super().__init__(sources)
        self.name, self.order = name, order

    def begin(self, ctx: Context) -> None:
        self.order.append(f"begin {self.name}")

    def propose(self, ctx: Context) -> Proposal | None:
        self.order.append(f"propose {self.name}")
        return super().propose(ctx)


def test_every_proposer_begins_before_the_first_proposal_of_any():
    """The Inductor seed's compile (a proposer late in the order) starts with the search, beside
    the first proposers' evaluations, not at its turn."""
    order: list[str] = []
    s, _ = search(InMemoryEvaluator(result))
    s.run([Begins("templates", ["a"], order), Batches(["b"]), Begins("inductor", ["c"], order)])
    assert order[:3] == ["begin templates", "begin inductor", "propose templates"]
    assert order.count("begin inductor") == 1 and "propose inductor" in order
    assert [a.proposal.source for a in s.ctx.attempts] == ["a", "b", "c"]
