"""Convolutions as implicit GEMMs in Triton (conv.py.tmpl), the epilogue on the accumulator.

A fp32 convolution (1D, 2D or 3D; strided, padded, dilated, grouped; transposed, output padding
included) seeds a group of its own with its elementwise epilogue, as a matmul seeds the GEMM
kind's: one kernel computes the output tile by tile, rows over the output positions (samples
and spatial sizes), columns over the output channels, K over the input channels times the
kernel taps, and runs the epilogue (bias, pointwise ops, parameters) on the accumulator before
the single write of the output, NCHW as the reference's. The launcher (conv_plan.py.tmpl,
`_ConvPlan`) copies the input once into a zero-padded channels-last tensor, so a row's K
elements are contiguous channels and no tap of any output reads outside it: the kernel masks
only the tile's edges. A transposed convolution gathers: its outputs split into phases (the
output position modulo the stride, per dim), each a launch whose taps are the kernel taps that
reach it, so no product with an inserted zero is ever computed.

A pointwise convolution (`pointwise`: a kernel of ones, stride 1, no padding, one group; any
dilation, irrelevant at 1) is a GEMM per sample, out[b] (Cout x P) = W (Cout x Cin) @ x[b]
(Cin x P) over its P positions, and runs as one (conv_pointwise.py.tmpl, `_ConvPointwise`): x
read where it is, a tile [BLOCK_M positions, BLOCK_K channels] loaded along its contiguous
positions, the output's tile stored along them; no copy, no table. With few channels such a
convolution is bound by memory, not by its products: at 64 input and 128 output channels
(KernelBench L1/87, x 4.3 GB, the output 8.6 GB) the padded copy's write and second read add
two thirds to the traffic, and the copying candidate took 6.7 ms on an H200 where cuDNN took
3.4. Its weight is packed per call as the others' is (padded, K contiguous, TF32-rounded for one
TF32 pass; x is rounded in the kernel, where it is read).

Memory access: K runs over a phase's taps, channels fastest, in one pipelined loop. The launcher
packs the weight per phase and group into a zero-padded K-major matrix (K contiguous, as Hopper's
TF32 products take an operand), read in unmasked 16-byte vectors, and gives the kernel a table of
where each run of K's channels reads the input: no index arithmetic in the loop. What depends on
shapes, strides and settings alone (the pads, the weight's columns to pack, the tables, on the
device) is built at a launcher's first call at a shape and kept per key (`_ConvLayout`): later
calls only copy the input and pack the weight, whose values may change between calls. A run is
gcd(channels per group, BLOCK_K) channels contiguous in the input (8 of 8, 16 of 48: several taps
a step where the channels are few, K dense), read in vectors; where that is below 4 but the
channels fill BLOCK_K chunks with a small tail, a chunk a run (CHUNKS, the tail masked); else,
where the launcher copies the input of a single group, the copy's channels are padded with zeros
to a multiple of 4 (3 channels read as runs of 4, 16-byte vectors, where single channels were a
gather of elements); else (a group of few channels, or an input read in place NCHW) single
channels. Where an output row rounds up to whole
tiles with little waste (ROWS), a tile holds positions of one row: contiguous in the output, so
its stores coalesce.

TMA (Hopper and later, `_tma_device`; `<NAME>_TMA` 0 keeps pointers): the packed weight is read
through a TMA descriptor over it as 2D [groups * NP, KP] wherever the device has TMA (K-major,
zero-padded, aligned: always a block of the view). The input is, where a tile's rows at a K step
are consecutive rows of the input's 2D view [positions, channels] (the copy, or x in place where
it is channels-last and aligned): ROWS, a step along w of one position (stride 1 along w, and
every transposed convolution's phases), and a K step one tap's block of BLOCK_K channels of one
group (a group's channels a multiple of BLOCK_K, or a single group's padded to 4 in the copy,
the block's tail read as TMA's zeros past the view, at most a quarter of K wasted; never another
group's channels, since 0 * NaN is NaN). The table then holds per K step the tap's row and the
block's channel; a tile's rows past its output row read other positions or zeros and are masked
at the store. Elsewhere (strides along w, groups of few channels, channels read in place NCHW,
tiles across rows) the input keeps its pointer gathers (`_conv_tma_input` decides, per layout).

Precision is a candidate of its own: cuDNN may run a fp32 convolution in TF32 under PyTorch's
default flags, and whether it did at a shape is what the reference's own error against float64
shows, which the evaluator's precision rule for contractions judges (docs/evaluation.md). The
kind `conv` multiplies in 3xTF32 (`<NAME>_PRECISION` "tf32x3", Triton splitting the operands in
the kernel: the fp32 reference's accuracy on tensor cores), `conv_tf32` in one TF32 pass with
operands rounded to nearest, as a TF32 cuDNN kernel (rounded where the plan writes them, the
input's copy and the packed weight, so the products read them from shared memory as they are;
in the kernel where x is read in place); both are offered on a GPU (optional, each
a candidate alone; the TF32 one not on a CPU, whose reference never runs in TF32) and the
evaluator keeps what it judges correct. The tile order is the GEMM
kind's (`_gemm_tile`).

Declined, with a note: other dtypes, padding given as a string, a grouped convolution with at
most grouped_conv's MAX_GROUP_CHANNELS input channels per group (depthwise ones among them: that
kind's direct kernel owns those), and a transposed one with fewer than
MIN_GROUP_CHANNELS input or output channels per group (too few for tensor-core tiles)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch

from okgit.lower.graph import Graph, Node, Unsupported
from okgit.lower.kernelcode import KernelCode, Leaf, Scope, store_outputs
from okgit.lower.kinds.base import Rendered, TemplateKind, output_names, template_kind
from okgit.lower.kinds.conv_fold import FOLDS, fold_code
from okgit.lower.kinds.gemm import Gemm
from okgit.lower.kinds.grouped_conv import MAX_GROUP_CHANNELS
from okgit.lower.template import fill, template

if TYPE_CHECKING:
    from okgit.lower.template import Traversable

TEMPLATE = template(__package__, "conv.py.tmpl")
POINTWISE = template(__package__, "conv_pointwise.py.tmpl")
CONV_OPS = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution"}
MIN_GROUP_CHANNELS = 4  # a transposed grouped convolution with fewer channels per group is declined
BLOCK_M = 128  # output positions a tile (the GEMM kind's measured start on Hopper)


@dataclass(frozen=True)
class ConvSpec:
    """One convolution call's operands and settings, per spatial dim."""

    x: Node
    w: Node
    bias: Node | None
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    transposed: bool
    output_padding: tuple[int, ...]

    def literal(self) -> str:
        """Its settings as the launcher's keyword arguments."""
        return (f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, groups={self.groups}, "
                f"transposed={self.transposed}, output_padding={self.output_padding}")


