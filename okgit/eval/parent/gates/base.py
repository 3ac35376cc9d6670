"""The gate contract: one rule a candidate must pass, as one object (docs/internals.md, "Adding a gate").

A gate has a name, the rule the generator prompt states, whether its failure is a cheat caught
(`rejected`) or a wrong answer (`incorrect`), the calls whose outputs it judges (`judges`: the
parts of the protocol, okgit.eval.protocol.keys), when it applies, and its own check over the
worker's facts and the judge's answers (`Evidence`). Gates are a registry (`GATES`, entry-point
group `okgit.gates`): a gate's module registers its class with `@gate(order)`, built-ins and
extensions alike. The order is the verdict's: the first gate that failed sets the status and the
error, and results list the gates in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from okgit.eval.protocol.jobs import Case
from okgit.eval.protocol.keys import CallKey, CallKind
from okgit.eval.types import Status
from okgit.registry import Registry

if TYPE_CHECKING:
    from okgit.eval.parent.reference import PreparedReference


class Gate:
    name: ClassVar[str]
    rule: ClassVar[str]  # as the generator prompt states it (`rules_text`); {modules} and {calls}: the static gate's
    rejects: ClassVar[bool] = False  # a failure is a cheat caught (`rejected`), else a wrong answer (`incorrect`)
    # the calls whose outputs it judges, by part of the protocol: a case's kind (its own call),
    # "repeat", "fresh", "timed", or a part of the modes case's outputs (okgit.eval.protocol.keys)
    judges: ClassVar[tuple[str, ...]] = ()
    # decided before the candidate's calls (on its source, or while its worker loads it): a
    # failure there ends the evaluation, and a verdict reached lists it passed
    before_calls: ClassVar[bool] = False
    shown_passed: ClassVar[bool] = True  # False: results name it only when it fails

    def applies(self, ev: Evidence) -> bool:
        """Whether the evaluation ran what the gate judges (results list only the gates that apply)."""
        return True

    def check(self, ev: Evidence, found: Findings) -> None:
        """Its findings beyond the comparison of the calls it judges (which okgit.eval.parent.verdict makes)."""

    def rule_text(self) -> str:
        return self.rule


GATES: Registry[Callable[[], Gate]] = Registry("gate", "okgit.gates")


def gate(order: int) -> Callable[[type[Gate]], type[Gate]]:
    """Register a Gate class under its `name`, at `order` among the others (the built-ins are 10 apart)."""

    def add(cls: type[Gate]) -> type[Gate]:
        GATES.register(cls.name, order=order)(cls)
        return cls

    return add


@dataclass
class Evidence:
    """What the gates read: the prepared reference, the cases the worker ran, its facts
    (result.json) and the judge's answer for each call it checked (by call key)."""

    prep: PreparedReference
    cases: list[Case]
    result: dict[str, Any]
    checks: dict[str, Any]
    backend: str

    @property
    def calls(self) -> dict[str, Any]:
        return self.result.get("calls", {})

    @property
    def seeds(self) -> list[Case]:
        return [c for c in self.cases if c.kind == "seed"]

    @property
    def timing(self) -> dict[str, Any] | None:
        return self.result.get("timing")

    def ran(self, kind: str) -> bool:
        """Whether a case of this kind ran."""
        return any(c.kind == kind for c in self.cases)

    def timed_keys(self) -> list[CallKey]:
        """The timed calls' keys, in the order the worker recorded them."""
        keys = [CallKey.parse(k) for k in self.calls]
        return [k for k in keys if k is not None and k.kind is CallKind.timed]


@dataclass
class Findings:
    """The first failure per gate, and the worst errors seen on passing leaves. `statuses` says
    how each gate fails (`Gate.rejects`)."""

    rejecting: set[str]
    failures: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, Status] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    max_abs: float = 0.0
    max_rel: float = 0.0

    def fail(self, gate: str, message: str, status: Status | None = None) -> None:
        if gate not in self.failures:
            self.failures[gate] = message
            self.statuses[gate] = status or (Status.rejected if gate in self.rejecting else Status.incorrect)

    def note(self, gate: str, text: str) -> None:
        """What a passing gate's result says (why it was skipped)."""
        self.notes[gate] = text
