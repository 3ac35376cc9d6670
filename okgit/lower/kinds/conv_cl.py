"""Channels-last convolutions: a 2D or 3D convolution, transposed or not, whose output only one
pointwise, spatial-reduction or channel-reduction kernel reads runs on channels-last operands
(channels_last, channels_last_3d: cuDNN's layout of choice, torch.compile's too), and that
kernel (its epilogue) reads the channels-last output and writes NCHW (NCDHW) contiguous.
Optional, a candidate of its own after the NCHW ones (the search times both): the input and
weight copied channels-last by a 2D-tiled Triton copy (conv_cl_to_channels_last.py.tmpl), the
conv bias folded into the epilogue's load. A pointwise epilogue takes 2D tiles
(conv_cl_pointwise.py.tmpl); a reduction over the trailing spatial dims (all of them: a
per-(sample, channel) norm; the last: a layer norm over W) consecutive channels of one sample
and kept position (conv_cl_rows.py.tmpl, CL_WALK); a reduction over the channels (a softmax
over dim 1) the column layout (columns.py.tmpl, CL_COLUMN_WALK): a column's channels, a whole
inner extent apart in NCHW, are contiguous here; a group norm, which reads the output through the
split of its channels into groups, one program per (sample, group) walking its positions, a
lane per position and channel of the group (conv_cl_groups.py.tmpl, GROUP_WALK)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from okgit.lower.fusion import Group
from okgit.lower.graph import Graph, Node, Unsupported, reshapes
from okgit.lower.kernelcode import (
    KernelCode,
    Leaf,
    Scope,
    index_by_part,
    store_outputs,
    widest_block,
)
from okgit.lower.kinds.base import Rendered, TemplateKind, output_names, template_kind
from okgit.lower.kinds.columns import column_kernel
from okgit.lower.kinds.pointwise import elementwise
from okgit.lower.kinds.rows import per_row
from okgit.lower.streamed import Walk, fold_rows, stream_rows
from okgit.lower.template import fill, template

if TYPE_CHECKING:
    from okgit.lower.template import Traversable

POINTWISE_TEMPLATE = template(__package__, "conv_cl_pointwise.py.tmpl")
ROWS_TEMPLATE = template(__package__, "conv_cl_rows.py.tmpl")
GROUPS_TEMPLATE = template(__package__, "conv_cl_groups.py.tmpl")
CL_WALK = Walk("BLOCK_R", "[BLOCK_R, BLOCK_C]", 0, ("nhwc = nhwc_base + col * n_chan",))  # channels along axis 1
CL_COLUMN_WALK = Walk("BLOCK_R", "[BLOCK_R, BLOCK_J]", 0, ("nhwc = nhwc_base + col",))  # channels along axis 0
# The most channels a group the groups epilogue takes: a chunk holds a lane per channel of the group
# at one position at least.
GROUP_CHANNELS = 1024
# BLOCK_R positions a chunk, a lane per position and channel of the group (the channels innermost,
# as in memory); the row's element in NCHW: its channel's positions first
GROUP_WALK = Walk("BLOCK_R", "[BLOCK_R * BLOCK_C]", 0, ("nhwc = nhwc_base + pos * n_chan",), col="chan * n_pos + pos",
                  pos="start + lane // BLOCK_C", extent="n_pos")
CL_CONV_OPS = ("aten.conv2d.default", "aten.conv3d.default", "aten.conv_transpose2d.input",
               "aten.conv_transpose3d.input")


def channels_last_convs(graph: Graph, items: list) -> dict[int, Node | None]:
    """The 2D and 3D convolutions (transposed or not) the channels-last candidate runs on
    channels-last operands, each with the bias it folds into its epilogue (None: the bias, if
    any, stays in the call).

    A convolution qualifies when its output is not returned and every reader of it is one
    group over the output's own shape that reads it elementwise: a pointwise one, a row
    reduction over the trailing spatial dims (a per-(sample, channel) normalisation over all
    of them, a layer norm over the last) or over the channels (a softmax over dim 1); or one
    group reading it through the split of its channels into groups that folds each (sample,
    group) with sums alone and writes only elementwise outputs (a group norm: `_grouped`). That
    kernel takes the channels-last output and writes NCHW. A bias of one value per output
    channel is folded into that kernel's load, so the convolution runs without one."""
    users = graph.users()
    outs = {id(o) for o in graph.outputs}
    groups = [it for it in items if isinstance(it, Group)]
    out: dict[int, Node | None] = {}
    for n in items:
        if not isinstance(n, Node) or n.op not in CL_CONV_OPS or len(n.shape) not in (4, 5) or not n.dtype.is_floating_point:
            continue
        if id(n) in outs:
            continue
        split = users[id(n)][0] if len(users[id(n)]) == 1 and reshapes(users[id(n)][0]) else None
        if split is not None:
            if id(split) in outs or not _grouped(split, n, users, groups):
                continue
        elif not _elementwise_reader(n, users, groups):
            continue
        bias = n.args[2] if len(n.args) > 2 else n.kwargs.get("bias")
        fold = isinstance(bias, Node) and tuple(bias.shape) == (n.shape[1],) and bias.dtype == n.dtype
        out[id(n)] = bias if fold else None
    return out