def conv_spec(n: Node) -> ConvSpec:
    """The convolution n as a ConvSpec; Unsupported says why this kind does not take it."""
    if n.kind != "extern" or not isinstance(n.target, torch._ops.OpOverload) or n.target._opname not in CONV_OPS:
        raise Unsupported(f"{n.op} is not a convolution")
    bound = _bind(n)
    x, w, bias = bound["input"], bound["weight"], bound.get("bias")
    if not isinstance(x, Node) or not isinstance(w, Node):
        raise Unsupported("a convolution of constants")
    if any(t.dtype != torch.float32 for t in (x, w, n)) or (isinstance(bias, Node) and bias.dtype != torch.float32):
        raise Unsupported(f"a convolution in {n.dtype} (the implicit-GEMM kernel is for float32)")
    nd = len(x.shape) - 2
    name = n.target._opname
    transposed = bool(bound.get("transposed", name.startswith("conv_transpose")))

    def per_dim(key: str, default: int) -> tuple[int, ...]:
        v = bound.get(key, default)
        if isinstance(v, str):
            raise Unsupported(f"padding given as {v!r}")
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        if not all(isinstance(e, int) for e in v):
            raise Unsupported(f"a convolution's {key} that is not a constant")
        return tuple(v * nd if len(v) == 1 else v)

    groups = bound.get("groups", 1)
    cin = x.shape[1]
    cout = w.shape[1] * groups if transposed else w.shape[0]
    cin_g, cout_g = cin // groups, cout // groups
    if groups > 1 and not transposed and cin_g <= MAX_GROUP_CHANNELS:  # grouped_conv's: one kind per convolution
        raise Unsupported(f"a grouped convolution with {cin_g} input channel{'s' * (cin_g > 1)} per group "
                          f"({'depthwise' if cin_g == 1 else 'few'}: the direct grouped kernel's, not implicit-GEMM tiles')")
    if groups > 1 and min(cin_g, cout_g) < MIN_GROUP_CHANNELS:
        raise Unsupported(f"a grouped convolution with {cin_g} input and {cout_g} output channels per group "
                          "(depthwise-like: a direct kernel's, not implicit-GEMM tiles')")
    return ConvSpec(x, w, bias if isinstance(bias, Node) else None, per_dim("stride", 1), per_dim("padding", 0),
                    per_dim("dilation", 1), groups, transposed, per_dim("output_padding", 0))


