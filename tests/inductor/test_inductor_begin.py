"""The Inductor seed's compile begins with the search (`InductorProposer.begin`, called by the
driver for every proposer before the first proposal), not at the proposer's turn; once per problem.
The seed's process is a stand-in here (tests/inductor/test_inductor_seed.py runs the real one)."""

from __future__ import annotations

from pathlib import Path

from okgit.eval.types import Reference
from okgit.problem import load_problem
from okgit.search.proposers import inductor
from okgit.search.types import Context

OP = Path(__file__).resolve().parents[1] / "ops" / "relu.py"


def test_begin_starts_the_compile_once_and_the_proposals_come_from_it(monkeypatch):
    started: list[list[str]] = []
    closed: list[int] = []

    class Child:
        def __init__(self, reference, root, device, modes, knobs, sizes):
            started.append(list(modes))
            self.modes = list(modes)

        def next(self):
            if not self.modes:
                return None, [], ""
            return self.modes.pop(0), [], "made no Triton kernel"

        def close(self):
            closed.append(1)

    monkeypatch.setattr(inductor, "SeedProcess", Child)
    ctx = Context(problem=load_problem(OP), reference=Reference(device="cuda", timed=True), backend="triton",
                  device="cuda", log=lambda _t, **f: None)
    proposer = inductor.InductorProposer()
    proposer.begin(ctx)
    assert started == [["default", "max-autotune-no-cudagraphs"]]  # before any proposal was asked for
    proposer.begin(ctx)
    assert proposer.propose(ctx) is None and len(started) == 1  # the same compile, not a second
    assert closed == [1]  # its modes done: the process is let go
