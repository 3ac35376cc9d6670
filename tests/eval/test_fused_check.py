"""The judge's finite pass in one Triton kernel (okgit.eval.judge.fused), which a GPU's checks run:
the same verdicts, positions and figures as the comparison's oracle (tests/eval/test_compare_oracle.py)
over its random outputs and at the tolerance's bound, a strided output, an element not finite in
any of the three, the fingerprints' sums, the reference's error and magnitude; run by
Triton's interpreter on the CPU, with blocks of 8 elements so that outputs
span several programs and end in a partial one. On a GPU, the kernel against the torch pass at
a size past a chunk."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch
from scriptrun import run_script

from okgit.eval.judge import fused, tolerance
from okgit.eval.judge.tolerance import check_leaf
from okgit.eval.protocol.checks import LeafTolerance

ROOT = Path(__file__).resolve().parents[2]
# Triton's decorator reads TRITON_INTERPRET when it runs, its own library's functions (tl.sum)
# included: the interpreter's cases run in a process that sets it before importing anything
INTERPRETED = r"""
import functools
from okgit.eval.judge import fused, tolerance
from okgit.eval.worker.tensors import chunks
from tests.eval import test_compare_oracle as oracle, test_fused_check as here
fused.BLOCK = 8
tolerance._fused = lambda t: True  # every pass as a GPU runs it: the finite pass, fingerprints, errors, magnitudes
tolerance.chunks = functools.partial(chunks, size=oracle.SIZE)
oracle.CASES = 200  # each a few launches under the interpreter: the first 200 of the oracle's draws
oracle.test_the_comparison_finds_what_its_former_implementation_found()
oracle.test_a_contraction_tolerance_at_its_bound_and_a_zero_atol_agree_with_the_oracle()
here.strided_output()
here.at_the_relative_bound()
for where in ("output", "native", "float64"):
    here.not_finite(where)
here.fingerprints()
print("fused pass: every case agrees")
"""


@pytest.mark.slow  # 200 checks under Triton's interpreter, in a process of their own
def test_the_fused_pass_finds_what_the_oracle_found():
    # this process's path first, as a PYTHONPATH would put it (one environment for every caller of
    # the warm process: a PYTHONPATH of its own would start another)
    on_path = "import json, sys\nsys.path[:0] = json.loads(sys.argv[1])\n"
    proc = run_script(on_path + INTERPRETED, [json.dumps([str(ROOT), *sys.path])], {**os.environ, "TRITON_INTERPRET": "1"},
                      timeout=600, cwd=ROOT)
    assert proc.returncode == 0 and "every case agrees" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas)
def test_compiled_for_hopper_the_bound_is_a_multiply_then_an_add_as_in_torch():
    """Compiled for sm_90 here, without a GPU, with the options the pass launches with: the bound
    |ref| * rtol + atol is no fused multiply-add (which rounds once, where torch's two kernels round
    twice: an element at the bound could land on the other side), and the division is IEEE's."""
    pytest.importorskip("triton.backends.nvidia")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    signature = {"o_ptr": "*fp32", "nat_ptr": "*fp32", "ref_ptr": "*fp64", "params_ptr": "*fp64", "counts_ptr": "*i64",
                 "errors_ptr": "*fp64", "n": "i64", "USE_RTOL": "constexpr", "BLOCK": "constexpr"}
    source = ASTSource(triton.jit(fused._finite_figures), signature, {"USE_RTOL": True, "BLOCK": fused.BLOCK})
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(fused.OPTIONS)).asm["ptx"]
    assert "mul.rn.f64" in ptx and "fma.rn.f64" not in ptx and "div.rn.f64" in ptx


def strided_output() -> None:
    """A column-major output: read where it lies, its outside elements counted and the first named."""
    from tests.eval.test_compare_oracle import LEAF, old_check_floats

    ref = torch.linspace(-3.0, 3.0, 12 * 7, dtype=torch.float64).reshape(12, 7)
    native = ref.float()
    out = native.t().contiguous().t()  # the same values, column-major
    out[[2, 9], [3, 5]] += torch.tensor([1e-3, -2e-3])
    tol = LeafTolerance(rtol=1e-4, atol=1e-5, ref_error=0.0, scale=3.0)
    got = check_leaf(out, LEAF, native, ref, tol, "seeds")
    assert got == old_check_floats(out, native, ref, tol, "seeds")
    assert not got.ok and got.message.startswith("2 of 84 elements outside tolerance") and "first at (2, 3)" in got.message
    counted = fused.finite_pass(out, native, ref, tol.rtol, tol.atol)
    assert counted is not None and counted[0] == 2 and abs(counted[1] - 2e-3) < 1e-6, counted


