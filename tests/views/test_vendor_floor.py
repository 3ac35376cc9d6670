"""report.md says where the vendor is the floor: okgit's own kernel for a vendor call (the
implicit-GEMM convolution, the split-precision GEMM) was timed and is not what the run hands out."""

from __future__ import annotations

from pathlib import Path

from okgit.eval.types import EvalResult, Reference, Status
from okgit.problem import load_problem
from okgit.search.types import Attempt, Context, Proposal
from okgit.status import RunStatus
from okgit.views.report import vendor_floor

OP = Path(__file__).parents[1] / "ops" / "conv_sub_mish.py"


def attempt(cand: str, origin: str, speedup: float | None, correct: bool = True) -> Attempt:
    result = EvalResult(status=Status.correct if correct else Status.incorrect, correct=correct, speedup=speedup,
                        timed=speedup is not None)
    return Attempt(cand, Proposal(source="", origin=origin), result)


def context(*attempts: Attempt) -> Context:
    return Context(problem=load_problem(OP), reference=Reference(device="cuda", timed=True), backend="triton",
                   device="cuda", attempts=list(attempts))


def test_a_lone_convolution_slower_than_cudnn_names_the_vendor_as_the_floor():
    own = attempt("c001", "template:conv", 0.81)
    ctx = context(own, attempt("c002", "template:conv_tf32", 0.93), attempt("c003", "inductor", None, correct=False))
    lines = vendor_floor(ctx, own, RunStatus.slower)
    assert lines == ["", "The vendor is the floor for cuDNN's convolution here: okgit's own kernel for it "
                         "(template:conv_tf32) reached 0.93x of the reference at best, so nothing of it is handed out."]


def test_a_winner_that_keeps_the_vendors_call_says_so_and_one_that_replaces_it_says_nothing():
    vendor = attempt("c001", "template:vendor_conv+pointwise", 1.4)
    own = attempt("c002", "template:conv", 1.2)
    lines = vendor_floor(context(vendor, own), vendor, RunStatus.optimized)
    assert len(lines) == 2 and lines[1].endswith("(template:conv) reached 1.20x of the reference at best, so the "
                                                 "winner keeps the vendor's call.")
    assert vendor_floor(context(vendor, attempt("c002", "template:conv", 1.6)),
                        attempt("c002", "template:conv", 1.6), RunStatus.optimized) == []
    assert vendor_floor(context(attempt("c001", "template:conv", None)), None, RunStatus.unverified) == []  # a CPU
