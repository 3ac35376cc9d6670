"""A run hands each proposer the op before its reference is prepared (`ahead`): the templates'
planning runs beside the reference's preparation, not between it and the first candidate."""

from __future__ import annotations

import threading

from conftest import OP

from okgit.eval.base import InMemoryEvaluator
from okgit.eval.types import EvalResult, Status
from okgit.run import optimize
from okgit.search.proposers.templates import TemplatesProposer


def test_the_templates_are_planned_while_the_reference_is_prepared(git_repo):
    planning_started = threading.Event()
    seen: dict[str, object] = {}

    class Planner(TemplatesProposer):
        def ahead(self, problem, device):
            seen["ahead"] = (problem.path, device)
            super().ahead(problem, device)
            planning_started.set()

    class Evaluator(InMemoryEvaluator):
        def reference(self, problem):
            seen["planning before the reference"] = planning_started.is_set()
            return super().reference(problem)

    planner = Planner()
    result = optimize(git_repo / OP, flags={"device": "cpu", "iterations": 2}, cwd=git_repo,
                      evaluator=Evaluator(lambda source: EvalResult(status=Status.correct, correct=True, wall_s=0.1)),
                      proposers=[planner])
    assert seen["planning before the reference"] is True
    assert seen["ahead"] == (OP, "cpu")
    assert result.candidates >= 1  # the search went on with what was planned ahead
    assert planner._planning is None and planner._queue is not None  # the search took what was planned ahead
