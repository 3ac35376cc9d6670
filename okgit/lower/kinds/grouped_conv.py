"""Grouped convolutions: a 1D, 2D or 3D convolution with few input channels per group (a
depthwise one has one) as one direct Triton kernel (grouped_conv.py.tmpl), its bias and
elementwise epilogue fused: any stride, padding, dilation, channel multiplier. Optional and
before the candidate without it, which keeps PyTorch's convolution (cuDNN) with the epilogue
as its own kernel; the search times both.

Recognition: a `convN d` call (numeric padding) with groups > 1 and at most
MAX_GROUP_CHANNELS input channels per group seeds a group of its own; its value inside the
kernel is the window's dot plus the bias, and the domain's sizes are the batch, the weight's
output channels and the output sizes `_window` gives (kinds/window.py). With more channels
per group a convolution is a GEMM per group, not this kernel's business; a transposed one
(`conv_transpose*`) is not covered and stays PyTorch's.

Against Inductor: torch.compile leaves a convolution to the vendor call (cuDNN), in a layout of
its choosing; on an H200 its depthwise 2D convolution ran at 0.16x eager (issue 31). Here
each output is a short dot read straight from memory, the index arithmetic per tile row and
column, the weights once per tile row, bounds checked only in tiles at the input's edges.

Where the outermost window dim (D, else H) has stride and dilation 1, the kernel rolls along
it (ROLL_CHUNK outputs per program; 0 keeps the direct path, so the search can time both): a
program walks the input planes along that dim once and adds each into the outputs it feeds,
which keeps K accumulators per output in registers and cuts the loads per output by the
window's size along that dim (the direct path's 27 per output of a 3x3x3 window read most
planes three times over, reuse left to the caches: 0.11 of the copy floor on an H200).
"""

from __future__ import annotations

from typing import Any

from okgit.lower.graph import Node
from okgit.lower.kernelcode import KernelCode, Leaf, Scope
from okgit.lower.kinds.base import Rendered, template_kind
from okgit.lower.kinds.window import (
    WindowKind,
    input_parts,
    prologue_note,
    spatial_input,
)
from okgit.lower.template import template
from okgit.lower.translate import schema_args

TEMPLATE = template(__package__, "grouped_conv.py.tmpl")
CONV_OPS = {"conv1d": 1, "conv2d": 2, "conv3d": 3}  # ATen call (numeric padding) -> spatial dims
# Input channels per group up to which a direct kernel stays bound by memory (8 x a 3x3 window
# = 72 multiply-adds per output element read or written: about an H200's fp32 rate at its
# copy bandwidth); a guess from that ratio, to be measured (bench/pool_conv.py)
MAX_GROUP_CHANNELS = 8
# The rolled path's settings (the autotune phase varies both: *CHUNK*, *BLOCK*).
# ROLL_CHUNK: outputs per program along the rolled window dim (0: the direct path). A program
# reads RUN + K - 1 input planes for RUN outputs: at 16 and a window of 3, 1.125 plane reads
# per output instead of 3, and still ceil(OD / 16) programs along the dim (OD = 32: 2, OH =
# 254: 16) besides the tiles. ROLL_BLOCK: outputs per program tile, per plane of the walk. Each
# tap costs a thread its share of the tile in input loads plus one weight load per slot (4 for
# a window of 3, the same address across the program), so a larger share amortises the
# weights: 512 outputs on the default 4 warps make 4 input loads a thread against those 4 (the
# direct path's 4 x 64 tile: 2 against 2, for every tap along the rolled dim too). Not more:
# compiled for sm_90 (ptxas), a 3x3x3 window's kernel takes 144 registers at 4 outputs a
# thread and 255, spilling, at 8 (every tap's loads in flight, each with its 64-bit address).
ROLL_CHUNK = 16
ROLL_BLOCK = 512


@template_kind(order=4)
class GroupedConv(WindowKind):
    name = "grouped_conv"
    label = "direct grouped convolution"
    label_off = "vendor grouped convolution"
    stands_in_for = "cuDNN's convolution"
    OPS = CONV_OPS
    template = TEMPLATE
    leading = ["xshape[0]", "w.shape[0]"]

    def takes(self, n: Node) -> bool:
        """A batched, floating convN d call (numeric padding) with groups > 1 and few input
        channels per group."""
        t = n.target
        if t._overloadname != "default" or not spatial_input(n, CONV_OPS[t._opname], batched_only=True):
            return False
        a = schema_args(t, n.args, n.kwargs)
        w = a["weight"]
        return isinstance(w, Node) and a.get("groups", 1) > 1 and w.shape[1] <= MAX_GROUP_CHANNELS

    def what(self, g) -> str:
        a = schema_args(g.seed.target, g.seed.args, g.seed.kwargs)
        which = "depthwise" if a["weight"].shape[1] == 1 else "grouped"
        return f"a direct {which} {CONV_OPS[g.seed.target._opname]}D convolution{prologue_note(g)}, its bias and epilogue fused"


    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        conv = g.seed
        a = schema_args(conv.target, conv.args, conv.kwargs)
        read = input_parts(low, g, code, leaves, args, params, a["input"], self.dims(g), "0.0", "xv")
        code.seed_value = "conv"
        bias = a.get("bias")
        if isinstance(bias, Node):  # one value per output channel (domain dim 1), read per row, added to the dot
            arg = f"in{len(args)}"
            rows = set(range(len(g.shape) - 1))
            leaf = Leaf(bias, bias, (1,), arg, f"{arg}_ptr", offset=code.index_within((1,), "orow", rows), mask="row_ok")
            leaves[id(bias)] = leaf
            g.smap[id(bias)] = (1,)
            args.append(low.tensor(bias))
            params.append(leaf.ptr)
            code.seed_value = "conv + " + code.load(leaf, Scope(None, "flat", "mask"))
        window = {k: a.get(k, default) for k, default in (("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1))}
        return self.render(low, g, name, code, leaves, args, params, read, {"w": low.tensor(a["weight"])}, window)

    def tunables(self, NAME: str, window: dict[str, Any]) -> dict[str, int]:
        """The tiles, and the rolled path's settings."""
        return {**super().tunables(NAME, window), f"{NAME}_ROLL_CHUNK": ROLL_CHUNK, f"{NAME}_ROLL_BLOCK": ROLL_BLOCK}
