"""The precision rule of float32 contractions (okgit.eval.judge.tolerance): a GEMM's output may be off
by what the fp32 reference itself is off (x4), not by a fixed 1e-4. Checked on real products
(fp32 on the CPU against float64) with the roundings of each tensor-core precision emulated
bit for bit on the operands: the single-pass TF32 kinds fail, the 3xTF32 split passes, and
the old fixed rule would have let the round-to-nearest TF32 GEMM through."""

from __future__ import annotations

import pytest
import torch

from okgit.eval import roofline
from okgit.eval.judge.tolerance import check_leaf, leaf_tolerance

FACTS = {"exact": True}


def rounded(x: torch.Tensor, bits: int, nearest: bool = True) -> torch.Tensor:
    """x (fp32) with `bits` explicit mantissa bits: TF32 10, bf16 7; truncated where not nearest
    (what a tensor core does with the low bits of an fp32 operand in a plain TF32 product)."""
    drop = 23 - bits
    i = x.view(torch.int32)
    if nearest:
        i = i + (1 << (drop - 1))
    return (i & ~((1 << drop) - 1)).view(torch.float32)


def split_product(a: torch.Tensor, b: torch.Tensor, bits: int) -> torch.Tensor:
    """The three-product split (3xTF32 with 10 bits, bf16x3 with 7): hi*hi + hi*lo + lo*hi in fp32."""
    ah, bh = rounded(a, bits), rounded(b, bits)
    al, bl = rounded(a - ah, bits), rounded(b - bh, bits)
    return ah @ bh + (ah @ bl + al @ bh)


def uniform_gemm(signed: bool):
    """(A, B, float64 product, fp32 product, its max error) on KernelBench's uniform inputs, or
    on the evaluator's second distribution (x -> 3x - 1)."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand(64, 2048, generator=gen), torch.rand(2048, 256, generator=gen)
    if signed:
        a, b = 3 * a - 1, 3 * b - 1
    ref64 = a.double() @ b.double()
    native = a @ b
    return a, b, ref64, native, float((native.double() - ref64).abs().max())


@pytest.fixture(scope="module", params=[False, True], ids=["uniform", "signed"])
def gemm(request):
    return uniform_gemm(request.param)


def test_single_pass_tf32_fails_and_the_split_passes(gemm):
    a, b, ref64, native, err = gemm
    tol = leaf_tolerance(native, ref64, err, contraction=True)
    assert tol.rtol == 0 and tol.atol >= 4 * err
    for name, out in {
        "tf32 (truncated)": rounded(a, 10, nearest=False) @ rounded(b, 10, nearest=False),
        "tf32 (nearest)": rounded(a, 10) @ rounded(b, 10),
    }.items():
        check = check_leaf(out, FACTS, native, ref64, tol, "seeds")
        assert not check.ok and check.gate == "seeds", name
        assert "the reference's own error" in check.message
    assert check_leaf(split_product(a, b, 10), FACTS, native, ref64, tol, "seeds").ok
    assert check_leaf(native, FACTS, native, ref64, tol, "seeds").ok


def test_the_fixed_rule_admitted_round_to_nearest_tf32():
    """Why the rule changed: on uniform inputs the error of a sum of many positive products is
    small beside the sum, so 1e-4 of the output's magnitude let a single-pass TF32 GEMM pass at
    tens of times the fp32 reference's own error."""
    a, b, ref64, native, err = uniform_gemm(signed=False)
    old = leaf_tolerance(native, ref64, err)
    out = rounded(a, 10) @ rounded(b, 10)
    assert check_leaf(out, FACTS, native, ref64, old, "seeds").ok
    assert float((out.double() - ref64).abs().max()) > 20 * err


def test_bf16x3_fails_on_zero_mean_inputs():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(64, 512, generator=gen), torch.randn(512, 128, generator=gen)
    ref64, native = a.double() @ b.double(), a @ b
    tol = leaf_tolerance(native, ref64, float((native.double() - ref64).abs().max()), contraction=True)
    assert not check_leaf(split_product(a, b, 7), FACTS, native, ref64, tol, "seeds").ok
    assert check_leaf(split_product(a, b, 10), FACTS, native, ref64, tol, "seeds").ok


def test_an_exact_reference_leaves_a_few_ulps():
    ref64 = torch.full((8,), 3.0, dtype=torch.float64)
    tol = leaf_tolerance(ref64.float(), ref64, 0.0, contraction=True)
    assert tol.atol == pytest.approx(32 * 2.0**-24 * 3.0)


def test_other_outputs_and_user_tolerances_keep_the_dtype_rule():
    ref64 = torch.linspace(-1, 1, 11, dtype=torch.float64)
    assert leaf_tolerance(ref64.half(), ref64, 0.0, contraction=True).rtol == 2e-3
    assert leaf_tolerance(ref64.float(), ref64, 0.0, contraction=False).rtol == 1e-4
    own = leaf_tolerance(ref64.float(), ref64, 0.0, rtol=1e-3, contraction=True)  # okgit.toml's
    assert own.rtol == 1e-3 and own.atol == pytest.approx(1e-3)


def test_the_floor_counts_the_split_precision_rate():
    """A 3xTF32 kernel at twice cuBLAS's fp32 rate is honest: the floor of a float32 contraction
    judged at ~1e-6 must not sit at the fp32 rate."""
    peaks = {"matmul": {"fp32": 50e12, "tf32": 495e12, "bf16": 790e12, "fp16": 790e12}}
    assert roofline.allowed_rate(peaks, {"float32"}, 1e-6) == pytest.approx(495e12 / 3)
    assert roofline.allowed_rate(peaks, {"float32"}, 1e-4) == pytest.approx(790e12)  # fp16's roundoff allowed
    assert roofline.allowed_rate(peaks, {"float32"}, 1e-9) == pytest.approx(50e12)
