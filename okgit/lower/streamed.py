"""A group's rows streamed chunk by chunk (the row layout's multi-pass branch, and the whole
kernel of the column layout and of the channels-last reduction): a `Walk` is the loop a layout
steps through a row's folded elements with; `stream_rows` reads the row once per pass of
`fold_passes` and once more to store the elementwise outputs.

A softmax's denominator, the sum of exp(e - max), is folded in its max's pass with the online
rescaling (each lane's partial sum rescaled as its running max grows, the lanes combined at the
row's max): its row is read twice, not three times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from okgit.lower.fusion import Group
from okgit.lower.graph import Node
from okgit.lower.kernelcode import NEUTRAL, OPS, KernelCode, Scope, indent, store_outputs


@dataclass(frozen=True)
class Walk:
    """How a streamed kernel steps through its rows' folded elements: chunks of `block` lanes
    along axis `axis` of a `tile`, one fp32 accumulator per tile lane, folded over `axis`
    once after the loop.

    With `col`, the chunks step through positions up to `extent`, `block` of them a chunk, its
    lanes at positions `pos` (an expression of `start`), and the row's folded element a lane
    holds is `col` (a group's channels-last channels at each position: several lanes a position)."""

    block: str
    tile: str
    axis: int
    head: tuple[str, ...] = ()  # more lines at the top of each step (offsets of other layouts)
    stages: str = ""  # a constexpr: the loop's loads pipelined that deep (Triton pipelines a loop with no dot only when asked)
    col: str = ""  # the folded element a lane holds, where the chunks step through positions
    pos: str = ""  # ... and the positions of a chunk's lanes
    extent: str = "n_red"  # how far the chunks step

    @property
    def over(self) -> str:
        return f"axis={self.axis}, keep_dims=True"

    def loop(self, col_offset: str, body: list[str]) -> list[str]:
        lanes = "[None, :]" if self.axis == 1 else "[:, None]"
        if self.col:
            head = [f"pos = {self.pos}", f"mask = row_mask & (pos < {self.extent})", f"col = {self.col}"]
        else:
            head = [f"col = start + tl.arange(0, {self.block}){lanes}", f"mask = row_mask & (col < {self.extent})"]
        head += [f"flat = base + {col_offset}", *self.head]
        steps = (f"tl.range(0, {self.extent}, {self.block}, num_stages={self.stages})" if self.stages
                 else f"range(0, {self.extent}, {self.block})")
        return [f"for start in {steps}:"] + indent(head + body)


def fold_passes(g: Group) -> list[list[Node]]:
    """The reductions each streamed pass over a row folds, in order: one pass per reduction level
    (statistics that depend on earlier ones), except that a sum of exp(e - max) folds in its max's
    pass (Group.online_max) and a sum of (e - mean)^2 in its mean's (Group.online_mean): a softmax
    and a normalisation read their row twice, not three times."""
    reduces = [n for n in g.nodes if n.kind == "reduce"]

    def level(r: Node) -> int:
        top, mean = g.online_max(r), welford(g, r)
        return g.level((top[0] if top else mean[0] if mean else r).args[0])

    levels = sorted({level(r) for r in reduces})
    return [[r for r in reduces if level(r) == lv] for lv in levels]


# Rows at least this long fold a variance in its mean's pass: a row the rows kind streams at all
# (its whole-row tile holds 8192 elements at most), whose second read comes from memory. A shorter
# row (a layer norm over 64 positions, a column of 128 channels) is read again from the cache,
# where Welford's division per element and its merge cost more than they save (not measured).
WELFORD_MIN = 8192


def welford(g: Group, r: Node) -> tuple[Node, Node] | None:
    """Group.online_mean for rows of at least WELFORD_MIN elements, else None (two passes)."""
    return g.online_mean(r) if math.prod(g.shape[d] for d in g.red) >= WELFORD_MIN else None


def stream_rows(code: KernelCode, g: Group, root: Scope, outs: list[str], walk: Walk) -> Scope:
    """The rows streamed chunk by chunk: once per pass of `fold_passes`, then once to store the
    elementwise outputs. The row layout's multi-pass branch, and the whole kernel of the column
    layout and of the channels-last reduction."""
    multi = fold_rows(code, g, root, walk)
    col_offset = code.radix("col", [d for d in code.covered if d in g.red])
    if any(code.placement(n) == "full" for n in g.outputs):
        loop = Scope(multi, "flat", "mask", row=multi)
        store_outputs(code, g, loop, multi, outs, only="full")
        multi.lines += walk.loop(col_offset, loop.lines)
    store_outputs(code, g, multi, multi, outs, only="row")
    return multi


def fold_rows(code: KernelCode, g: Group, root: Scope, walk: Walk) -> Scope:
    """The row scope after every pass of `fold_passes`: each of g's reductions bound to its
    per-row value there (what stream_rows stores its outputs from; the channels-last group norm
    stores the values themselves for a kernel of its own to read, okgit.lower.kinds.conv_cl)."""
    code.reduce_tile = None
    col_offset = code.radix("col", [d for d in code.covered if d in g.red])
    multi = Scope(root, "base", "row_mask")
    for reduces in fold_passes(g):
        _fold_pass(code, multi, reduces, col_offset, walk)
    return multi


def _fold_pass(code: KernelCode, outer: Scope, reduces: list[Node], col_offset: str, walk: Walk) -> None:
    """One streamed pass over the row folding `reduces` into per-row values."""
    loop = Scope(outer, "flat", "mask", row=outer)
    shape = walk.tile
    accs = {id(r): f"acc{code.count + i}" for i, r in enumerate(reduces)}
    code.count += len(reduces)
    online = {id(r): found for r in reduces if (found := code.g.online_max(r)) is not None}  # sum -> (its max, exp or exp2)
    means = {id(r): pair for r in reduces if (pair := welford(code.g, r)) is not None}  # sum -> (sum of e, mean)
    inits, updates = [], []
    for r in reduces:
        acc = accs[id(r)]
        if id(r) in online:  # a sum of exp(e - max): its lanes are updated with the max's (below)
            inits.append(f"{acc} = tl.zeros({shape}, dtype=tl.float32)")
            continue
        if id(r) in means:  # a sum of (e - mean)^2: each lane's count, running mean and squares
            e = code.value(means[id(r)][0].args[0], loop)
            inits += [f"{acc}{k} = tl.zeros({shape}, dtype=tl.float32)" for k in ("", "_m", "_n")]
            updates += _welford_update(acc, code.as_float(means[id(r)][0].args[0], e))
            continue
        v = code.as_float(r.args[0], code.value(r.args[0], loop))
        w = f"tl.where(mask, {v}, {NEUTRAL[r.op]})"
        if r.op == "sum":
            inits.append(f"{acc} = tl.zeros({shape}, dtype=tl.float32)")
            updates.append(f"{acc} += {w}")
        elif r.op in ("max", "min"):  # a NaN sticks to its lane (torch's max is NaN then)
            inits.append(f"{acc} = tl.full({shape}, {NEUTRAL[r.op]}, tl.float32)")
            sums = [(accs[id(s)], online[id(s)][1]) for s in reduces if id(s) in online and online[id(s)][0] is r]
            if sums:
                updates += _online_update(acc, w, sums)
            else:
                updates.append(f"{acc} = tl.{r.op}imum({acc}, {w}, propagate_nan=tl.PropagateNan.ALL)")
        else:  # argmax / argmin: best value and its first column, per lane; a NaN beats all but an earlier NaN
            better = ">" if r.op == "argmax" else "<"
            inits += [f"{acc} = tl.full({shape}, {NEUTRAL[r.op]}, tl.float32)", f"{acc}_i = tl.zeros({shape}, dtype=tl.int32)"]
            updates += [
                f"{acc}_w = {w}",
                f"{acc}_b = ({acc}_w {better} {acc}) | (({acc}_w != {acc}_w) & ({acc} == {acc}))",
                f"{acc}_i = tl.where({acc}_b, col, {acc}_i)",
                f"{acc} = tl.where({acc}_b, {acc}_w, {acc})",
            ]
    outer.lines += inits
    outer.lines += walk.loop(col_offset, loop.lines + updates)
    for r in reduces:  # a max before the sums rescaled to it, a sum before the squares about its mean (g.nodes order)
        acc = accs[id(r)]
        if id(r) in means:
            # the lanes' (mean, squares, count) merged in a fixed order (Chan et al.); the squares
            # are about the lanes' common mean, moved to the row's mean m as sum (e - m)^2 is:
            # + n (mean - m)^2, zero but for rounding
            code.helpers.add("_welford")
            merged = code.emit(outer, f"tl.reduce(({acc}_m, {acc}, {acc}_n), {walk.over}, "
                                      f"combine_fn=_welford_combine)")
            m = code.value(means[id(r)][1], outer)
            code.emit(outer, f"{merged}[1] + {merged}[2] * ({merged}[0] - {m}) * ({merged}[0] - {m})", r)
        elif id(r) in online:
            top, f = online[id(r)]
            # the lanes' sums, each relative to its lane's max, rescaled to the row's max M: a lane
            # that saw only -inf (or masked elements) holds 0 * exp(-inf - M) = 0; where M is -inf
            # (a row of -inf) the sum is 0 * NaN = NaN, and where M is NaN or +inf NaN too, as the
            # sum of exp(e - M) is in torch
            lanes = f"{acc} * {OPS[f].format(f'{accs[id(top)]} - {code.value(top, outer)}')}"
            code.emit(outer, code.fold(outer, "sum", lanes, "", walk.over), r)
        else:
            code.emit(outer, code.fold(outer, r.op, acc, f"{acc}_i", walk.over), r)


def _welford_update(acc: str, e: str) -> list[str]:
    """Welford's update of each lane's count `acc_n`, mean `acc_m` and sum of squared deviations
    `acc` by the chunk's values `e`, a masked element leaving its lane as it was. A NaN or an inf
    makes the lane's squares NaN, as the sum of (e - mean)^2 is in torch."""
    return [
        f"{acc}_e = tl.where(mask, {e}, 0.0)",
        f"{acc}_n = {acc}_n + tl.where(mask, 1.0, 0.0)",
        f"{acc}_d = {acc}_e - {acc}_m",
        f"{acc}_m = {acc}_m + tl.where(mask, {acc}_d / tl.maximum({acc}_n, 1.0), 0.0)",
        f"{acc} = {acc} + tl.where(mask, {acc}_d * ({acc}_e - {acc}_m), 0.0)",
    ]


def _online_update(acc: str, w: str, sums: list[tuple[str, str]]) -> list[str]:
    """A running max's lanes `acc` taking the chunk's values `w`, with the lanes' sums of f(x - max)
    (`sums`: accumulator, f) rescaled to the new max. A lane whose max is still -inf (all -inf or
    masked so far) shifts by 0: its terms are exp(-inf) = 0, not exp(-inf - -inf) = NaN. A NaN or
    +inf makes the lane's sum NaN (exp(NaN), exp(inf - inf)), and it stays NaN."""
    return [
        f"{acc}_w = {w}",
        f"{acc}_n = tl.maximum({acc}, {acc}_w, propagate_nan=tl.PropagateNan.ALL)",
        f"{acc}_t = tl.where({acc}_n == {NEUTRAL['max']}, 0.0, {acc}_n)",
        *[f"{s} = {s} * {OPS[f].format(f'{acc} - {acc}_t')} + {OPS[f].format(f'{acc}_w - {acc}_t')}" for s, f in sums],
        f"{acc} = {acc}_n",
    ]
