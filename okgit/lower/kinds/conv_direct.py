"""Direct convolutions with a short K (conv_direct.py.tmpl): a 1D, 2D or 3D convolution of one
group and at most MAX_CIN input channels (or a transposed one whose phases have a K of at most
ONE_STEP_K), strided, padded, dilated, transposed too (output padding included), whose K (its
input channels times the taps that reach an output) is at most MAX_K, its bias and elementwise
epilogue fused, in fp32 on the CUDA cores. Optional and `alone`, before the implicit-GEMM
candidates of the conv kinds, which take the same calls: the search times them all.

Why: with 3 input channels (an image's colours: L1/54, L2/23, 27, 79, 83) K is a few dozen to a
couple of hundred and the output, written once, is the largest tensor, while the implicit GEMM
pads each tap's 3 channels to 4 and tiles K for tensor-core products that such a K barely feeds:
on 2026-12-03 it ran L2/27, L2/79 and L1/54 at 4, 3 and 12 TFLOP/s, and torch.compile runs cuDNN
plus an epilogue kernel that reads the output back. Here a tile of BLOCK_M output positions of
one sample (flattened: a regular convolution's stores are contiguous per channel) by BLOCK_N
output channels takes, per input channel and tap, one vector of inputs and one row of the packed
weight (the same for every program: cached) and adds their outer product: each input read
serves BLOCK_N products, no copy of the input, no table. A transposed convolution runs one
phase of its output per program_id(1) (the output position modulo the stride), whose taps are
the same for all its positions: no product with an inserted zero. The result is fp32's, more
accurate than the TF32 that cuDNN may use."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from okgit.lower.graph import Node
from okgit.lower.kinds.base import template_kind
from okgit.lower.kinds.conv import Conv, ConvSpec, conv_spec, pointwise
from okgit.lower.template import template

if TYPE_CHECKING:
    from okgit.lower.template import Traversable

TEMPLATE = template(__package__, "conv_direct.py.tmpl")
# A tile is BLOCK_M = 128 output positions by BLOCK_N output channels (16 or 32, as many as the
# convolution has). On an H100 (2026-12-06, docs/benchmarks.md) 128 x 16 beat 256 x 16 on both
# development problems with 16 output channels (L2/27 4958 against 6018 us, L2/79 419 against
# 440) and 512 rows lost on all four measured. Compiled for sm_90 (ptxas), 128 x 32 with a mish
# epilogue took 168 registers, no spills. Triton stages each tap's input vector through shared
# memory (a store, two barriers, 128-bit reads): per tap a thread issues its multiply-adds
# against about 20 other instructions; ncu on L1/54 (H100) found the kernel bound there, L1/TEX
# at 95% of its throughput and short-scoreboard stalls half of a warp's cycles. The same kernel as
# FMA dots over K blocks (tl.dot, "ieee") spent about 110 other instructions per K element on the
# gather's addresses and the dot's operands (docs/benchmarks.md).
BLOCK_M = 128
# A transposed convolution's taps carry their phase's arithmetic and masks: with a 3x3x3 window of
# stride 2, 128 x 16 took 96 registers, 256 x 16 255 and 128 x 32 241. Fewer than 128 positions a
# tile are never the default: at 64 x 32 Triton laid the tile out otherwise, 919 loads and a spill.
TRANSPOSED_BLOCK_N = 16
# K, multiply-adds per output element, up to which the direct kernel is offered: 3 input channels
# of a 4x4x4 window (192), 4 of a 3x3x3 one (108)
MAX_K = 256
# Input channels up to which it is offered. Measured on an H100 at the development set's sizes
# (2026-12-05, docs/benchmarks.md): with 3 input channels it beat the implicit GEMM in 3xTF32 by
# 1.2-1.9x (L2/79, 27, 23, L1/54: the GEMM's K chunk of one tap is 3 channels padded to 4); with
# 8 to 64, regular or transposed, the GEMM in 3xTF32 beat it by 1.2-3.1x (L2/87, 67, 71, 7, 15,
# 3, 91, L1/63), and never lost to it by more than 0.3% (L1/81): an evaluation spent for nothing.
MAX_CIN = 4
# ... or a transposed convolution whose phases have a K of at most one of the implicit GEMM's K
# blocks: there each phase's product is a single step, and what decides is how the phases' strided
# stores meet (the direct kernel runs a tile's phases next to each other; the implicit GEMM
# launches one phase after another). On an H100, L1/81 (stride 5, K 32): 1652 us against the implicit
# GEMM's 3438-3585 (2026-12-06; 3.5 ms either way before the phases went together); cuDNN in
# channels-last took 1140, the floor there.
ONE_STEP_K = 32
MAX_BLOCK_N = 32  # more output channels: more programs over the same inputs, run together (L2)


def reaching_taps(spec: ConvSpec) -> int:
    """The most taps of the window that reach one output: all of them; for a transposed
    convolution those of one phase, one tap in s / gcd(s, d) along each dim."""
    window = spec.w.shape[2:]
    if not spec.transposed:
        return math.prod(window)
    return math.prod(-(-k // (s // math.gcd(s, d))) for k, s, d in zip(window, spec.stride, spec.dilation, strict=True))


def direct(spec: ConvSpec) -> str | None:
    """Why the direct kernel does not take the convolution; None where it does."""
    if spec.groups > 1:
        return "a grouped convolution (grouped_conv's or the implicit GEMM's)"
    if pointwise(spec):
        return "a pointwise convolution (the conv kind's GEMM per sample, on tensor cores)"
    cin, taps = spec.x.shape[1], reaching_taps(spec)
    if cin > MAX_CIN and not (spec.transposed and cin * taps <= ONE_STEP_K):
        return (f"{cin} input channels (more than {MAX_CIN}: the implicit GEMM's tensor-core tiles were faster "
                "with 8 or more)")
    if cin * taps > MAX_K:
        return (f"a K of {cin * taps} ({cin} input channels x {taps} taps; more than {MAX_K}: the implicit GEMM's "
                "tensor-core tiles)")
    return None


def out_channels(spec: ConvSpec) -> int:
    return spec.w.shape[1] if spec.transposed else spec.w.shape[0]


@template_kind(order=14)
class ConvDirect(Conv):
    """The direct convolution in fp32 for a short K."""

    name = "conv_direct"
    label = "direct convolution (fp32)"
    precision = "ieee"
    helpers: ClassVar[dict[str, Traversable]] = {**Conv.helpers,
                                                 "_conv_direct": template(__package__, "conv_direct_plan.py.tmpl")}

    def declines(self, n: Node) -> str | None:
        return super().declines(n) or direct(conv_spec(n))

    def folds(self, seed: Node, r: Node, red: tuple[int, ...]) -> bool:
        return False  # its tiles are not the implicit GEMM's: the fold (conv_fold.py) is that kernel's

    def what(self, g) -> str:
        spec = conv_spec(g.seed)
        form = f"{'transposed ' if spec.transposed else ''}{len(spec.x.shape) - 2}D convolution"
        return (f"a direct {form} of K {spec.x.shape[1] * reaching_taps(spec)} in fp32 on the CUDA cores, its epilogue "
                "on the accumulator")

    def template_for(self, spec: ConvSpec) -> Traversable:
        return TEMPLATE

    def tunables(self, NAME: str, spec: ConvSpec) -> dict[str, int | str]:
        block_n = min(MAX_BLOCK_N, max(16, 1 << (out_channels(spec) - 1).bit_length()))
        block_n = TRANSPOSED_BLOCK_N if spec.transposed else block_n
        return {f"{NAME}_BLOCK_M": BLOCK_M, f"{NAME}_BLOCK_N": block_n, f"{NAME}_NUM_WARPS": 4,
                f"{NAME}_NUM_STAGES": 1}
