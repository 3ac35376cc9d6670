"""The judge's comparison of a float output (okgit.eval.judge.tolerance): one pass over the chunks
finds every gate's first failure in the gates' order, and a passing check never compacts a mask
into an index tensor (on a GPU: an allocation the chunk's size and a wait for the device, per
chunk and per mask)."""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from okgit.eval.judge import tolerance
from okgit.eval.judge.tolerance import check_leaf, leaf_tolerance, magnitude, reference_error
from okgit.eval.protocol.checks import LeafTolerance
from okgit.eval.worker.tensors import chunks

LEAF = {"exact": True}
N = 40  # six chunks of 7 elements: every finding below lies in a chunk of its own


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(tolerance, "chunks", functools.partial(chunks, size=7))


def _case() -> tuple[torch.Tensor, torch.Tensor, LeafTolerance]:
    ref64 = torch.linspace(1.0, 2.0, N, dtype=torch.float64).reshape(5, 8)
    native = ref64.float()
    return native, ref64, leaf_tolerance(native, ref64, reference_error(native, ref64))


def test_the_first_gate_in_order_is_named_at_its_first_position_whatever_chunk_it_lies_in():
    native, ref64, tol = _case()
    out = native.clone().reshape(-1)
    out[3] += 1.0  # outside the tolerance, in the first chunk
    out[22] = float("inf")  # inf where the reference is finite, later
    out[30] = out[37] = float("nan")  # never written, last
    check = check_leaf(out.reshape(5, 8), LEAF, native, ref64, tol, "seeds")
    assert check.gate == "outputs_written"
    assert check.message.startswith("2 of 40 elements are NaN") and "first at (3, 6)" in check.message
    out[30] = out[37] = 0.0
    check = check_leaf(out.reshape(5, 8), LEAF, native, ref64, tol, "seeds")
    assert check.gate == "nan_pattern" and check.message == "1 elements are inf where the reference is finite"
    out[22] = native.reshape(-1)[22]
    out[30], out[37] = native.reshape(-1)[30] - 1.0, native.reshape(-1)[37] + 0.5
    check = check_leaf(out.reshape(5, 8), LEAF, native, ref64, tol, "seeds")
    assert check.gate == "seeds" and check.message.startswith("3 of 40 elements outside tolerance")
    assert f"first at (0, 3): got {float(out[3]):.6g}, expected {float(ref64.reshape(-1)[3]):.6g}" in check.message
    assert check.max_abs == pytest.approx(1.0, abs=1e-6)


def test_the_references_own_non_finite_positions_must_be_matched_and_weigh_nothing():
    native, ref64, tol = _case()
    native, ref64 = native.reshape(-1).clone(), ref64.reshape(-1).clone()
    native[9], ref64[9] = float("nan"), float("nan")
    native[33], ref64[33] = float("-inf"), float("-inf")
    out = native.clone()
    out[15] += 1e-5
    check = check_leaf(out, LEAF, native, ref64, tol, "seeds")
    assert check.ok
    assert check.max_abs == pytest.approx(abs(float(out[15]) - float(ref64[15])))
    assert check.max_rel == pytest.approx(check.max_abs / float(ref64[15]))  # not NaN from position 9
    out[33] = 0.0
    check = check_leaf(out, LEAF, native, ref64, tol, "seeds")
    assert check.gate == "nan_pattern" and check.message == "1 NaN/inf positions differ from the reference's"
    assert reference_error(native, ref64) == pytest.approx(float((native.double() - ref64)[:9].abs().max()))
    assert magnitude(native, ref64) == 2.0


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_a_passing_check_compacts_no_mask_into_indices():
    native, ref64, tol = _case()
    with _Ops() as ops:
        assert check_leaf(native.clone(), LEAF, native, ref64, tol, "seeds").ok
        reference_error(native, ref64)
        magnitude(native, ref64)
    compacting = [n for n in ops.names if n.split(".")[0] in ("nonzero", "index", "index_put", "index_put_",
                                                              "masked_select")]
    assert not compacting, compacting
    # one pass: a chunk's difference taken once (the check's, the reference's error), and the figures
    # read back together at the end (a tolist per function), never a wait per chunk or per figure
    assert sum(n.startswith("sub") for n in ops.names) == 2 * 6
    assert "_local_scalar_dense.default" not in ops.names


def test_the_judge_digests_only_the_outputs_the_determinism_gate_compares():
    from okgit.eval.protocol.keys import CallKey

    digested = {key: CallKey.parse(key).fingerprinted(kind) for key, kind in (
        ("s0", "seed"), ("s3#repeat", "seed"), ("signed", "distribution"), ("x1", "extra_shape"),
        ("i0", "init_inputs"), ("m0", "modes"), ("fresh", "seed"), ("timed:s1~77", "seed"))}
    # the determinism gate (gates/cases.py) compares a seed case's call with its repeat, nothing else
    assert [key for key, yes in digested.items() if yes] == ["s0", "s3#repeat"]
