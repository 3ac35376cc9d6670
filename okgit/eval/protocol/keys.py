"""Call keys: how a candidate's worker names each call it records (its facts in result.json, its
outputs sent to the judge), and how the parent reads a name back: by its form only, never
trusting more of it.

    s0              a case's own call (the key is the case's id)
    s0#repeat       a seed case called again on the same inputs
    fresh#1         the first call on the buffers the fresh-inputs check refills (facts only)
    fresh           the call on the refilled buffers (checked against the second seed case)
    timed:s0~SALT   a timed sample's outputs, on the case's inputs salted with SALT

Each kind of call, and each part of the modes case's outputs, is checked under one gate; the
parent names those gates in the job (`Job.gates`, keyed by `part`), from its registered gates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class CallKind(str, Enum):
    case = "case"
    repeat = "repeat"
    fresh_first = "fresh_first"
    fresh = "fresh"
    timed = "timed"


# the parts of the modes case's one output list (okgit.eval.worker.calls.mode_sequence): its
# training-mode call is the case's own part, "modes"; then the buffers, then the eval-mode call
MODES_STATE = "modes.state"
MODES_EVAL = "modes.eval"

_CASE = r"[A-Za-z0-9_]+"
_FORMS = [
    (CallKind.fresh_first, re.compile(r"fresh#1")),
    (CallKind.fresh, re.compile(r"fresh")),
    (CallKind.repeat, re.compile(rf"(?P<case>{_CASE})#repeat")),
    (CallKind.timed, re.compile(rf"timed:(?P<case>{_CASE})~(?P<salt>\d+)")),
    (CallKind.case, re.compile(rf"(?P<case>{_CASE})")),
]


@dataclass(frozen=True)
class CallKey:
    kind: CallKind
    case: str = ""  # the case whose inputs the call ran on ("" for the fresh calls: the parent knows which)
    salt: int = 0  # a timed call's: the judge redraws the case's inputs salted with it

    @classmethod
    def of(cls, case: str) -> CallKey:
        return cls(CallKind.case, case)

    @classmethod
    def repeat(cls, case: str) -> CallKey:
        return cls(CallKind.repeat, case)

    @classmethod
    def timed(cls, case: str, salt: int) -> CallKey:
        return cls(CallKind.timed, case, salt)

    def format(self) -> str:
        if self.kind is CallKind.case:
            return self.case
        if self.kind is CallKind.repeat:
            return f"{self.case}#repeat"
        if self.kind is CallKind.timed:
            return f"timed:{self.case}~{self.salt}"
        return "fresh#1" if self.kind is CallKind.fresh_first else "fresh"

    def __str__(self) -> str:
        return self.format()

    @classmethod
    def parse(cls, text: str) -> CallKey | None:
        """The key a name stands for, or None where it has none of the forms."""
        for kind, form in _FORMS:
            match = form.fullmatch(text)
            if match:
                found = match.groupdict()
                return cls(kind, found.get("case") or "", int(found.get("salt") or 0))
        return None

    def part(self, case_kind: str) -> str:
        """Which part of the protocol the call is, for the gate it is checked under (`Job.gates`):
        a case's own call is its case's kind; the others are their kind."""
        return case_kind if self.kind is CallKind.case else self.kind.value

    def fingerprinted(self, case_kind: str) -> bool:
        """Whether the judge digests the call's outputs: a seed case's own call and its repeat, the
        pairs the determinism gate compares. A digest is two passes over every output, so none is
        made where nothing reads it (at L1/39's size: 2^31 elements, at 6 of a fast evaluation's 16 checks)."""
        return case_kind == "seed" and self.kind in (CallKind.case, CallKind.repeat)


FRESH_FIRST = CallKey(CallKind.fresh_first)
FRESH = CallKey(CallKind.fresh)


def fresh_case(seed_ids: list[str]) -> str | None:
    """The case the fresh call is checked against: the second seed case, whose inputs refill the
    first's buffers (None with fewer than two seed cases: there is no fresh call then)."""
    return seed_ids[1] if len(seed_ids) >= 2 else None
