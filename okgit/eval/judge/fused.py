"""The judge's passes over outputs on a GPU (okgit.eval.judge.tolerance), one Triton kernel each:
the finite comparison, the fingerprint's sums, and the reference's own error and magnitude.

The comparison in torch walks each chunk with about a dozen kernels and float64 temporaries:
about 150 bytes of memory traffic per element against the 16 the data is (the output, the native
and the float64 expected). On the H200 the judge's comparisons were the largest phase of a large
evaluation (L1/39, 2.1 G elements per output: 2.6 s of a 4.5-5.3 s fast evaluation, 2026-12-03),
and the 8deb49a sweep's evaluations spent 309 s in them over 23 problems (the comparisons, the
fingerprints and opening the outputs together), each second with the device held shared, which
every timing on the device waits for. Here each program of the comparison reads its block of the
three once and writes four figures: how many elements are not finite (in the output or a
reference), how many lie outside the tolerance, the largest absolute and relative errors; torch
adds the programs' figures up. The fingerprint's sums and the reference's error and magnitude
read each element once too.

The arithmetic is the torch pass's, in float64, in the same order: |o - ref|, and outside where
not diff <= |ref| * rtol + atol (atol alone where rtol is 0), with fused multiply-adds off
(OPTIONS) so that the bound rounds as torch's two operations do; the relative error
divides by |ref| clamped below at atol (or 1e-30). A pass that finds an element not finite
answers None, as the torch pass does, and the caller walks the masks in torch. Tested against the
torch pass under Triton's interpreter (tests/eval/test_fused_check.py) and on a GPU.
"""

import os
from typing import Any

import triton
import triton.language as tl

BLOCK = 2048  # elements per program: four figures each, 1 M programs for a 2 G element output
# no fused multiply-add: |ref| * rtol + atol rounds twice, as torch's two kernels round it (on
# sm_90 Triton otherwise emits fma.rn.f64 for it)
OPTIONS = {"enable_fp_fusion": False}

_kernels: dict[tuple[str, bool], Any] = {}  # by function and whether Triton's interpreter runs it (tests on a CPU)


def finite_pass(out: Any, native: Any, f64: Any, rtol: float, atol: float) -> tuple[int, float, float] | None:
    """(elements outside the tolerance, max abs error, max relative error) of `out` against
    `f64` (the float64 expected, or `native` where there is none), or None where an element of the
    output or a reference is not finite; one launch and one wait for the device."""
    import torch

    o, nat = out.reshape(-1), native.reshape(-1)
    ref = f64.reshape(-1) if f64 is not None else nat
    n = o.numel()
    if n == 0:
        return 0, 0.0, 0.0
    programs = triton.cdiv(n, BLOCK)
    # float64 scalars travel as a tensor: Triton passes a Python float as float32
    params = torch.tensor([rtol, atol, atol or 1e-30], dtype=torch.float64, device=o.device)
    counts = torch.empty((programs, 2), dtype=torch.int64, device=o.device)
    errors = torch.empty((programs, 2), dtype=torch.float64, device=o.device)
    _kernel(_finite_figures)[(programs,)](o, nat, ref, params, counts, errors, n, USE_RTOL=bool(rtol), BLOCK=BLOCK, **OPTIONS)
    nonfinite, over_n, max_abs, max_rel = torch.cat([counts.sum(0).double(), errors.amax(0)]).tolist()
    if nonfinite:
        return None
    return int(over_n), max_abs, max_rel


def finite_max(a: Any, b: Any) -> float:
    """max |a - b| over the positions where both are finite (the reference's own error against
    float64), or max |a| over a's finite elements where `b` is None (its magnitude), in float64."""
    import torch

    a = a.reshape(-1)
    n = a.numel()
    if n == 0:
        return 0.0
    programs = triton.cdiv(n, BLOCK)
    maxima = torch.empty(programs, dtype=torch.float64, device=a.device)
    _kernel(_finite_max)[(programs,)](a, b.reshape(-1) if b is not None else a, maxima, n, HAS_B=b is not None,
                                      BLOCK=BLOCK)
    return float(maxima.amax())