def pointwise(spec: ConvSpec) -> bool:
    """Whether the convolution is a GEMM per sample on its input as it is (_ConvPointwise): a
    kernel of ones (dilation then irrelevant), stride 1, no padding, one group, not transposed."""
    return (not spec.transposed and spec.groups == 1 and all(k == 1 for k in spec.w.shape[2:])
            and all(s == 1 for s in spec.stride) and not any(spec.padding))


def _bind(n: Node) -> dict:
    """The call's arguments by schema name (defaults left out)."""
    names = [a.name for a in n.target._schema.arguments]
    return {**dict(zip(names, n.args)), **n.kwargs}


@template_kind(order=15)
class Conv(TemplateKind):
    """The implicit-GEMM convolution in 3xTF32 (fp32 accuracy on tensor cores)."""

    name = "conv"
    optional = True
    label = "Triton convolution (3xTF32)"
    alone = True  # a candidate of its own, before the channels-last one that keeps cuDNN
    precision = "tf32x3"
    stands_in_for = "cuDNN's convolution"
    helpers: ClassVar[dict[str, Traversable]] = {"_gemm_plan": Gemm.helpers["_gemm_plan"],
                                                 "_conv_plan": template(__package__, "conv_plan.py.tmpl")}

    def declines(self, n: Node) -> str | None:
        """Why this kind does not take the call n; None where it does."""
        try:
            conv_spec(n)
        except Unsupported as e:
            return str(e)
        return None

    def seeds(self, n: Node) -> bool:
        return self.declines(n) is None

    def offered(self, graph: Graph) -> bool:
        return any(n.kind == "extern" and isinstance(n.target, torch._ops.OpOverload)
                   and n.target._opname in CONV_OPS for n in graph.nodes)

    def changes(self, items: list) -> bool:
        """Whether it takes a convolution; where it takes none, why not (a note)."""
        convs = [it for it in items if isinstance(it, Node) and it.kind == "extern" and isinstance(
            it.target, torch._ops.OpOverload) and it.target._opname in CONV_OPS]
        if any(getattr(it, "seed", None) is not None and self.seeds(it.seed) for it in items):
            return True
        reasons = [r for r in map(self.declines, convs) if r]
        raise Unsupported("; ".join(dict.fromkeys(reasons)) or "no convolution to take")

    def folds(self, seed: Node, r: Node, red: tuple[int, ...]) -> bool:
        """A sum, max or min over every spatial dim of the convolution's output (conv_fold.py), of
        a convolution of one phase (not transposed) run as the implicit GEMM, whose output rows
        take whole tiles with at most an eighth more positions at the op's own sizes: there the
        plan tiles by rows anyway (ROWS), and folding only saves the output's write and read."""
        spec = conv_spec(seed)
        width = seed.shape[-1]
        return (r.op in FOLDS and red == tuple(range(2, len(seed.shape))) and not spec.transposed
                and not pointwise(spec) and -(-width // BLOCK_M) * BLOCK_M * 8 <= width * 9)

    def claims(self, g, low) -> bool:
        return g.seed is not None and self.seeds(g.seed)

    def domain_source(self, g, d: int) -> str | None:
        return f"plan.shape[{d}]"

    def what(self, g) -> str:
        spec = conv_spec(g.seed)
        form = f"{'transposed ' if spec.transposed else ''}{len(spec.x.shape) - 2}D convolution"
        if pointwise(spec):
            return f"a Triton pointwise {form}, a GEMM per sample on x as it is ({self.precision}), with the epilogue"
        if g.red:
            return (f"a Triton implicit-GEMM {form} ({self.precision}) folding its epilogue over the spatial dims "
                    "in its tiles, finished per (sample, channel)")
        return f"a Triton implicit-GEMM {form} ({self.precision}) with the epilogue on its accumulator"

    def template_for(self, spec: ConvSpec) -> Traversable:
        """The kernel and launcher's template: a GEMM per sample for a pointwise convolution."""
        return POINTWISE if pointwise(spec) else TEMPLATE

    def tunables(self, NAME: str, spec: ConvSpec) -> dict[str, int | str]:
        cog = (spec.w.shape[1] * spec.groups if spec.transposed else spec.w.shape[0]) // spec.groups
        block_n = min(128, max(16, 1 << (cog - 1).bit_length()))
        # the GEMM kind's measured start on Hopper (128 x 128 x 32, 8 warps, 3 stages: two warp
        # groups share the fp32 accumulator) where the group has the output channels for it;
        # 4 warps (one warp group) hold a 128 x 64 tile or smaller
        tiles: dict[str, int | str] = {
            f"{NAME}_BLOCK_M": BLOCK_M, f"{NAME}_BLOCK_N": block_n, f"{NAME}_BLOCK_K": 32, f"{NAME}_GROUP_M": 8,
            f"{NAME}_NUM_WARPS": 8 if block_n >= 128 else 4, f"{NAME}_NUM_STAGES": 3,
            f"{NAME}_PRECISION": self.precision,
        }
        if pointwise(spec):  # x read in place, the weight through pointers: no copy, no TMA to choose
            return tiles
        return {
            **tiles,
            f"{NAME}_INPUT_COPY": 1,  # 0: an input that needs no padding read in its own layout
            f"{NAME}_TMA": 1,  # 0: pointer loads only (1: TMA where the device has it and _ConvLayout finds it exact)
        }

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        spec = conv_spec(g.seed)
        # operands that vary along the channels alone (per-channel parameters) are indexed by the
        # tile's channel column, the others through the output's flat index
        for leaf in leaves.values():
            dims = {d for d in leaf.bmap if d is not None and code.dom[d] != "1"}
            if dims and dims <= {1}:
                leaf.offset, leaf.mask = code.index_within(leaf.bmap, "co", {1}), "co_ok"
        code.seed_value = "acc"
        if spec.bias is not None:
            bias = Leaf(spec.bias, spec.bias, (1,), f"in{len(args)}", f"in{len(args)}_ptr", offset="co", mask="co_ok")
            leaves[id(spec.bias)] = bias
            g.smap[id(spec.bias)] = (1,)
            args.append(low.tensor(spec.bias))
            params.append(bias.ptr)
            code.seed_value = "acc + " + code.expr(spec.bias, Scope(None, "flat", "mask"))
        body = Scope(None, "flat", "mask")
        fold = fold_code(code, g) if g.red else None  # before the launcher's parts: they list what its code names
        if fold is None:
            store_outputs(code, g, body, None, output_names(g))
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, "x.device")
        NAME = name.upper()
        low.helpers.update(self.helpers)
        src = fill(
            self.template_for(spec), name=name, NAME=NAME, params=sig,
            body=fold.epilogue if fold else "\n".join(body.lines),
            args=", ".join(["x", "w"] + ([largs] if largs else [])), doc=self.describe(g), prepare="\n".join(prep),
            conv=spec.literal() + (", whole_rows=True" if fold else ""), call_args=call, returns=returns,
            finish_kernel=fold.finish_kernel(name, sig) if fold else "", fold_prepare=fold.prepare() if fold else "",
            part="part" if fold else "None", finish=fold.finish(name, call) if fold else "",
        )
        return Rendered(name, src, self.tunables(NAME, spec), [low.tensor(spec.x), low.tensor(spec.w)] + args,
                        g.outputs, self.describe(g))


@template_kind(order=16)
class ConvTF32(Conv):
    """The implicit-GEMM convolution in one TF32 pass, operands rounded to nearest: right where
    the reference's own convolution ran in TF32 (cuDNN's choice under the pinned flags)."""

    name = "conv_tf32"
    label = "Triton convolution (TF32)"
    precision = "tf32"
    devices = ("cuda",)  # a CPU's reference never runs in TF32: there it cannot be right

    def changes(self, items: list) -> bool:
        """Only where the 3xTF32 candidate takes a convolution (that one's note says why not)."""
        return any(getattr(it, "seed", None) is not None and self.seeds(it.seed) for it in items)

