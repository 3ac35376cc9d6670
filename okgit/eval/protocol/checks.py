"""What the judge answers about outputs: the tolerance fixed per output leaf when the reference
is prepared, and the finding of one leaf's check. Plain dataclasses: they cross to the parent as
JSON (okgit.eval.judge.tolerance computes them; okgit.eval.parent reads them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LeafTolerance:
    rtol: float
    atol: float
    ref_error: float  # the reference implementation's own max |native - float64|
    scale: float = 0.0  # max |reference|: the magnitude atol is scaled to

    @property
    def relative(self) -> float:
        """The error allowed, relative to the output's magnitude."""
        return max(self.rtol, self.atol / self.scale) if self.scale > 0 else self.rtol

    @property
    def describe(self) -> str:
        own = f"; the reference's own error {self.ref_error:.2e}" if self.ref_error > 0 else ""
        return f"rtol {self.rtol:.1e}, atol {self.atol:.2e}{own}"


@dataclass
class LeafCheck:
    ok: bool
    gate: str = ""
    message: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0
