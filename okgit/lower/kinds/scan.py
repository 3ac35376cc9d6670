"""Scan: cumulative sums and products along one dim, reversed too, with the elementwise work
before and after them fused (scan.py.tmpl). Each program walks its rows' scanned dim in
chunks: a chunk is scanned in registers (tl.cumsum / tl.cumprod, an associative scan) and
combined with the carry of the chunks before it, so the input is read once and the output
written once.

Layout: where the scanned dim is the innermost one that is not 1, a tile's fast axis runs
along it (contiguous); otherwise along the rows, whose consecutive positions are then the
contiguous inner ones, and the scan runs down the tile's other axis."""

from __future__ import annotations

from okgit.lower.fusion import Group
from okgit.lower.kernelcode import KernelCode, Scope, prod, store_outputs
from okgit.lower.kinds.base import (
    Rendered,
    TemplateKind,
    first_leaf_device,
    output_names,
    template_kind,
)
from okgit.lower.template import fill, template

TEMPLATE = template(__package__, "scan.py.tmpl")
NEUTRAL = {"sum": "0.0", "prod": "1.0"}
COMBINE = {"sum": "{0} + {1}", "prod": "{0} * {1}"}


@template_kind(order=45)
class Scan(TemplateKind):
    name = "scan"

    def claims(self, g, low) -> bool:
        return g.seed is None and bool(g.scan)

    def what(self, g) -> str:
        scans = [n for n in g.nodes if n.kind == "scan"]
        names = ", ".join(dict.fromkeys(f"cumulative {n.op}" for n in scans))
        way = " from the end" if scans[0].kwargs.get("reverse") else ""
        return f"a chunked parallel scan ({names}) along dim {g.scan[0]}{way}"

    def tunables(self, NAME: str, along_rows: bool) -> dict[str, int]:
        # the tile's extent along its contiguous axis is capped by the first setting, the other
        # axis fills TILE elements
        fast = {f"{NAME}_BLOCK_ROWS": 64} if along_rows else {f"{NAME}_BLOCK_SCAN": 1024}
        return {**fast, f"{NAME}_TILE": 2048, f"{NAME}_NUM_WARPS": 4}

    def lower(self, low, g: Group, name, code: KernelCode, leaves, args, params) -> Rendered:
        (dim,) = g.scan
        kept = [d for d in code.covered if d != dim]
        along_rows = any(d > dim for d in kept)  # contiguous inner dims: rows along the fast axis
        axis = 0 if along_rows else 1  # the tile axis the scan runs down
        rows, steps = ("[None, :]", "[:, None]") if along_rows else ("[:, None]", "[None, :]")
        scans = [n for n in g.nodes if n.kind == "scan"]
        reverse = bool(scans[0].kwargs.get("reverse"))  # one direction per group (fusion)
        carry_shape = "[1, BLOCK_M]" if along_rows else "[BLOCK_M, 1]"
        carries = [f"carry{k} = tl.full({carry_shape}, {NEUTRAL[n.op]}, tl.float32)" for k, n in enumerate(scans)]
        row_offset, col_offset = code.radix("row", kept), code.radix("col", [dim])  # sizes first: the launcher passes them
        body = Scope(None, "flat", "mask")
        for k, n in enumerate(scans):
            x = n.args[0]
            v = code.as_float(x, code.value(x, body))
            lanes = code.emit(body, f"tl.where(mask, {v}, {NEUTRAL[n.op]})")
            part = code.emit(body, f"tl.cum{n.op}({lanes}, {axis})")  # Triton's own combine: the interpreter's fast path too
            val = code.emit(body, COMBINE[n.op].format(part, f"carry{k}"), n)
            body.lines.append(f"carry{k} = tl.sum(tl.where(last, {val}, 0.0), {axis}, keep_dims=True)")
        store_outputs(code, g, body, None, output_names(g))
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, first_leaf_device(leaves))
        NAME = name.upper()
        if along_rows:
            blocks = [f"block_m = min({NAME}_BLOCK_ROWS, triton.next_power_of_2(n_rows))",
                      f"block_n = min(triton.next_power_of_2(n_scan), max(1, {NAME}_TILE // block_m))"]
            layout = "rows along the tile's fast axis (the contiguous inner dims), the scan down axis 0."
        else:
            blocks = [f"block_n = min({NAME}_BLOCK_SCAN, triton.next_power_of_2(n_scan))",
                      f"block_m = min(triton.next_power_of_2(n_rows), max(1, {NAME}_TILE // block_n))"]
            layout = "the scanned (contiguous) dim along the tile's fast axis 1."
        src = fill(
            TEMPLATE, name=name, NAME=NAME, params=sig, layout=layout, rows=rows,
            row_offset=row_offset, carries="\n".join(carries), steps=steps,
            col="n_scan - 1 - step" if reverse else "step", col_offset=col_offset,
            body="\n".join(body.lines), args=largs, doc=self.describe(g), prepare="\n".join(prep),
            n_rows=prod([code.dom[d] for d in kept]), n_scan=code.dom[dim], blocks="\n".join(blocks),
            call_args=call, returns=returns,
        )
        tunables = self.tunables(NAME, along_rows)
        return Rendered(name, src, tunables, args, g.outputs, self.describe(g))
