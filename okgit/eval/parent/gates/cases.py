"""The gates of the correctness cases: each judges the calls of one kind of case (the judge
draws the cases: okgit.eval.judge.process), or the calls made again on their inputs."""

from __future__ import annotations

from okgit.eval.parent.gates.base import Evidence, Findings, Gate, gate
from okgit.eval.protocol.jobs import INIT_FLOAT_FACTOR
from okgit.eval.protocol.keys import CallKey, CallKind


@gate(90)
class Seeds(Gate):
    name = "seeds"
    rule = ("Correct within the tolerance on inputs drawn under several random seeds. A float32 "
            "matmul or convolution must be as accurate as the fp32 reference (within 4x its own error "
            "against float64): single-pass TF32 or bf16 products fail, tl.dot(..., input_precision=\"tf32x3\") "
            "does not.")
    judges = ("seed",)


@gate(100)
class Repeat(Gate):
    name = "repeat"
    rule = "A second call on the same inputs must be correct too (no state carried between calls)."
    judges = (CallKind.repeat.value,)


@gate(110)
class Determinism(Gate):
    name = "determinism"
    rule = ("Bitwise deterministic: two calls on identical inputs give identical bits (no atomics whose order "
            "changes the result).")

    def check(self, ev: Evidence, found: Findings) -> None:
        if not ev.prep.deterministic:
            found.note(self.name, "skipped: the reference itself is not deterministic")
            return
        for case in ev.seeds:  # the judge's fingerprints of a seed case's call and its repeat
            first = ev.checks.get(case.id, {}).get("fingerprints")
            again = ev.checks.get(CallKey.repeat(case.id).format(), {}).get("fingerprints")
            if first is not None and again is not None and first != again:
                found.fail(self.name, f"{case.id}: two calls on identical inputs gave different outputs")


@gate(120)
class FreshInputs(Gate):
    name = "fresh_inputs"
    rule = "Correct when the same input buffers are refilled with new values: cache nothing keyed on an input's address."
    judges = (CallKind.fresh.value,)


@gate(140)
class Distribution(Gate):
    name = "distribution"
    rule = "Correct on a second input distribution (x -> 3x - 1): no assumption about the sign or range of values."
    judges = ("distribution",)


@gate(150)
class ExtraShapes(Gate):
    name = "extra_shapes"
    rule = ("Correct at the extra sizes checked (see the shapes below): no size hard-coded from the defaults; "
            "masks handle any size.")
    judges = ("extra_shape",)


@gate(160)
class InitInputs(Gate):
    name = "init_inputs"
    rule = f"Correct when every float constructor argument is scaled by {INIT_FLOAT_FACTOR:g}: no constants baked in from them."
    judges = ("init_inputs",)

    def check(self, ev: Evidence, found: Findings) -> None:
        if not ev.ran("init_inputs"):  # the judge dropped the case: say why
            why = next((d.split(": ", 1)[1] for d in ev.prep.dropped if d.startswith(("init_inputs: ", "i0: "))), "")
            found.note(self.name, "skipped" + (f": {why}" if why else ""))