def at_the_relative_bound() -> None:
    """|o - ref| exactly |ref| * rtol + atol is inside; the next float32 up is outside."""
    ref = torch.full((19,), 1.0, dtype=torch.float64)
    out = ref.float()
    out[[4, 11]] = 1.0 + 2.0**-10 + 2.0**-20  # exactly at the bound below
    out[11] = torch.nextafter(out[11], torch.tensor(2.0))
    assert fused.finite_pass(out, ref.float(), ref, 2.0**-10, 2.0**-20) == (1, 2.0**-10 + 2.0**-20 + 2.0**-23,
                                                                            2.0**-10 + 2.0**-20 + 2.0**-23)


def fingerprints() -> None:
    """The kernel's word sums are the torch pass's, for words of 32 and of 8 bits."""
    gen = torch.Generator().manual_seed(3)
    for t in (torch.randn(1001, generator=gen), torch.randn(7, 3, generator=gen).half(),
              torch.randint(-2**31, 2**31 - 1, (77,), dtype=torch.int32, generator=gen),
              torch.randn(3, generator=gen).to(torch.bfloat16), torch.tensor([True, False, True]), torch.empty(0)):
        flat = t.reshape(-1)
        words = flat.view(torch.int32) if flat.numel() * flat.element_size() % 4 == 0 else flat.view(torch.uint8)
        w = words.to(torch.int64)  # the torch pass's sums, in wrapping int64
        positions = torch.arange(1, w.numel() + 1, dtype=torch.int64) * 2654435761
        assert fused.word_sums(words) == (int(w.sum()), int((w * positions).sum())), t


def not_finite(where: str) -> None:
    """An element not finite in the output or either reference: no figures (the masked pass decides)."""
    ref = torch.linspace(0.5, 1.5, 20, dtype=torch.float64)
    native, out = ref.float(), ref.float()
    {"output": out, "native": native, "float64": ref}[where][13] = float("inf")
    assert fused.finite_pass(out, native, ref, 1e-4, 1e-5) is None, where
    clean = torch.linspace(0.5, 1.5, 20)
    assert fused.finite_pass(clean, clean, clean.double(), 1e-4, 1e-5) == (0, 0.0, 0.0)


@pytest.mark.gpu
@pytest.mark.slow  # GB-sized tensors on the GPU
def test_on_a_gpu_the_kernels_count_and_digest_what_the_torch_passes_do():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    n = (1 << 28) + 3  # past a chunk of torch's pass, and a partial block
    gen = torch.Generator(device="cuda").manual_seed(7)
    ref = torch.rand(n, generator=gen, dtype=torch.float64, device="cuda") * 4 - 2
    native = ref.float()
    out = native + torch.randn(n, generator=gen, device="cuda") * 1e-7
    out[[5, n // 2, n - 1]] += torch.tensor([1e-3, -1e-2, 1e-4], device="cuda")
    for rtol, atol in ((1e-4, 2e-4), (0.0, 1e-6)):
        tol = LeafTolerance(rtol=rtol, atol=atol, ref_error=0.0, scale=2.0)
        seconds = {}
        counted = {}
        for name, count in (("fused", lambda: fused.finite_pass(out, native, ref, rtol, atol)),
                            ("torch", lambda: tolerance._finite_counts(out, native, ref, tol))):
            count()  # compiled, cached
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            counted[name] = count()
            seconds[name] = time.perf_counter() - t0
        assert counted["fused"] == counted["torch"], counted
        print(f"rtol {rtol}: {n} elements, fused {seconds['fused'] * 1e3:.1f} ms, torch {seconds['torch'] * 1e3:.1f} ms")
    from okgit.eval.judge.tolerance import fingerprint

    t0 = time.perf_counter()
    on_gpu = fingerprint(out)
    seconds_gpu = time.perf_counter() - t0
    assert on_gpu == fingerprint(out.cpu())  # the kernel's sums are the torch pass's
    print(f"fingerprint of {n} elements on the GPU: {seconds_gpu * 1e3:.1f} ms")
    native[7] = float("nan")  # not counted in either maximum
    host = native.cpu(), ref.cpu()
    assert tolerance.reference_error(native, ref) == tolerance.reference_error(*host) > 0
    assert tolerance.magnitude(native, ref) == tolerance.magnitude(*host) and tolerance.magnitude(native, None) == \
        tolerance.magnitude(host[0], None)
