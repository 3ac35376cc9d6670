"""The gates of the modes case (docs/design.md, "Module modes and state"): one case, where the
reference depends on its mode, whose one output list is a training-mode call, the module's
buffers afterwards and an eval-mode call (okgit.eval.worker.calls.mode_sequence)."""

from __future__ import annotations

from okgit.eval.parent.gates.base import Evidence, Gate, gate
from okgit.eval.protocol.keys import MODES_EVAL, MODES_STATE


class _ModesGate(Gate):
    def applies(self, ev: Evidence) -> bool:
        return ev.ran("modes")


@gate(170)
class TrainMode(_ModesGate):
    name = "train_mode"
    rule = ("Where the reference depends on its mode (batch norm, dropout, self.training): correct in "
            "training mode, reading self.training at run time rather than a mode fixed in the kernel.")
    judges = ("modes",)  # the case's own part: its training-mode call


@gate(180)
class State(_ModesGate):
    name = "state"
    rule = ("Leave the module's buffers and parameters as the reference leaves them after the same calls "
            "(running statistics and num_batches_tracked updated in training mode only).")
    judges = (MODES_STATE,)


@gate(190)
class EvalMode(_ModesGate):
    name = "eval_mode"
    rule = "Correct after model.eval() too: eval mode uses the running statistics, and dropout is off."
    judges = (MODES_EVAL,)
