"""Rows: a reduction or normalisation over some dims, with what it feeds, per row
(rows.py.tmpl). Each program owns BLOCK_M rows at a time: a row that fits one tile is read once
and kept in registers, a longer one is streamed in chunks (ROW_WALK), once per fold pass
(streamed.fold_passes: one per reduction level, a softmax's sum folded in its max's pass).
Such a long row is read again by each later pass: those kernels can take a persistent grid
where the rows in flight fit a share of L2 (`_L2_SHARE`, rows_grid.py.tmpl), so that the later
passes read the row from L2, not DRAM. That path is a setting the autotune switches on: measured
on an H200 (bench/rows_l2.py, 2026-12-03), the plain grid with chunks of 8192 was the fastest on
L1/39 and within 1% of the fastest on L1/24 (a grid of 2 programs per SM, 3 stages), and no grid
sized by the L2 share beat it, so the plain grid is what ships."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from okgit.lower.fusion import Group
from okgit.lower.kernelcode import (
    KernelCode,
    Leaf,
    Scope,
    index_by_part,
    prod,
    store_outputs,
)
from okgit.lower.kinds.base import (
    Rendered,
    TemplateKind,
    first_leaf_device,
    output_names,
    template_kind,
)
from okgit.lower.streamed import Walk, fold_passes, stream_rows
from okgit.lower.template import fill, template

if TYPE_CHECKING:
    from okgit.lower.template import Traversable

TEMPLATE = template(__package__, "rows.py.tmpl")
ROW_WALK = Walk("BLOCK_N", "[BLOCK_M, BLOCK_N]", 1)  # rows along axis 0, a row's elements along axis 1
STREAM_WALK = Walk("BLOCK_N", "[BLOCK_M, BLOCK_N]", 1, stages="STAGES")  # a streamed row's chunks pipelined STAGES deep
# The percent of L2 the row blocks in flight may fill when the persistent grid is switched on (the
# autotune's other path; the rendered default is 0, the plain grid). 75: at 50 an H200's L2 would
# not hold one of L1/39's 256 KB row blocks per SM. On an H200 (bench/rows_l2.py, 2026-12-03) the
# share made no difference at 50-100%, and no grid it sized beat the plain one at chunks of 8192.
L2_SHARE = 75


def per_row(g: Group) -> bool:
    """A group that folds some dims and keeps others: one result per row."""
    return g.seed is None and bool(g.red) and not g.folds_all()


@template_kind(order=40)
class Rows(TemplateKind):
    name = "rows"
    helpers: ClassVar[dict[str, Traversable]] = {"_rows_grid": template(__package__, "rows_grid.py.tmpl")}

    def claims(self, g, low) -> bool:
        return per_row(g)

    def what(self, g) -> str:
        return f"one pass per row over dims {list(g.red)}"

    def tunables(self, NAME: str, n_red: int, elementwise: bool, passes: int = 1) -> dict[str, int]:
        # Defaults from bench/space.py on an H200 (docs/benchmarks.md): rows of 8192 fp32 want 16
        # warps; a row that only feeds per-row outputs streams in chunks (more loads in flight
        # than one register-resident tile), a row with elementwise outputs stays in registers.
        # A streamed row also gets its loads' pipeline depth and, read in several passes, the L2
        # share of its grid.
        settings = {
            f"{NAME}_TILE": 2048,
            f"{NAME}_BLOCK_N_MAX": 8192 if elementwise else 2048,
            f"{NAME}_CHUNK": 2048,
            f"{NAME}_NUM_WARPS": 16 if n_red >= 8192 else 8 if n_red >= 2048 else 4,
        }
        if _pow2(n_red) > settings[f"{NAME}_BLOCK_N_MAX"]:  # streamed, as the launcher decides it
            settings[f"{NAME}_STAGES"] = 1
            if passes > 1:
                settings[f"{NAME}_L2_SHARE"] = 0
                # chunks of 8192, H200: L1/39 (rows of 65535) 6863 us against 8485 at 2048, L1/24
                # 6163 against 6216 (a row read once was not measured: it keeps 2048)
                settings[f"{NAME}_CHUNK"] = 8192
        return settings

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        kept = [d for d in code.covered if d not in g.red]
        red = [d for d in code.covered if d in g.red]
        row_offset = code.radix("row", kept)
        col_offset = code.radix("col", red)
        # operands along the rows or the folded elements (a norm's weight), or across both (a group
        # norm's per-channel weight), read from the row's and the column's positions: the flat
        # offset's divisions by runtime sizes ran per element of the tile
        index_by_part(code, leaves.values(), (("row", set(kept), "row_mask"), ("col", set(red), "mask")), mixed="mask")
        root = Scope(None, "base", "row_mask")
        outs = output_names(g)
        # one pass: the whole row in registers
        code.reduce_tile = ROW_WALK.over
        one = Scope(root, "flat", "mask", row_leaves=root)
        store_outputs(code, g, one, one, outs)
        elementwise = any(code.placement(n) == "full" for n in g.outputs)
        NAME = name.upper()
        tunables = self.tunables(NAME, math.prod(g.shape[d] for d in g.red), elementwise, passes(code, g))
        # several passes: the row streamed in chunks; a kernel lowered one-pass keeps its plain
        # loops and grid (no settings that would not change it)
        multi = stream_rows(code, g, root, outs, STREAM_WALK if f"{NAME}_STAGES" in tunables else ROW_WALK)
        device = first_leaf_device(leaves)
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, device)
        programs = "n_blocks"
        if f"{NAME}_L2_SHARE" in tunables:  # a row read in several passes: as many blocks in flight as fit the L2 share
            low.helpers.add("_rows_grid")
            programs = (f"n_blocks if one_pass else _rows_programs(n_blocks, block_m * n_red * {row_bytes(code, leaves)}, {device}, "
                        f"{NAME}_NUM_WARPS, {NAME}_L2_SHARE)")
        src = fill(
            TEMPLATE, name=name, NAME=NAME, params=sig, row_offset=row_offset,
            prologue="\n".join(root.lines), col_offset=col_offset, one_pass="\n".join(one.lines),
            multi_pass="\n".join(multi.lines) or "pass", args=largs, doc=self.describe(g), prepare="\n".join(prep),
            n_rows=prod([code.dom[d] for d in kept]), n_red=prod([code.dom[d] for d in red]), call_args=call, returns=returns,
            programs=programs, stages=f"{NAME}_STAGES" if f"{NAME}_STAGES" in tunables else "1",
        )
        return Rendered(name, src, tunables, args, g.outputs, self.describe(g))


def passes(code: KernelCode, g: Group) -> int:
    """How many times a streamed row is read: once per fold pass, once more to write the
    elementwise outputs (streamed.stream_rows)."""
    return len(fold_passes(g)) + any(code.placement(n) == "full" for n in g.outputs)


def row_bytes(code: KernelCode, leaves: dict[int, Leaf]) -> int:
    """The bytes one row's pass reads: one element of each operand that spans the whole domain
    (per-row and per-column operands are small, and a per-column one stays in L2 anyway)."""
    full = [leaf for leaf in leaves.values() if {d for d in leaf.bmap if d is not None and code.dom[d] != "1"} == set(code.covered)]
    return sum(leaf.node.dtype.itemsize for leaf in full) or 4


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
