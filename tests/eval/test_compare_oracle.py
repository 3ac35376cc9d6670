"""The judge's comparison (okgit.eval.judge.tolerance) against its former implementation, a pass of
masks with a wait per chunk and per figure, kept here as the oracle: the same findings, positions,
figures and verdicts over random outputs with NaN, inf and unwritten patterns, references with
non-finite values of their own, chunk tails and both tolerance rules."""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest
import torch

from okgit.eval.judge import tolerance
from okgit.eval.judge.tolerance import _unravel, check_leaf, magnitude, reference_error, tolerance_from
from okgit.eval.protocol.checks import LeafCheck, LeafTolerance
from okgit.eval.worker.tensors import chunks

LEAF = {"exact": True}
SIZE = 5  # elements per chunk: most tensors below end in a partial chunk
CASES = 600  # random outputs compared (fewer under Triton's interpreter: tests/eval/test_fused_check.py)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(tolerance, "chunks", functools.partial(chunks, size=SIZE))


# ---- the oracle: tolerance.py's comparison before the finite pass (commit 6521f9c) -------------
def old_reference_error(native: Any, f64: Any) -> float:
    if f64 is None or native is None or not native.is_floating_point():
        return 0.0
    worst = 0.0
    for _, (a, b) in chunks(native, f64, size=SIZE):
        a, b = a.double(), b.double()
        finite = torch.isfinite(a) & torch.isfinite(b)
        if bool(finite.any()):
            worst = max(worst, float(torch.where(finite, (a - b).abs(), 0.0).max()))
    return worst


def old_magnitude(native: Any, f64: Any) -> float:
    worst = 0.0
    for _, (ref,) in chunks(f64 if f64 is not None else native, size=SIZE):
        if ref.numel():
            worst = max(worst, float(torch.where(torch.isfinite(ref), ref.double().abs(), 0.0).max()))
    return worst


def old_check_floats(out: Any, native: Any, f64: Any, tol: LeafTolerance, gate: str) -> LeafCheck:
    n = out.numel()
    found, at = [0, 0, 0], [-1, -1, -1]
    max_abs = max_rel = 0.0
    over_n, first, got, want = 0, -1, 0.0, 0.0
    for start, (o, nat, ref) in chunks(out, native, f64, size=SIZE):
        nat_finite, o_nan = torch.isfinite(nat), torch.isnan(o)
        masks = (o_nan & nat_finite,
                 ~nat_finite & ~((torch.isnan(nat) & o_nan) | (nat == o)),
                 ~torch.isfinite(o) & nat_finite)
        for j, mask in enumerate(masks):
            k = int(mask.sum())
            if k and at[j] < 0:
                at[j] = start + int(torch.nonzero(mask)[0])
            found[j] += k
        del masks
        if any(found):
            continue
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
    if over_n:
        return LeafCheck(False, gate, f"{over_n} of {n} elements outside tolerance; max abs error "
                         f"{max_abs:.3e} (allowed {tol.describe}); first at {_unravel(first, out.shape)}: got "
                         f"{got:.6g}, expected {want:.6g}", max_abs, max_rel)
    return LeafCheck(True, max_abs=max_abs, max_rel=max_rel)


# ---- random cases ------------------------------------------------------------------------------
SPECIAL = [float("nan"), float("inf"), float("-inf")]


def _spots(rng: random.Random, n: int, share: float) -> list[int]:
    return [i for i in range(n) if rng.random() < share]


def _case(rng: random.Random) -> tuple[Any, Any, Any, LeafTolerance]:
    dtype = rng.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16, torch.float64])
    shape = rng.choice([(0,), (1,), (5,), (7,), (3, 4), (2, 3, 4), (6, 6), (31,)])
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    ref64 = (torch.rand(shape, generator=gen, dtype=torch.float64) * 4 - 2) * 10 ** rng.uniform(-3, 3)
    n = ref64.numel()
    flat64 = ref64.reshape(-1)
    for i in _spots(rng, n, rng.choice([0.0, 0.0, 0.1])):  # the reference's own NaN and inf
        flat64[i] = rng.choice(SPECIAL)
    native = ref64.to(dtype)
    flat_nat = native.reshape(-1)
    for i in _spots(rng, n, rng.choice([0.0, 0.0, 0.05])):  # the native run apart from float64
        flat_nat[i] = rng.choice(SPECIAL + [0.0])
    out = (native.double() + torch.randn(shape, generator=gen, dtype=torch.float64)
           * rng.choice([0.0, 1e-7, 1e-4, 1e-2]) * 10 ** rng.uniform(-3, 3)).to(dtype)
    flat_out = out.reshape(-1)
    for i in _spots(rng, n, rng.choice([0.0, 0.0, 0.0, 0.1])):  # unwritten (poisoned with NaN), inf, wrong
        flat_out[i] = rng.choice(SPECIAL + [float(flat_nat[i]) + 1.0, float(flat_nat[i])])
    f64 = None if rng.random() < 0.3 or dtype == torch.float64 and rng.random() < 0.5 else ref64
    err = old_reference_error(native, f64)
    tol = tolerance_from(str(dtype).replace("torch.", ""), old_magnitude(native, f64), err,
                         contraction=rng.random() < 0.3)
    return out, native, f64, tol


def test_the_comparison_finds_what_its_former_implementation_found():
    rng = random.Random(20261203)
    paths = {"pass": 0, "fail": 0}
    for _ in range(CASES):
        out, native, f64, tol = _case(rng)
        assert reference_error(native, f64) == old_reference_error(native, f64)
        assert magnitude(native, f64) == old_magnitude(native, f64)
        new, old = check_leaf(out, LEAF, native, f64, tol, "seeds"), old_check_floats(out, native, f64, tol, "seeds")
        assert new == old, (out, native, f64, tol)
        paths["pass" if old.ok else "fail"] += 1
    assert min(paths.values()) > CASES // 6, paths  # both verdicts drawn many times


def test_a_contraction_tolerance_at_its_bound_and_a_zero_atol_agree_with_the_oracle():
    ref = torch.linspace(-1.0, 1.0, 23, dtype=torch.float64)
    native = ref.float()
    out = native.clone()
    out[[4, 11, 17]] += torch.tensor([1e-6, -3e-6, 2e-6])
    edge = float((out[11].double() - ref[11]).abs())  # the largest difference: exactly at the bound, then past it
    tolerances = [LeafTolerance(rtol=0.0, atol=atol, ref_error=0.0, scale=1.0)
                  for atol in (edge, float(torch.nextafter(torch.tensor(edge), torch.tensor(0.0))))]
    checks = [check_leaf(out, LEAF, native, ref, tol, "seeds") for tol in tolerances]
    assert checks[0].ok and not checks[1].ok and "1 of 23 elements outside tolerance" in checks[1].message
    tolerances.append(LeafTolerance(rtol=1e-4, atol=0.0, ref_error=0.0, scale=1.0))
    for tol in tolerances:
        assert check_leaf(out, LEAF, native, ref, tol, "seeds") == old_check_floats(out, native, ref, tol, "seeds")
