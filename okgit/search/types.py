"""What flows between the search driver and its proposers."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from okgit.eval.types import EvalResult, Reference
from okgit.journal.events import Event
from okgit.problem import Problem


@dataclass
class Proposal:
    """A complete candidate op file, and why it exists."""

    source: str
    origin: str  # e.g. "template:softmax", "autotune:c003", "llm:gpt-4o", "replay"
    intent: str = ""  # what this candidate tries, in a sentence
    parent: str | None = None  # the candidate id it was derived from
    backend: str = "triton"
    meta: dict[str, Any] = field(default_factory=dict)
    # judged by its speed first (an autotune variant, an Inductor seed, a template): timed before it is
    # checked, and checked only where it may be faster than the best (okgit.search.driver, SCREEN_MARGIN)
    screen: bool = False


def source_key(source: str) -> str:
    """A candidate file's identity, surrounding whitespace aside: the search evaluates each once."""
    return hashlib.sha256(source.strip().encode()).hexdigest()[:16]


@dataclass
class Attempt:
    """One evaluated proposal, as the driver records it."""

    cand: str  # "c001", ...
    proposal: Proposal
    result: EvalResult
    tag: str | None = None  # set when accepted (correct) and committed


@dataclass
class Context:
    """Everything a proposer may read. The driver owns it and appends each attempt."""

    problem: Problem
    reference: Reference
    backend: str
    device: str
    attempts: list[Attempt] = field(default_factory=list)
    best: Attempt | None = None  # the best accepted candidate so far (None: the reference)
    hardware: dict[str, Any] = field(default_factory=dict)
    # Journal events (e.g. log("llm_call", cost_usd=0.01, ...)) and full trace records. The
    # driver adds the `cost_usd` of each llm_call event to `spent_usd`, which the dollar budget
    # reads (a resumed run starts from what its earlier calls cost).
    log: Callable[..., Any] = lambda type, **fields: None
    trace: Callable[..., Any] = lambda type, **fields: None
    spent_usd: float = 0.0
    deadline: float | None = None  # time.monotonic() at which the time budget ends; the driver sets it
    earlier: list[Event] = field(default_factory=list)  # a resumed run's journal events so far

    @property
    def best_source(self) -> str:
        return self.best.proposal.source if self.best else self.problem.source


class Proposer(Protocol):
    """Proposes candidates one at a time; returns None when it has nothing more to try.

    A proposer whose next candidates do not depend on how the previous ones fared may also
    define `propose_batch(ctx, limit) -> list[Proposal]`: up to `limit` at once ([] when it has
    nothing more), which the driver evaluates at once where the evaluator runs several. Three
    optional hooks: `ahead(problem, device)`, called by a run before its reference is prepared,
    for work that needs only the op (the templates' planning); `begin(ctx)`, called for every
    proposer before the search starts, for work that needs nothing of the search and takes long
    (the Inductor seed's compile, at the reference's timed shape); and `finish(ctx)` once it is
    over.
    """

    name: str

    def propose(self, ctx: Context) -> Proposal | None: ...


def propose_several(proposer: Proposer, ctx: Context, limit: int) -> list[Proposal]:
    """`propose_batch` of a proposer whose `propose` may be called again before the driver
    evaluates what it returned: its next `limit` proposals, fewer when it runs out."""
    batch: list[Proposal] = []
    while len(batch) < limit:
        proposal = proposer.propose(ctx)
        if proposal is None:
            break
        batch.append(proposal)
    return batch
