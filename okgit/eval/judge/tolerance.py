"""Tolerances and output comparison, run in the judge (the candidate never sees this code run).

Tolerances are fixed per dtype before any candidate: |out - ref64| <= atol + rtol * |ref64|
with atol = rtol_dtype * max|ref64| (scaled to the reference's magnitude), and never tighter
than REF_ERROR_MULTIPLE times the reference implementation's own error against float64 (a TF32
cuDNN convolution is far from 1e-4 of strict fp32).

A float32 output of a reference that contracts (a matmul or convolution: FLOPs the judge counts)
is judged by precision instead: its allowed error is REF_ERROR_MULTIPLE times the reference's
own error at that shape (or CONTRACTION_ULPS units in the last place of its magnitude, if more),
with no fixed 1e-4. The fixed rtol would admit a single-pass TF32 or a bf16x3 GEMM, at 50-400
times the error of the fp32 reference on KernelBench's uniform inputs, where the error of a sum
of many positive products is small beside the sum; a split-precision kernel (3xTF32) passes
because its error is that of the fp32 reference, not because a threshold is loose.

Positions where the native reference is
NaN or inf must hold the same non-finite value; a NaN where the reference is finite is an
element the candidate never wrote (memory is poisoned with NaN) or a NaN it produced.

Every pass over an output walks it in flat chunks of CHUNK elements, where the tensors live
(on the GPU for a GPU problem): the float64 temporaries of one chunk are what a comparison
adds to memory, whatever the output's size (KernelBench outputs reach 1.6e9 elements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from okgit.eval.protocol.checks import LeafCheck, LeafTolerance
from okgit.eval.worker.tensors import bitwise_equal, chunks

REF_ERROR_MULTIPLE = 4.0
CONTRACTION_ULPS = 32  # a contraction's floor, in units of 2^-24 times the output's magnitude
RTOL = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1.6e-2, "float64": 1e-7, "complex64": 1e-4, "complex128": 1e-7}


def _fused(t: Any) -> bool:
    """Whether the passes over `t` run as one Triton kernel each (okgit.eval.judge.fused: the
    finite comparison, the fingerprint, the reference's error and magnitude): on a GPU. Elsewhere
    torch walks the chunks."""
    return bool(t.is_cuda)


def reference_error(native: Any, f64: Any) -> float:
    import torch

    if f64 is None or native is None or not native.is_floating_point():
        return 0.0
    if _fused(native):
        from okgit.eval.judge import fused

        return fused.finite_max(native, f64)
    worst = []  # each chunk's maximum, on the device: one wait at the end
    for _, (a, b) in chunks(native, f64):
        if a.numel():  # `where`, not indexing: no index tensor, no wait (_check_floats)
            finite = torch.isfinite(a) & torch.isfinite(b)
            worst.append(torch.where(finite, torch.sub(a, b.double()).abs_(), 0.0).amax())
    return max([0.0, *torch.stack(worst).tolist()]) if worst else 0.0


def magnitude(native: Any, f64: Any) -> float:
    """max |reference| over its finite elements (float64 where it exists)."""
    import torch

    ref = f64 if f64 is not None else native
    if _fused(ref) and ref.is_floating_point():
        from okgit.eval.judge import fused

        return fused.finite_max(ref, None)
    worst = [torch.where(torch.isfinite(r), r.double().abs(), 0.0).amax() for _, (r,) in chunks(ref) if r.numel()]
    return max([0.0, *torch.stack(worst).tolist()]) if worst else 0.0


def leaf_tolerance(native: Any, f64: Any, ref_error: float, rtol: float | None = None,
                   atol: float | None = None, contraction: bool = False) -> LeafTolerance:
    """The tolerance of one output leaf; `rtol`/`atol` override the dtype rule (okgit.toml)."""
    if not (native.is_floating_point() or native.is_complex()):
        return LeafTolerance(0.0, 0.0, 0.0)
    return tolerance_from(str(native.dtype).replace("torch.", ""), magnitude(native, f64), ref_error, rtol, atol,
                          contraction)


def tolerance_from(dtype: str, scale: float, ref_error: float, rtol: float | None = None,
                   atol: float | None = None, contraction: bool = False) -> LeafTolerance:
    """The dtype rule, or the precision rule of a float32 contraction (module docstring); a
    tolerance okgit.toml sets stands as it is."""
    if contraction and dtype == "float32" and rtol is None and atol is None:
        floor = CONTRACTION_ULPS * 2.0**-24 * scale
        return LeafTolerance(rtol=0.0, atol=max(REF_ERROR_MULTIPLE * ref_error, floor), ref_error=ref_error, scale=scale)
    r = RTOL.get(dtype, 1e-4) if rtol is None else rtol
    a = r * scale if atol is None else atol
    return LeafTolerance(rtol=r, atol=max(a, REF_ERROR_MULTIPLE * ref_error), ref_error=ref_error, scale=scale)


def check_leaf(out: Any, facts: dict[str, Any], native: Any, f64: Any, tol: LeafTolerance, gate: str) -> LeafCheck:
    """One output leaf of one call against the expected one. `gate` names a plain mismatch."""
    if not facts.get("exact") or out is None:
        return LeafCheck(False, "output_type", f"returned {facts.get('type')}, not exactly torch.Tensor")
    if list(out.shape) != list(native.shape):
        return LeafCheck(False, "output_type", f"shape {list(out.shape)}, expected {list(native.shape)}")
    if out.dtype != native.dtype:
        return LeafCheck(False, "output_type", f"dtype {out.dtype}, expected {native.dtype}")
    if not (native.is_floating_point() or native.is_complex()):
        return _check_integers(out, native, gate)
    return _check_floats(out, native, f64, tol, gate)


def _check_integers(out: Any, native: Any, gate: str) -> LeafCheck:
    import torch

    bad_n = poison_n = 0
    poison = None if out.dtype == torch.bool else torch.iinfo(out.dtype).max
    for _, (o, nat) in chunks(out, native):
        bad = o != nat
        bad_n += int(bad.sum())
        if poison is not None:
            poison_n += int((bad & (o == poison)).sum())
    if bad_n:
        if poison is not None and poison_n == bad_n:
            return LeafCheck(False, "outputs_written", f"{bad_n} of {out.numel()} elements never written (poison value)")
        return LeafCheck(False, gate, f"{bad_n} of {out.numel()} integer elements differ")
    return LeafCheck(True)


def _check_floats(out: Any, native: Any, f64: Any, tol: LeafTolerance, gate: str) -> LeafCheck:
    """The gates of one float leaf in their order (unwritten, NaN pattern, inf, tolerance). Where
    the output and both references are finite everywhere (a passing or merely inaccurate
    candidate), no NaN or inf gate can have a finding and the tolerance is all there is: one pass
    with no masks and one wait for the device (_finite_pass); anything else walks the masks
    (_masked_pass). The findings, positions and figures are the same either way."""
    figures = None if out.is_complex() else _finite_pass(out, native, f64, tol)
    return _verdict(out, tol, gate, figures) if figures is not None else _masked_pass(out, native, f64, tol, gate)


def _excess(o: Any, ref: Any, tol: LeafTolerance) -> tuple[Any, Any, Any]:
    """|o - ref| in float64 (o promoted on the fly, as o.double() - ref), |ref|, and where the
    difference is outside the tolerance, for a chunk that is finite everywhere."""
    import torch

    diff = torch.sub(o, ref).abs_()
    scale = ref.abs()
    # atol + rtol * |ref| as _masked_pass rounds it; rtol 0 (a contraction's rule) leaves atol. "Not
    # within" rather than "above": a NaN that got past _finite_pass's test would count as outside
    return diff, scale, ~(diff <= (scale * tol.rtol + tol.atol if tol.rtol else tol.atol))


def _finite_pass(out: Any, native: Any, f64: Any, tol: LeafTolerance) -> tuple[int, int, float, float, float,
                                                                             float] | None:
    """(elements outside the tolerance, the first's flat position, its value, the expected one,
    max abs error, max relative error), or None where an element of the output or a reference is
    not finite. On a GPU one Triton kernel reads each element once (okgit.eval.judge.fused); the
    first position is looked for only where there is one."""
    if _fused(out):
        from okgit.eval.judge import fused

        counted = fused.finite_pass(out, native, f64, tol.rtol, tol.atol)
    else:
        counted = _finite_counts(out, native, f64, tol)
    if counted is None:
        return None
    over_n, max_abs, max_rel = counted
    first, got, want = -1, 0.0, 0.0
    if over_n:
        first, got, want = _first_outside(out, native, f64, tol)
    return over_n, first, got, want, max_abs, max_rel


def _finite_counts(out: Any, native: Any, f64: Any, tol: LeafTolerance) -> tuple[int, float, float] | None:
    """The finite pass in torch, chunk by chunk (a CPU's): (elements outside, max abs error, max
    relative error), or None where an element is not finite (it shows in the native chunk's sum or
    the difference's maximum). Each chunk's figures stay on the device until the end."""
    import torch

    figures = []
    for _, (o, nat, ref) in chunks(out, native, f64):
        if not o.numel():
            continue
        ref = (ref if ref is not None else nat).double()
        diff, scale, over = _excess(o, ref, tol)
        max_abs = diff.amax()
        rel = torch.div(diff, scale.clamp_min_(tol.atol or 1e-30), out=scale).amax()
        # a sum is NaN or inf where an element is (NaN propagates through a sum, and through amax)
        figures.append(torch.stack([nat.sum(dtype=torch.float64), max_abs, rel, over.sum().double()]))
    rows = torch.stack(figures).tolist() if figures else []
    if not all(math.isfinite(row[0]) and math.isfinite(row[1]) for row in rows):
        return None
    return (int(sum(row[3] for row in rows)), max([0.0] + [row[1] for row in rows]),
            max([0.0] + [row[2] for row in rows]))


def _first_outside(out: Any, native: Any, f64: Any, tol: LeafTolerance) -> tuple[int, float, float]:
    """The first element outside the tolerance: its flat position, its value, the expected one."""
    import torch

    for start, (o, nat, ref) in chunks(out, native, f64):
        ref = (ref if ref is not None else nat).double()
        outside = torch.nonzero(_excess(o, ref, tol)[2])
        if outside.numel():
            i = int(outside[0])
            return start + i, float(o[i]), float(ref[i])
    return -1, 0.0, 0.0


def _masked_pass(out: Any, native: Any, f64: Any, tol: LeafTolerance, gate: str) -> LeafCheck:
    """One pass over the chunks counts each finding with its first position, and the first gate in
    that order with a finding is the answer. Masks are applied with `where`, never by indexing,
    which on a GPU compacts every chunk into an index tensor and waits for the device."""
    import torch

    n = out.numel()
    found, at = [0, 0, 0], [-1, -1, -1]  # unwritten, NaN pattern, inf: count, first flat position
    max_abs = max_rel = 0.0
    over_n, first, got, want = 0, -1, 0.0, 0.0
    for start, (o, nat, ref) in chunks(out, native, f64):
        nat_finite, o_nan = torch.isfinite(nat), torch.isnan(o)
        masks = (o_nan & nat_finite,  # never written (poisoned with NaN), or a NaN the kernel produced
                 ~nat_finite & ~((torch.isnan(nat) & o_nan) | (nat == o)),
                 ~torch.isfinite(o) & nat_finite)
        for j, mask in enumerate(masks):
            k = int(mask.sum())
            if k and at[j] < 0:
                at[j] = start + int(torch.nonzero(mask)[0])
            found[j] += k
        del masks
        if any(found):
            continue  # a finding before the tolerance decides: its figures are not needed
        ref = (ref if ref is not None else nat).double()
        finite = nat_finite & torch.isfinite(ref)
        if not bool(finite.any()):
            continue
        o = o.double()
        diff = torch.where(finite, (o - ref).abs(), 0.0)
        scale = ref.abs()
        over = (diff > tol.atol + tol.rtol * scale) & finite
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float(torch.where(finite, diff / scale.clamp_min(tol.atol or 1e-30), 0.0).max()))
        k = int(over.sum())
        if k and first < 0:
            i = int(torch.nonzero(over)[0])
            first, got, want = start + i, float(o[i]), float(ref[i])
        over_n += k
    if found[0]:
        return LeafCheck(False, "outputs_written",
                         f"{found[0]} of {n} elements are NaN where the reference is finite, first at "
                         f"{_unravel(at[0], out.shape)}: never written (memory was poisoned with NaN) or a "
                         "NaN the kernel produced")
    if found[1]:
        return LeafCheck(False, "nan_pattern", f"{found[1]} NaN/inf positions differ from the reference's")
    if found[2]:
        return LeafCheck(False, "nan_pattern", f"{found[2]} elements are inf where the reference is finite")
    return _verdict(out, tol, gate, (over_n, first, got, want, max_abs, max_rel))


def _verdict(out: Any, tol: LeafTolerance, gate: str, figures: tuple[int, int, float, float, float, float]) -> LeafCheck:
    """The tolerance's answer once no NaN or inf gate has a finding."""
    over_n, first, got, want, max_abs, max_rel = figures
    if over_n:
        return LeafCheck(False, gate, f"{over_n} of {out.numel()} elements outside tolerance; max abs error "
                         f"{max_abs:.3e} (allowed {tol.describe}); first at {_unravel(first, out.shape)}: got "
                         f"{got:.6g}, expected {want:.6g}", max_abs, max_rel)
    return LeafCheck(True, max_abs=max_abs, max_rel=max_rel)


def _unravel(flat: int, shape: Any) -> tuple[int, ...]:
    index = []
    for dim in reversed(list(shape)):
        index.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return tuple(reversed(index))


def fingerprint(t: Any) -> str:
    """A digest of a tensor's values (not its strides), to tell two outputs apart without
    keeping both: sums of its 32-bit words, plain and position-weighted, in wrapping int64 (on a
    GPU one Triton kernel reading each word once: okgit.eval.judge.fused)."""
    import torch

    flat = t.detach().contiguous().reshape(-1)
    words = flat.view(torch.int32) if flat.numel() * flat.element_size() % 4 == 0 else flat.view(torch.uint8)
    if _fused(words):
        from okgit.eval.judge import fused

        plain, weighted = fused.word_sums(words)
    else:
        plain = weighted = 0
        for start, (w,) in chunks(words):
            w = w.to(torch.int64)
            plain += int(w.sum())
            pos = torch.arange(start + 1, start + 1 + w.numel(), device=w.device, dtype=torch.int64) * 2654435761
            weighted += int((w * pos).sum())
    return f"{t.dtype}:{list(t.shape)}:{plain & (2**64 - 1):x}:{weighted & (2**64 - 1):x}"


def inputs_digest(inputs: list[Any]) -> list[str]:
    """What tells two draws of a case's inputs apart: each tensor's fingerprint (other arguments
    are the op's constants, and an object's repr may name its address)."""
    import torch

    return [fingerprint(x) for x in inputs if isinstance(x, torch.Tensor)]


@dataclass(frozen=True)
class OutputSummary:
    """What the degeneracy rules need of one case's reference outputs, so that no case's
    outputs are kept for them but the first's."""

    all_zero: bool
    constant: bool  # every leaf has several elements, all equal (a scalar loss is not "constant")
    same_as_first: bool  # bitwise the first case's outputs


def summarize_outputs(leaves: list[Any], first: list[Any] | None) -> OutputSummary:
    floats = [t for t in leaves if t is not None and t.numel()]
    return OutputSummary(
        all_zero=bool(floats) and all(bool((t == 0).all()) for t in floats),
        constant=bool(floats) and all(t.numel() > 1 and bool((t == t.reshape(-1)[0]).all()) for t in floats),
        same_as_first=first is not None and len(first) == len(leaves) and all(
            bitwise_equal(a, b) for a, b in zip(leaves, first, strict=True)),
    )


def degenerate_reason(summaries: list[OutputSummary]) -> str | None:
    """Why the reference's outputs cannot tell a right kernel from a wrong one, if they cannot."""
    if not summaries:
        return None
    if all(s.all_zero for s in summaries):
        return "the reference's output is identically zero on every seed and input distribution"
    # a scalar that never changes is caught by the rule across seeds below
    if all(s.constant for s in summaries):
        return "every output of the reference is a constant tensor on every seed and input distribution"
    if len(summaries) >= 2 and all(s.same_as_first for s in summaries[1:]):
        return "the reference's output does not change with its inputs across seeds"
    return None


RANDOM_SPREAD = 1e-3  # of the output's largest magnitude: far beyond the rounding an atomic's order changes


def random_reason(again: list[Any], first: list[Any]) -> str | None:
    """Why the reference cannot be compared with, when two calls on identical inputs differ by
    more than reordered rounding can (a random draw in its forward, dropout in training mode)."""
    for i, (a, b) in enumerate(zip(again, first, strict=False)):
        if a is None or b is None or not b.numel() or a.shape != b.shape:
            continue
        spread = scale = 0.0
        for _, (x, y) in chunks(a, b):  # in float64 a chunk at a time: outputs reach gigabytes
            x64, y64 = _wide(x), _wide(y)
            spread = max(spread, float((x64 - y64).abs().nan_to_num(nan=math.inf).max()))
            scale = max(scale, float(y64.abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).max()))
        if spread > RANDOM_SPREAD * max(scale, 1e-30):
            return (f"two calls on identical inputs give different outputs (output {i} moved by up to {spread:.3g}, "
                    f"its largest magnitude {scale:.3g}): the reference is random (a random draw, dropout in training "
                    "mode, a scatter whose duplicate indices race), so no kernel's output can be compared with it; "
                    "draw random numbers in get_inputs() and pass them in")
    return None


def _wide(t: Any) -> Any:
    import torch

    return t.to(torch.complex128) if t.is_complex() else t.to(torch.float64)
