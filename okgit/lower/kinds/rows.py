"""Rows: a reduction or normalisation over some dims, with what it feeds, per row
(rows.py.tmpl). Each program owns BLOCK_M rows: a row that fits one tile is read once and
kept in registers, a longer one is streamed in chunks (ROW_WALK), once per reduction level."""

from __future__ import annotations

import math

from okgit.lower.fusion import Group
from okgit.lower.kernelcode import (
    KernelCode,
    Scope,
    Walk,
    prod,
    store_outputs,
    stream_rows,
)
from okgit.lower.kinds.base import (
    Rendered,
    TemplateKind,
    first_leaf_device,
    output_names,
    template_kind,
)
from okgit.lower.template import fill, template

TEMPLATE = template(__package__, "rows.py.tmpl")
ROW_WALK = Walk("BLOCK_N", "[BLOCK_M, BLOCK_N]", 1)  # rows along axis 0, a row's elements along axis 1


def per_row(g: Group) -> bool:
    """A group that folds some dims and keeps others: one result per row."""
    return g.seed is None and bool(g.red) and not g.folds_all()


@template_kind(order=40)
class Rows(TemplateKind):
    name = "rows"

    def claims(self, g, low) -> bool:
        return per_row(g)

    def what(self, g) -> str:
        return f"one pass per row over dims {list(g.red)}"

    def tunables(self, NAME: str, n_red: int, elementwise: bool) -> dict[str, int]:
        # Defaults from bench/space.py on an H200 (docs/benchmarks.md): rows of 8192 fp32 want 16
        # warps; a row that only feeds per-row outputs streams in chunks (more loads in flight
        # than one register-resident tile), a row with elementwise outputs stays in registers.
        return {
            f"{NAME}_TILE": 2048,
            f"{NAME}_BLOCK_N_MAX": 8192 if elementwise else 2048,
            f"{NAME}_CHUNK": 2048,
            f"{NAME}_NUM_WARPS": 16 if n_red >= 8192 else 8 if n_red >= 2048 else 4,
        }

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        kept = [d for d in code.covered if d not in g.red]
        red = [d for d in code.covered if d in g.red]
        row_offset = code.radix("row", kept)
        col_offset = code.radix("col", red)
        root = Scope(None, "base", "row_mask")
        outs = output_names(g)
        # one pass: the whole row in registers
        code.reduce_tile = ROW_WALK.over
        one = Scope(root, "flat", "mask", row_leaves=root)
        store_outputs(code, g, one, one, outs)
        # several passes: the row streamed in chunks
        multi = stream_rows(code, g, root, outs, ROW_WALK)
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, first_leaf_device(leaves))
        src = fill(
            TEMPLATE, name=name, NAME=name.upper(), params=sig, row_offset=row_offset,
            prologue="\n".join(root.lines), col_offset=col_offset, one_pass="\n".join(one.lines),
            multi_pass="\n".join(multi.lines) or "pass", args=largs, doc=self.describe(g), prepare="\n".join(prep),
            n_rows=prod([code.dom[d] for d in kept]), n_red=prod([code.dom[d] for d in red]), call_args=call, returns=returns,
        )
        elementwise = any(code.placement(n) == "full" for n in g.outputs)
        tunables = self.tunables(name.upper(), math.prod(g.shape[d] for d in g.red), elementwise)
        return Rendered(name, src, tunables, args, g.outputs, self.describe(g))