def word_sums(words: Any) -> tuple[int, int]:
    """The fingerprint's two sums over flat 32-bit (or 8-bit) words, as okgit.eval.judge.tolerance's
    `fingerprint` defines them: of the words, and of each word times (its position + 1) *
    2654435761, in wrapping int64 (each program's, then the programs' in torch: addition modulo
    2^64 does not depend on the order)."""
    import torch

    n = words.numel()
    if n == 0:
        return 0, 0
    programs = triton.cdiv(n, BLOCK)
    sums = torch.empty((programs, 2), dtype=torch.int64, device=words.device)
    _kernel(_word_sums)[(programs,)](words, sums, n, BLOCK=BLOCK)
    plain, weighted = sums.sum(0).tolist()
    return int(plain), int(weighted)


def _kernel(fn: Any) -> Any:
    """A kernel, made on first use: Triton's decorator reads TRITON_INTERPRET when it runs."""
    key = (fn.__name__, os.environ.get("TRITON_INTERPRET") == "1")
    if key not in _kernels:
        _kernels[key] = triton.jit(fn)
    return _kernels[key]


def _finite_max(a_ptr, b_ptr, maxima_ptr, n, HAS_B: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    a = tl.load(a_ptr + offs, mask=inside, other=0.0).to(tl.float64)
    finite = inside & ((a - a) == 0)  # NaN and inf leave NaN
    if HAS_B:
        b = tl.load(b_ptr + offs, mask=inside, other=0.0).to(tl.float64)
        finite = finite & ((b - b) == 0)
        value = tl.abs(a - b)
    else:
        value = tl.abs(a)
    tl.store(maxima_ptr + pid, tl.max(tl.where(finite, value, 0.0), axis=0))


def _word_sums(words_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    w = tl.load(words_ptr + offs, mask=inside, other=0).to(tl.int64)
    pos = (offs + 1) * 2654435761
    tl.store(sums_ptr + pid * 2, tl.sum(w, axis=0))
    tl.store(sums_ptr + pid * 2 + 1, tl.sum(w * pos, axis=0))


def _finite_figures(o_ptr, nat_ptr, ref_ptr, params_ptr, counts_ptr, errors_ptr, n,
                    USE_RTOL: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    o = tl.load(o_ptr + offs, mask=inside, other=0.0).to(tl.float64)
    nat = tl.load(nat_ptr + offs, mask=inside, other=0.0).to(tl.float64)
    ref = tl.load(ref_ptr + offs, mask=inside, other=0.0).to(tl.float64)
    rtol, atol, clamp = tl.load(params_ptr), tl.load(params_ptr + 1), tl.load(params_ptr + 2)
    # x - x is 0 for a finite x and NaN for NaN or inf: no constant near the largest double, which
    # Triton would round to float32 (inf)
    finite = ((o - o) == 0) & ((nat - nat) == 0) & ((ref - ref) == 0)
    diff = tl.abs(o - ref)
    scale = tl.abs(ref)
    if USE_RTOL:
        bound = scale * rtol + atol
    else:
        bound = tl.zeros_like(scale) + atol
    outside = (diff <= bound) == 0
    rel = diff / tl.maximum(scale, clamp)
    tl.store(counts_ptr + pid * 2, tl.sum((inside & (finite == 0)).to(tl.int64), axis=0))
    tl.store(counts_ptr + pid * 2 + 1, tl.sum((inside & outside).to(tl.int64), axis=0))
    tl.store(errors_ptr + pid * 2, tl.max(tl.where(inside, diff, 0.0), axis=0))
    tl.store(errors_ptr + pid * 2 + 1, tl.max(tl.where(inside, rel, 0.0), axis=0))
