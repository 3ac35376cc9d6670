"""The 3xTF32 convolution with its operands split ahead (okgit/lower/kinds/conv.py, precision
"tf32x3-split"): where the convolution does enough per operand element, the plan's input copy
writes TF32 high parts and remainders and the packed weight is split alike, and the kernel sums
three TF32 products of them; elsewhere Triton splits inside the kernel. Under the interpreter a
dot is fp32 whatever its precision, but the high parts are TF32 values: a kernel that dropped a
remainder's product would be off by TF32's rounding (about 1e-3 of the output), so the float64
check below holds it to 3xTF32's accuracy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conv_forms import form
from test_conv_kind import ctx_for
from test_conv_packed import conv_plan, module
from test_conv_tma import run_jobs

from okgit.search.proposers.templates import plan

# 8 -> 16 channels, 3x3: about 300 FLOPs per operand element, split ahead
SPLIT = form("nn.Conv2d(cin, cout, 3, padding=1)", "torch.tanh(y) * self.p", "torch.randn(batch, cin, 9, 10)", 8, 16, 2)
# 1 -> 2 channels, 2 taps: 8 FLOPs per element, left to Triton
THIN = form("nn.Conv1d(cin, cout, 2)", "y", "torch.rand(batch, cin, 40)", 1, 2, 1)


def gpu_candidate(tmp_path: Path, text: str, monkeypatch):
    """The op file's reference module, and its 3xTF32 convolution candidate as a GPU gets it, as a module."""
    path = tmp_path / "op.py"
    path.write_text(text)
    source = next(p.source for p in plan(ctx_for(path, "cuda")) if p.origin == "template:conv")
    assert '_PRECISION: str = "tf32x3-split"' in source
    return module(text, monkeypatch), module(source, monkeypatch)


def tf32_values(t: torch.Tensor) -> bool:
    """Whether every element of t (fp32) is a TF32 value: its 13 low mantissa bits zero."""
    return bool((t.contiguous().view(torch.int32) & 8191 == 0).all())


def test_the_plan_splits_the_input_copy_and_the_weight_into_tf32_parts(tmp_path, monkeypatch):
    ref, cand = gpu_candidate(tmp_path, SPLIT, monkeypatch)
    torch.manual_seed(0)
    model, x = ref.Model(*ref.get_init_inputs()), ref.get_inputs()[0]
    split, whole = conv_plan(cand, x, model, "tf32x3-split"), conv_plan(cand, x, model, "ieee")
    assert split.switches["SPLIT"] and not whole.switches["SPLIT"]
    hi, lo = split.x, split.a_lo
    assert hi.shape == lo.shape == whole.x.shape and tf32_values(hi) and tf32_values(lo)
    # high part and remainder give the input back to the remainder's rounding (2^-22 of it)
    torch.testing.assert_close(hi.double() + lo.double(), whole.x.double(), rtol=2.0**-21, atol=0)
    assert lo.abs().max() <= 2.0**-11 * hi.abs().max()
    for (_, packed, packed_lo, _, _), (_, w, w_lo, _, _) in zip(split.launches, whole.launches, strict=True):
        assert w_lo is w  # unsplit: one weight, read once
        assert tf32_values(packed) and tf32_values(packed_lo)
        torch.testing.assert_close(packed.double() + packed_lo.double(), w.double(), rtol=2.0**-21, atol=0)


def test_a_convolution_doing_little_per_element_is_left_to_tritons_split(tmp_path, monkeypatch):
    ref, cand = gpu_candidate(tmp_path, THIN, monkeypatch)
    p = conv_plan(cand, ref.get_inputs()[0], ref.Model(*ref.get_init_inputs()), "tf32x3-split")
    assert not p.switches["SPLIT"]
    assert p.a_lo is p.a and all(w_lo is w for _, w, w_lo, _, _ in p.launches)


@pytest.mark.slow  # the kernel under the interpreter, in a subprocess
@pytest.mark.parametrize("tma", [False, True])
def test_the_split_kernel_is_as_accurate_as_3xtf32(tmp_path, tma):
    """Against float64, to 3xTF32's accuracy (a few units of 2^-22 of the output, summed over
    K = 72): far inside single TF32's error, which a product of the high parts alone would show.
    With TMA forced (the seam: _tma_device) the weight's parts come through descriptors."""
    path = tmp_path / "op.py"
    path.write_text(SPLIT)
    source = next(p.source for p in plan(ctx_for(path, "cuda")) if p.origin == "template:conv")
    (got,) = run_jobs(tmp_path, [(str(path), source, False, tma)])
    assert got["split"] == [True] and got["switches"][0]["TMA_B"] is tma, got
    assert got["error"] < 2.0**-17, got  # 3xTF32; TF32 alone is about 2^-11