def _only_reader(x: Node, users: dict, groups: list[Group]) -> Group | None:
    """The one group reading x, over x's own shape, from memory, where it computes every other
    reader of x too."""
    readers = [g for g in groups if g.has(x)]
    if len(readers) != 1:
        return None
    g = readers[0]
    identity = tuple(i if s != 1 else None for i, s in enumerate(x.shape))
    if g.shape != x.shape or x not in g.leaves or g.smap[id(x)] != identity or not all(g.computes(u) for u in users[id(x)]):
        return None
    return g


def _elementwise_reader(n: Node, users: dict, groups: list[Group]) -> bool:
    """Whether a pointwise, per-(sample, channel) or over-the-channels group is n's one reader."""
    g = _only_reader(n, users, groups)
    return g is not None and (elementwise(g) or (per_row(g) and (trailing(g.red, n) or over_channels(g.red, n))))


def _grouped(split: Node, n: Node, users: dict, groups: list[Group]) -> bool:
    """Whether `split` divides n's channels into groups, (N, G, C/G, *spatial), and its one reader
    folds each (sample, group)'s channels and positions with sums alone (a mean, a variance),
    writing only elementwise outputs: a group norm, the groups epilogue."""
    shape = split.shape
    if len(shape) != len(n.shape) + 1 or shape[0] != n.shape[0] or shape[1] * shape[2] != n.shape[1] or shape[3:] != n.shape[2:]:
        return False
    if shape[2] > GROUP_CHANNELS:
        return False
    g = _only_reader(split, users, groups)
    return (g is not None and g.red == tuple(range(2, len(shape))) and per_row(g)
            and all(r.op == "sum" for r in g.nodes if r.kind == "reduce") and all(o.shape == shape for o in g.outputs))


def _conv_read(leaf: Leaf) -> Node:
    """The tensor a leaf reads: a convolution's output itself, or through its group split."""
    return leaf.node.args[0] if reshapes(leaf.node) else leaf.node


def spatial(n: Node) -> tuple[int, ...]:
    """The spatial dims of a convolution's output (2, 3 and, in 3D, 4)."""
    return tuple(range(2, len(n.shape)))


def trailing(red: tuple[int, ...], n: Node) -> bool:
    """Whether a fold is the convolution output's last spatial dims, one or more (in
    channels-last a row's elements then lie a channel count apart, in one run per row)."""
    dims = spatial(n)
    return any(red == dims[i:] for i in range(len(dims)))


def over_channels(red: tuple[int, ...], n: Node) -> bool:
    """Whether a fold is the convolution output's channels alone (more than one of them)."""
    return red == (1,) and n.shape[1] > 1


def _epilogue(g: Group) -> str:
    """What the epilogue group is, in its kernel's name and origin tag: elementwise, per
    (sample, channel) row, per position folding the channels (the column layout's), or per
    (sample, group) reading the output through its group split."""
    if elementwise(g):
        return "pointwise"
    if any(reshapes(n) and n.args[0].op in CL_CONV_OPS for n in g.leaves):
        return "groups"
    return "columns" if g.red == (1,) else "rows"


