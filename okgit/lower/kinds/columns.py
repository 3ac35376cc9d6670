"""Columns: a row reduction whose folded dims are not the innermost, in the column layout
(columns.py.tmpl). Each program owns consecutive inner positions, contiguous in memory, and
walks the folded elements in chunks (COLUMN_WALK), so its loads coalesce where the row
layout's are a whole inner extent apart; where a column is read more than once that way (a
softmax: its max and sum, then its outputs) and a tile of whole columns fits RESIDENT_TILE
elements, the tile is read once and kept in registers instead (the row layout's one pass,
along axis 0). Optional: a second candidate beside the row one."""

from __future__ import annotations

import math

from okgit.lower.fusion import Group
from okgit.lower.graph import Unsupported
from okgit.lower.kernelcode import (
    KernelCode,
    Scope,
    index_by_part,
    prod,
    store_outputs,
    widest_block,
)
from okgit.lower.kinds.base import (
    Rendered,
    TemplateKind,
    first_leaf_device,
    output_names,
    template_kind,
)
from okgit.lower.kinds.rows import passes, per_row
from okgit.lower.streamed import Walk, stream_rows
from okgit.lower.template import fill, template

TEMPLATE = template(__package__, "columns.py.tmpl")
COLUMN_WALK = Walk("BLOCK_R", "[BLOCK_R, BLOCK_J]", 0)  # the contiguous inner axis along axis 1
# The most elements a tile of whole columns may hold to be read once, in registers (32 a thread on
# 4 warps); its inner side is at least 16 positions (64 bytes in fp32: two whole sectors;
# columns.py.tmpl's launcher), so columns of up to 256 elements.
# A group that reads its columns once anyway (per-row outputs of one pass) keeps streaming, as
# the row layout keeps such a row's chunks in flight: its setting is 0. The other path is the
# autotune's to try (sites.PATHS).
RESIDENT_TILE = 4096


def strided(g: Group) -> bool:
    """A row reduction whose folded dims are not the innermost: a row's elements lie a whole
    inner extent apart in memory, so the row layout's loads cannot coalesce."""
    return per_row(g) and any(s != 1 for s in g.shape[max(g.red) + 1 :])


@template_kind(order=10)
class Columns(TemplateKind):
    name = "columns"
    optional = True
    label = "column layout"
    before_plain = True  # coalesced loads: expected faster than the row layout, both are timed

    def changes(self, items: list) -> bool:
        return any(isinstance(it, Group) and strided(it) for it in items)

    def claims(self, g, low) -> bool:
        return strided(g)

    def what(self, g) -> str:
        return f"column layout: contiguous inner axis per program, folding dims {list(g.red)} in chunks"

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        return column_kernel(self, low, g, name, code, leaves, args, params, first_leaf_device(leaves))


def column_kernel(kind: TemplateKind, low, g: Group, name: str, code: KernelCode, leaves, args, params, device: str,
                  walk: Walk = COLUMN_WALK, layout: str = "") -> Rendered:
    """The column layout's kernel and launcher for g (columns.py.tmpl). `walk` and `layout` (lines
    after the row's base offset) let an operand be read in another layout: the channels-last
    convolution's output (conv_cl), at an offset its walk's head computes each step."""
    kept = [d for d in code.covered if d not in g.red]
    red = [d for d in code.covered if d in g.red]
    inner = [d for d in kept if d > red[-1]]  # the trailing kept dims: contiguous in memory
    outer = [d for d in kept if d < red[-1]]
    if not inner:
        raise Unsupported("the column layout needs kept dims after the folded ones")
    # row = outer * n_inner + j enumerates the kept dims row-major, as the outputs are laid out
    base = " + ".join(t for t in (code.radix("outer", outer), code.radix("j", inner)) if t != "0")
    # an operand varying along one part alone (a per-channel bias over the folded channels) is
    # read at that part's own position: no division of `flat` by runtime sizes per element,
    # which took 38% of the one-pass softmax tile's instructions in L2/91's kernel (sm_90 SASS).
    # Loads along the folded part keep the tile's mask: masked by `col` alone, their [BLOCK_R, 1]
    # shape led Triton to a layout whose folds over axis 0 shuffle across lanes (as many
    # instructions again)
    # (the outer position is a scalar in bounds: its loads take no mask)
    index_by_part(code, leaves.values(), (("outer", set(outer), ""), ("col", set(red), "mask"),
                                          ("j", set(inner), "row_mask")), mixed="mask")
    root = Scope(None, "base", "row_mask")
    # one pass: a tile of whole columns in registers
    code.reduce_tile = walk.over
    one = Scope(root, "flat", "mask", row_leaves=root)
    store_outputs(code, g, one, one, output_names(g))
    body = stream_rows(code, g, root, output_names(g), walk)
    prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, device)
    NAME = name.upper()
    src = fill(
        TEMPLATE, name=name, NAME=NAME, params=sig, base=base, layout=layout, prologue="\n".join(root.lines),
        col_offset=code.radix("col", red), col_head="\n".join(walk.head), one_pass="\n".join(one.lines),
        body="\n".join(body.lines), args=largs, doc=kind.describe(g), prepare="\n".join(prep),
        n_outer=prod([code.dom[d] for d in outer]), n_inner=prod([code.dom[d] for d in inner]),
        n_red=prod([code.dom[d] for d in red]), call_args=call, returns=returns,
    )
    n_outer, n_inner = math.prod(g.shape[d] for d in outer), math.prod(g.shape[d] for d in inner)
    tunables = {f"{NAME}_BLOCK_J": widest_block(n_outer, n_inner, 128, 16), f"{NAME}_BLOCK_R": 16,
                f"{NAME}_RESIDENT_TILE": RESIDENT_TILE if passes(code, g) > 1 else 0, f"{NAME}_NUM_WARPS": 4}
    return Rendered(name, src, tunables, args, g.outputs, kind.describe(g))
