"""Direct convolutions for few input channels (conv_direct.py.tmpl): a 1D, 2D or 3D
convolution of one group (strided, padded, dilated; not transposed) with at most
grouped_conv's MAX_GROUP_CHANNELS input channels, its bias and elementwise epilogue fused, in
fp32 on the CUDA cores. Optional and `alone`, before the implicit-GEMM candidates of the conv
kinds, which take the same calls: the search times them all.

Why: with 3 or 8 input channels the product is short (K = channels x taps, 27 to 216 on the
development set) and the output, written once, is the largest tensor: such a problem is bound
by memory and by how well each input read is reused, not by tensor-core products. cuDNN ran
these slowly on an H200 (L1/54, a 3D convolution of 3 channels, 1845 us where its output's
write takes a few hundred), torch.compile runs cuDNN plus an epilogue kernel that reads the
output back, and okgit's implicit GEMM gathered its K of a few dozen through tables at 3-12
TFLOP/s (docs/benchmarks.md, the third session of 2026-12-03). Here a tile of BLOCK_M output
positions of one sample (flattened, so the output's stores are contiguous per channel) by
BLOCK_N output channels takes, per input channel and tap, one vector of inputs and one row of
the packed weight (the same for every program: cached) and adds their outer product: each input
read serves BLOCK_N products, no copy of the input, no table. The result is fp32's, more
accurate than the TF32 that cuDNN may use."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from okgit.lower.graph import Node, Unsupported
from okgit.lower.kinds.base import template_kind
from okgit.lower.kinds.conv import Conv, ConvSpec, conv_spec
from okgit.lower.kinds.grouped_conv import MAX_GROUP_CHANNELS
from okgit.lower.template import template

if TYPE_CHECKING:
    from okgit.lower.template import Traversable

TEMPLATE = template(__package__, "conv_direct.py.tmpl")
# The tile's elements (BLOCK_M x BLOCK_N): 32 a thread on 4 warps. Compiled for sm_90 (ptxas),
# 256 x 16 with a 3x3x3 window took 139 registers and 128 x 32 with a mish epilogue 168, no
# spills; at 64 a thread, 512 x 16 spilled in the taps' loop and 128 x 64 in the mish epilogue.
# Triton stages each tap's input vector through shared memory (a store, two barriers, 128-bit
# reads): per tap a thread issues 32 multiply-adds against about 20 other instructions. The same
# kernel as FMA dots over K blocks (tl.dot, "ieee") spent about 110 other instructions per K
# element on the gather's addresses and the dot's operands (docs/benchmarks.md).
TILE_ELEMENTS = 4096
MAX_BLOCK_N = 32  # more output channels: more programs over the same inputs, run together (L2)


def direct(spec: ConvSpec) -> str | None:
    """Why the direct kernel does not take the convolution; None where it does."""
    cin = spec.x.shape[1]
    if spec.transposed:
        return "a transposed convolution (the implicit GEMM's phases)"
    if spec.groups > 1:
        return "a grouped convolution (grouped_conv's or the implicit GEMM's)"
    if cin > MAX_GROUP_CHANNELS:
        return f"{cin} input channels (more than {MAX_GROUP_CHANNELS}: the implicit GEMM's tensor-core tiles)"
    return None


@template_kind(order=14)
class ConvDirect(Conv):
    """The direct convolution in fp32 for few input channels."""

    name = "conv_direct"
    label = "direct convolution (fp32)"
    precision = "ieee"
    helpers: ClassVar[dict[str, Traversable]] = {**Conv.helpers,
                                                 "_conv_direct": template(__package__, "conv_direct_plan.py.tmpl")}

    def seeds(self, n: Node) -> bool:
        try:
            return direct(conv_spec(n)) is None
        except Unsupported:
            return False

    def changes(self, items: list) -> bool:
        """Whether it takes a convolution; where it takes none, why not (a note)."""
        if any(getattr(it, "seed", None) is not None and self.seeds(it.seed) for it in items):
            return True
        reasons = []
        for n in items:
            if isinstance(n, Node) and n.kind == "extern" and Conv.seeds(self, n):
                reasons.append(direct(conv_spec(n)) or "")
        raise Unsupported("; ".join(dict.fromkeys(r for r in reasons if r)) or "no convolution with few input channels")

    def what(self, g) -> str:
        spec = conv_spec(g.seed)
        return (f"a direct {len(spec.x.shape) - 2}D convolution of {spec.x.shape[1]} input channels in fp32 on the CUDA "
                "cores, its epilogue on the accumulator")

    def template_for(self, spec: ConvSpec) -> Traversable:
        return TEMPLATE

    def tunables(self, NAME: str, spec: ConvSpec) -> dict[str, int | str]:
        block_n = min(MAX_BLOCK_N, max(16, 1 << (spec.w.shape[0] - 1).bit_length()))
        return {f"{NAME}_BLOCK_M": TILE_ELEMENTS // block_n, f"{NAME}_BLOCK_N": block_n, f"{NAME}_NUM_WARPS": 4,
                f"{NAME}_NUM_STAGES": 1}