@template_kind(order=20)
class ConvChannelsLast(TemplateKind):
    """The epilogues of channels-last convolutions; its state per candidate is
    `channels_last_convs`."""

    name = "conv_cl"
    optional = True
    label = "channels-last convolution"
    alone = True  # after the NCHW candidates: both are timed
    claims_first = True  # before the column layout's claim on a softmax over its channels
    helpers: ClassVar[dict[str, Traversable]] = {"_to_channels_last": template(__package__, "conv_cl_to_channels_last.py.tmpl")}

    def offered(self, graph: Graph) -> bool:
        return any(n.op in CL_CONV_OPS for n in graph.nodes)

    def candidate_state(self, low) -> dict[int, Node | None]:
        convs = channels_last_convs(low.graph, low.items)
        if not convs:
            raise Unsupported("no 2D or 3D convolution whose output only a pointwise or spatial-reduction kernel reads")
        return convs

    def claims(self, g: Group, low) -> bool:
        return any(id(n) in low.state[self] or reshapes(n) and id(n.args[0]) in low.state[self] for n in g.leaves)

    def kernel_name(self, g: Group, k: int) -> str:
        return f"fused_{_epilogue(g)}_cl_{k}"

    def origin(self, g: Group) -> str:
        return _epilogue(g)

    def extern_origin(self, n: Node, low) -> str | None:
        """vendor_conv_cl for a convolution run channels-last, vendor_conv for any other."""
        if id(n) in low.state.get(self, {}):
            return "vendor_conv_cl"
        return "vendor_conv" if "conv" in n.op else None

    def extern_args(self, low, n: Node, args: list[str], kwargs: dict[str, str]) -> None:
        """Input and weight channels-last (a tiled Triton copy); a folded bias is left out."""
        convs = low.state[self]
        if id(n) not in convs:
            return
        low.helpers.add("_to_channels_last")
        args[:2] = [f"_to_channels_last({a})" for a in args[:2]]
        if convs[id(n)] is not None:
            if len(args) > 2:
                args[2] = "None"
            else:
                kwargs["bias"] = "None"

    def what(self, g: Group) -> str:
        if elementwise(g):
            return "one elementwise pass over 2D tiles, the convolution read channels-last, written NCHW"
        if _epilogue(g) == "columns":
            return "column layout over the channels, the convolution read channels-last (contiguous channels), written NCHW"
        if _epilogue(g) == "groups":
            return ("a program per (sample, group) for its statistics, then 2D tiles normalising, the convolution read "
                    "channels-last, written NCHW")
        return f"one pass per row over dims {list(g.red)}, the convolution read channels-last, written NCHW"

    def tunables(self, NAME: str, g: Group) -> dict[str, int]:
        if elementwise(g):
            return {f"{NAME}_YBLOCK": 64, f"{NAME}_XBLOCK": 64, f"{NAME}_NUM_WARPS": 4}
        if _epilogue(g) == "groups":  # the statistics' lanes a chunk as the rows kind's streamed chunks; the
            # normalisation's tiles as the pointwise epilogue's (neither measured here)
            return {f"{NAME}_LANES": 2048, f"{NAME}_NUM_WARPS": 8, f"{NAME}_YBLOCK": 64, f"{NAME}_XBLOCK": 64,
                    f"{NAME}_NORM_WARPS": 4}
        # channels per program: as many as still fill the GPU with (sample, kept position, channel block) programs
        outer = g.shape[0] * math.prod(g.shape[d] for d in range(2, len(g.shape)) if d not in g.red)
        return {f"{NAME}_BLOCK_C": widest_block(outer, g.shape[1], 64, 8), f"{NAME}_BLOCK_R": 64, f"{NAME}_NUM_WARPS": 4}

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        conv = next(leaf for leaf in leaves.values() if leaf.node is leaf.base and id(_conv_read(leaf)) in low.state[self])
        epilogue = _epilogue(g)
        # the channels innermost; split into groups, a group's channels after the positions
        conv.offset = "nhwc"
        conv.order = (0, *range(3, len(g.shape)), 1, 2) if epilogue == "groups" else (0, *spatial(conv.base), 1)
        self._fold_bias(low, code, conv, leaves, args, params, epilogue)
        lowered = {"pointwise": self._pointwise, "rows": self._rows, "columns": self._columns, "groups": self._groups}[epilogue]
        return lowered(low, g, name, code, leaves, args, params, conv)

    def _fold_bias(self, low, code: KernelCode, conv: Leaf, leaves: dict, args: list[str], params: list[str],
                   epilogue: str) -> None:
        """The bias a channels-last convolution runs without, added as its output is loaded: by
        the channel of a pointwise tile's (sample, channel) row, by a reduction's own channels
        (`c`), or in the column layout by the folded index (the channels alone)."""
        bias = low.state[self][id(_conv_read(conv))]
        if bias is None:
            return
        arg = f"in{len(args)}"
        offset, mask = {"pointwise": (code.index_within((1,), "row", {0, 1}), "row_mask"), "rows": ("c", "row_mask"),
                        "columns": ("col", "mask"), "groups": ("gchan", "row_mask")}[epilogue]
        conv.plus = Leaf(bias, bias, (1,), arg, f"{arg}_ptr", offset=offset, mask=mask)
        leaves[("conv_bias", id(bias))] = conv.plus  # a key no node's id matches
        args.append(low.tensor(bias))
        params.append(conv.plus.ptr)

    def _pointwise(self, low, g, name, code: KernelCode, leaves, args, params, conv: Leaf) -> Rendered:
        """An elementwise epilogue of a channels-last convolution (conv_cl_pointwise.py.tmpl): 2D
        tiles of (sample, channel) rows by spatial columns (the spatial dims flattened), the
        convolution read channels-last, the outputs written NCHW contiguous."""
        # operands that vary along rows only (per-channel parameters) or columns only are indexed
        # by that coordinate alone: the index math runs on a [YBLOCK, 1] or [1, XBLOCK] vector
        index_by_part(code, leaves.values(), (("row", {0, 1}, "row_mask"), ("col", set(spatial(conv.base)), "col_mask")))
        body = Scope(None, "flat", "mask")
        store_outputs(code, g, body, None, output_names(g))
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, f"{conv.arg}.device")
        shape = [f"{conv.arg}.shape[{d}]" for d in range(len(conv.base.shape))]
        NAME = name.upper()
        src = fill(
            POINTWISE_TEMPLATE, name=name, NAME=NAME, params=sig, body="\n".join(body.lines), args=largs,
            doc=self.describe(g), prepare="\n".join(prep), n_rows=f"{shape[0]} * {shape[1]}",
            n_cols=" * ".join(shape[2:]), n_chan=shape[1], call_args=call, returns=returns,
        )
        return Rendered(name, src, self.tunables(NAME, g), args, g.outputs, self.describe(g))

    def _rows(self, low, g, name, code: KernelCode, leaves, args, params, conv: Leaf) -> Rendered:
        """A reduction over the trailing spatial dims of a channels-last convolution's output
        (conv_cl_rows.py.tmpl): each program owns consecutive channels of one sample and kept
        position (the spatial dims before the folded ones), read NHWC in [BLOCK_R, BLOCK_C]
        tiles; elementwise outputs are written NCHW contiguous."""
        root = Scope(None, "base", "row_mask")
        body = stream_rows(code, g, root, output_names(g), CL_WALK)
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, f"{conv.arg}.device")
        NAME = name.upper()
        src = fill(
            ROWS_TEMPLATE, name=name, NAME=NAME, params=sig, prologue="\n".join(root.lines),
            body="\n".join(body.lines), args=largs, doc=self.describe(g), prepare="\n".join(prep),
            n_batch=f"{conv.arg}.shape[0]", n_chan=f"{conv.arg}.shape[1]",
            n_kept=" * ".join([f"{conv.arg}.shape[{d}]" for d in spatial(conv.base) if d not in g.red] or ["1"]),
            n_red=" * ".join(f"{conv.arg}.shape[{d}]" for d in g.red),
            call_args=call, returns=returns,
        )
        return Rendered(name, src, self.tunables(NAME, g), args, g.outputs, self.describe(g))

    def _groups(self, low, g, name, code: KernelCode, leaves, args, params, conv: Leaf) -> Rendered:
        """A group norm over a channels-last convolution's output, read through its group split
        (conv_cl_groups.py.tmpl), in two kernels. The statistics: one program per (sample, group)
        row walking BLOCK_R positions a chunk, a lane per position and channel, read NHWC
        (GROUP_WALK), each reduction's per-row value stored. The normalisation: 2D tiles of
        (sample, channel) rows by positions, as the pointwise epilogue's, reading the NHWC
        output, the stored values of their rows and the per-channel weights at the tile's rows,
        and writing the elementwise outputs NCHW contiguous. Read twice and written once, in
        whole lines: one program per row both reading and writing it wrote NCHW a few
        channels at a time (on an H100, L2/19 13437 us against torch.compile's 8120)."""
        space = set(range(3, len(g.shape)))
        laid = {id(leaf): (leaf.offset, leaf.mask) for leaf in leaves.values()}
        index_by_part(code, leaves.values(), (("row", {0, 1}, "row_mask"), ("chan", {2}, "row_mask"), ("pos", space, "mask")),
                      mixed="mask")
        stats = Scope(None, "base", "row_mask")
        folded = fold_rows(code, g, stats, GROUP_WALK)
        reduces = [n for n in g.nodes if n.kind == "reduce"]
        folded.lines += [f"tl.store(stats_ptr + row * {len(reduces)} + {k} + tl.arange(0, 1), {code.value(r, folded)})"
                         for k, r in enumerate(reduces)]
        stats.lines += folded.lines
        for leaf in leaves.values():  # the normalisation's tile has parts of its own
            leaf.offset, leaf.mask = laid[id(leaf)]
        index_by_part(code, leaves.values(), (("row", {0, 1, 2}, "row_mask"), ("col", space, "col_mask")), mixed="mask")
        per_row = Scope(None, "flat", "row_mask")
        for k, r in enumerate(reduces):
            code.emit(per_row, f"tl.load(stats_ptr + stat_row * {len(reduces)} + {k}, mask=row_mask, other=0.0)", r)
        tile = Scope(per_row, "flat", "mask", row=per_row)
        store_outputs(code, g, tile, per_row, output_names(g), only="full")
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, f"{conv.arg}.device")
        NAME = name.upper()
        src = fill(
            GROUPS_TEMPLATE, name=name, NAME=NAME, params=sig, stats="\n".join(stats.lines),
            norm="\n".join(per_row.lines + tile.lines), args=largs, doc=self.describe(g), prepare="\n".join(prep),
            n_batch=f"{conv.arg}.shape[0]", n_groups=f"{conv.arg}.shape[1]", n_group_chan=f"{conv.arg}.shape[2]",
            n_pos=" * ".join(f"{conv.arg}.shape[{d}]" for d in sorted(space)), n_stats=str(len(reduces)),
            device=f"{conv.arg}.device", call_args=call, returns=returns,
        )
        return Rendered(name, src, self.tunables(NAME, g), args, g.outputs, self.describe(g))

    def _columns(self, low, g, name, code: KernelCode, leaves, args, params, conv: Leaf) -> Rendered:
        """A reduction over the channels of a channels-last convolution's output, in the column
        layout (columns.py.tmpl): a program owns consecutive positions of one sample and its
        tile's channels are contiguous there (CL_COLUMN_WALK: nhwc = position * C + channel);
        the outputs are written NCHW contiguous, along the positions."""
        return column_kernel(self, low, g, name, code, leaves, args, params, f"{conv.arg}.device", CL_COLUMN_WALK,
                             "nhwc_base = outer * (n_inner * n_red) + j * n_red")
