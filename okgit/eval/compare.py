"""Tolerances and output comparison, parent side (the candidate never sees this code run).

Tolerances are fixed per dtype before any candidate: |out - ref64| <= atol + rtol * |ref64|
with atol = rtol_dtype * max|ref64| (scaled to the reference's magnitude), and never tighter
than REF_ERROR_MULTIPLE times the reference implementation's own error against float64 (a TF32
cuDNN convolution is far from 1e-4 of strict fp32). Positions where the native reference is
NaN or inf must hold the same non-finite value; a NaN where the reference is finite is an
element the candidate never wrote (memory is poisoned with NaN) or a NaN it produced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REF_ERROR_MULTIPLE = 4.0
RTOL = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1.6e-2, "float64": 1e-7, "complex64": 1e-4, "complex128": 1e-7}


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
        return f"rtol {self.rtol:.1e}, atol {self.atol:.2e}"


@dataclass
class LeafCheck:
    ok: bool
    gate: str = ""
    message: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0


def reference_error(native: Any, f64: Any) -> float:
    import torch

    if f64 is None or native is None or not native.is_floating_point():
        return 0.0
    a, b = native.double(), f64.double()
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not bool(finite.any()):
        return 0.0
    return float((a - b).abs()[finite].max())


def leaf_tolerance(native: Any, f64: Any, ref_error: float, rtol: float | None = None,
                   atol: float | None = None) -> LeafTolerance:
    """The tolerance of one output leaf; `rtol`/`atol` override the dtype rule (okgit.toml)."""
    import torch

    dtype = str(native.dtype).replace("torch.", "")
    if not (native.is_floating_point() or native.is_complex()):
        return LeafTolerance(0.0, 0.0, 0.0)
    ref = (f64 if f64 is not None else native).double()
    finite = ref[torch.isfinite(ref)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    r = RTOL.get(dtype, 1e-4) if rtol is None else rtol
    a = r * scale if atol is None else atol
    return LeafTolerance(rtol=r, atol=max(a, REF_ERROR_MULTIPLE * ref_error), ref_error=ref_error, scale=scale)


def check_leaf(out: Any, facts: dict[str, Any], native: Any, f64: Any, tol: LeafTolerance, gate: str) -> LeafCheck:
    """One output leaf of one call against the expected one. `gate` names a plain mismatch."""
    import torch

    if not facts.get("exact") or out is None:
        return LeafCheck(False, "output_type", f"returned {facts.get('type')}, not exactly torch.Tensor")
    if list(out.shape) != list(native.shape):
        return LeafCheck(False, "output_type", f"shape {list(out.shape)}, expected {list(native.shape)}")
    if out.dtype != native.dtype:
        return LeafCheck(False, "output_type", f"dtype {out.dtype}, expected {native.dtype}")
    if not (native.is_floating_point() or native.is_complex()):
        bad = out != native
        if bool(bad.any()):
            n = int(bad.sum())
            if out.dtype != torch.bool and bool((out[bad] == torch.iinfo(out.dtype).max).all()):
                return LeafCheck(False, "outputs_written", f"{n} of {out.numel()} elements never written (poison value)")
            return LeafCheck(False, gate, f"{n} of {out.numel()} integer elements differ")
        return LeafCheck(True)
    nat_bad = ~torch.isfinite(native)
    out_nan = torch.isnan(out)
    unwritten = out_nan & ~nat_bad
    if bool(unwritten.any()):
        n = int(unwritten.sum())
        first = _index(unwritten)
        return LeafCheck(False, "outputs_written",
                         f"{n} of {out.numel()} elements are NaN where the reference is finite, first at {first}: "
                         "never written (memory was poisoned with NaN) or a NaN the kernel produced")
    if bool(nat_bad.any()):
        same = (torch.isnan(native) & out_nan) | (native == out)
        wrong = nat_bad & ~same
        if bool(wrong.any()):
            return LeafCheck(False, "nan_pattern", f"{int(wrong.sum())} NaN/inf positions differ from the reference's")
    if bool((~torch.isfinite(out) & ~nat_bad).any()):
        n = int((~torch.isfinite(out) & ~nat_bad).sum())
        return LeafCheck(False, "nan_pattern", f"{n} elements are inf where the reference is finite")
    ref = (f64 if f64 is not None else native).double()
    o = out.double()
    finite = ~nat_bad & torch.isfinite(ref)
    if not bool(finite.any()):
        return LeafCheck(True)
    diff = (o - ref).abs()
    diff[~finite] = 0
    allowed = tol.atol + tol.rtol * ref.abs()
    over = (diff > allowed) & finite
    max_abs = float(diff.max())
    denom = ref.abs().clamp_min(tol.atol or 1e-30)
    max_rel = float((diff / denom)[finite].max())
    if bool(over.any()):
        at = _index(over)
        return LeafCheck(False, gate, f"{int(over.sum())} of {out.numel()} elements outside tolerance; max abs error "
                         f"{max_abs:.3e} (allowed {tol.describe}); first at {at}: got {float(o[at]):.6g}, "
                         f"expected {float(ref[at]):.6g}", max_abs, max_rel)
    return LeafCheck(True, max_abs=max_abs, max_rel=max_rel)


def bitwise_equal(a: Any, b: Any) -> bool:
    import torch

    if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def degenerate_reason(expected: dict[str, Any], case_ids: list[str]) -> str | None:
    """Why the reference's outputs cannot tell a right kernel from a wrong one, if they cannot."""
    leaves = [expected[c]["native"] for c in case_ids if c in expected]
    if not leaves or not any(leaves):
        return None
    floats = [t for case in leaves for t in case if t is not None and t.numel()]
    if floats and all(bool((t == 0).all()) for t in floats):
        return "the reference's output is identically zero on every seed and input distribution"
    # a scalar (a loss) is trivially "constant": only tensors of several elements say so; the
    # rule across seeds below still catches a scalar that never changes
    if any(t.numel() > 1 for t in floats) and all(
        t.numel() > 1 and bool((t == t.reshape(-1)[0]).all()) for t in floats
    ):
        return "every output of the reference is a constant tensor on every seed and input distribution"
    if len(leaves) >= 2 and all(
        len(case) == len(leaves[0]) and all(bitwise_equal(a, b) for a, b in zip(case, leaves[0])) for case in leaves[1:]
    ):
        return "the reference's output does not change with its inputs across seeds"
    return None


def _index(mask: Any) -> tuple[int, ...]:
    import torch

    flat = int(torch.nonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape)) if mask.dim() else ()
