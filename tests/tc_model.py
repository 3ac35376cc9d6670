"""Test helper: a Hopper tensor core's TF32 arithmetic in numpy, bit for bit as published, so that
the interpreter (which computes a TF32 `tl.dot` in fp32) can run a kernel the way an H100/H200 does.

The model (Khattak & Mikaitis, "Accurate Models of NVIDIA Tensor Cores", arXiv:2512.07004, H100
TF32 with fp32 accumulation; its MATLAB model H100TC.m): an operand is read from its fp32 register
with the low 13 mantissa bits ignored (truncated to TF32); each MMA step takes 8 products per
output, computed exactly, and the accumulator; all are aligned to the largest exponent with 2 extra
bits (3 where the largest product's significand is >= 2), the bits shifted out dropped; their sum
is truncated toward zero to fp32. The truncations are what makes a tensor core's long sum biased:
each step loses up to an ulp of the running sum.

Checked against the H200 (bench/results/2026-12-02-h200-kernels/gemm.log): summing the three
products of 3xTF32 into the running accumulator gives 4.5e-5 of max here at 4096^3 where the GPU
measured 4.7e-5, and 6.0e-5 at level-2 problem 63's linear where it measured 6.1e-5; Triton's
tf32x3 (a fresh sum per K block, added in fp32) 5.7e-7 here, 9.6e-7 and 7.7e-7 there (over a
whole output, not a slice).
"""

from __future__ import annotations

import numpy as np

PRODUCTS = 8  # per MMA step (k8 of a TF32 wgmma)
EXTRA_BITS = 2


def tf32_read(x: np.ndarray) -> np.ndarray:
    """What the tensor core reads of an fp32 value: its low 13 mantissa bits dropped."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return (x.view(np.int32) & np.int32(-8192)).view(np.float32)


def tf32_round(x: np.ndarray) -> np.ndarray:
    """The nearest TF32 value (ties away from zero, as cvt.rna.tf32.f32 and the GEMM's split kernel)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return ((x.view(np.int32) + 0x1000) & np.int32(-8192)).view(np.float32)


def _truncate(s: np.ndarray, bits: int = 24) -> np.ndarray:
    m, e = np.frexp(s)
    return np.ldexp(np.trunc(np.ldexp(m, bits)), e - bits)


def mma_step(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """c + a @ b for one step: c (R, C) fp32 values, a (R, 8) and b (8, C) TF32 values, all float64."""
    p = a[:, None, :] * b.T[None, :, :]  # (R, C, 8), exact in float64
    nonzero = p != 0
    ea = np.frexp(a)[1][:, None, :] - 1
    eb = np.frexp(b.T)[1][None, :, :] - 1
    pre = np.where(nonzero, ea + eb, -(1 << 20))  # the exponent of the product of significands in [1, 4)
    sig = np.abs(p) / np.ldexp(1.0, np.maximum(pre, -1000))
    top = pre.max(-1)
    top_sig = np.where(pre == top[..., None], sig, 0.0).max(-1)
    ec = np.where(c != 0, np.frexp(c)[1] - 1, -(1 << 20))
    extra = EXTRA_BITS + ((top_sig >= 2) & ((c == 0) | (top >= ec)) & nonzero.any(-1))
    quantum = np.ldexp(1.0, np.maximum((pre + (sig >= 2)).max(-1), ec) - 23 - extra)
    quantum = np.where(quantum > 0, quantum, 1.0)  # all terms zero
    total = (np.trunc(p / quantum[..., None]) * quantum[..., None]).sum(-1) + np.trunc(c / quantum) * quantum
    return np.where(total == 0, 0.0, _truncate(total))


def mma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A TF32 `tl.dot(a, b, c)` on the model: a (M, K), b (K, N), c (M, N) fp32; K in steps of 8."""
    a64, b64 = tf32_read(a).astype(np.float64), tf32_read(b).astype(np.float64)
    acc = np.asarray(c, dtype=np.float32).astype(np.float64)
    for k in range(0, a.shape[1], PRODUCTS):
        acc = mma_step(acc, a64[:, k:k + PRODUCTS], b64[k:k + PRODUCTS])
    return acc.astype(np.float32)


def patch_interpreter() -> None:
    """Make Triton's interpreter compute every TF32 `tl.dot` on the model (other precisions as before)."""
    from triton._C.libtriton import ir
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    plain = builder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if input_precision != ir.INPUT_PRECISION.TF32 or a.data.ndim != 2:
            return plain(self, a, b, d, input_precision, max_num_imprecise_acc)
        return interpreter.TensorHandle(mma(a.data, b.data, d.data), d.dtype.scalar)

    builder.create_dot = create_dot
