"""Attention as GEMMs: an fp32 scaled dot-product attention call written out as
`softmax(scale * (Q @ K^T) [mask | causal]) @ V`, so that its two products run on the
split-precision Triton GEMM (kinds/gemm.py, fp32 accuracy on tensor cores) with the scale, the
mask and the causal fill in the first one's epilogue and whatever follows the call in the
second's, and the softmax is one rows kernel between them; causal, the GEMMs skip the scores'
tiles above the diagonal and P's zeros past it (kinds/gemm.py's TRIANGLES). Optional, before the
plain candidate (which keeps the vendor's call); the flash kind's candidate is timed beside it.

Causal, the scores GEMM's grid takes the tiles that hold a score on or below the diagonal first,
for every batch (KEPT_FIRST: a dense grid over the triangle), and the tiles wholly above it last:
these still run, with no K block (one where the GEMM's loop nest is persistent or
warp-specialised), because the softmax reads whole rows and their -inf comes from the epilogue; a
diagonal tile computes its whole tile (at 128 x 128 and L = S = 512: 10 of 16 tiles computed, 4
of them diagonal). P @ V's tiles all hold work (K stops at the tile's last row): its grid is the
plain one.

The softmax kernel writes P as its TF32 highs and remainders (the `tf32` op, rounded as the
GEMM's split pass rounds), which the P @ V GEMM reads as they are (gemm.split_rest): P has no
split pass. What each pass moves (B*H heads, L queries, S keys, head dims E and Ev, fp32; in GiB
at 32 x 32 x 512 x 1024, where the H200 moves ~4.2 GB/ms): the scores GEMM reads Q and K
(4*BH*(L+S)*E bytes, 4 GiB; on a Hopper GPU as they are, Triton splitting each tile as it loads
it, so a K tile is split once per row tile that reads it; elsewhere, or where the FLOPs per
element, 2*L*S / (L + S), reach GEMM_SPLIT_AHEAD_MIN_TMA (512 here, against 640), split ahead
once: 12 bytes per element more) and writes the scores (4*BH*L*S, 1 GiB); the softmax reads them and writes P split (4 + 8 bytes per score:
1 + 2 GiB; before, P and then P's split pass: 1 + 1 + 3 GiB); V is split ahead once for P @ V
(12*BH*S*Ev, 6 GiB, ~1.5 ms), which reads P's and V's highs and remainders (8 bytes per element,
once per tile row or column that reads them, mostly from L2) and writes the output
(4*BH*L*Ev, 2 GiB). Measured before these changes (docs/benchmarks.md): the split passes of P
and V 2.5 ms, the softmax 0.5 ms, of a 15 ms call.

When it should win (bench/attention.py's `okgit gemms` arms measure it): at large head dims,
where attention is two big GEMMs (2 x 2*B*H*L*S*E flops) and the L x S scores are small beside
them (B*H*L*S floats written and read twice, about 1 ms per GiB of scores at an H200's ~4 TB/s).
PyTorch runs fp32 attention on the CUDA cores (at head dim 1024 on an H200, its memory-efficient
fused kernel: 25.1 ms not causal, 14.9 ms causal, for 32 x 32 x 512 x 1024; this candidate 16.2 ms
and 14.9 ms, docs/benchmarks.md), and the flash kind's kernel recomputes the scores for every 128
value columns (0.1-0.2x eager there). At small head dims the scores dominate and a flash kernel keeps them
on chip: this candidate should lose there, and the search times both.

Recognition: what the flash kind's calls are (`attention_of`: SDPA without dropout or grouped
heads, or the call its `rewrite` made of a written-out pattern), in fp32; a graph holding such a
vendor call is offered this candidate. SDPA's semantics are kept: the scale 1 / sqrt(E) read
from the head dim at run time where none is given, a boolean mask keeps where True, a float
mask is added, causal keeps key j <= query i (top-left), and a row whose every key is masked
gives 0 (a written-out softmax gives NaN there, as its reference does). Its products are this
kind's own matmul calls (`seeds`), lowered as the gemm kind lowers any, by the gemm kind where
that one is on too; a written-out attention's products are the gemm kind's already, so a graph
without a vendor call is not offered this one."""

from __future__ import annotations

import math

import torch

from okgit.lower.builder import Builder
from okgit.lower.graph import Bound, BoundInt, Graph, Node, module_expr, replaced, reshapes
from okgit.lower.kinds.attention import MASK_ADD, MASK_FILL, MASK_KEEP, SDPA, Call, attention_of
from okgit.lower.kinds.base import template_kind
from okgit.lower.kinds.gemm import Gemm

OWN = "attention_gemm"  # the kwarg that marks the matmul calls `rewrite` made, which this kind seeds
MATMUL = torch.ops.aten.matmul.default
TRANSPOSE = torch.ops.aten.transpose.int


@template_kind(order=6)
class AttentionGemms(Gemm):
    name = "attention_gemms"
    label = "attention as GEMMs"
    label_off = ""
    stands_in_for = ""  # it replaces the vendor's attention, not a cuBLAS GEMM

    def offered(self, graph: Graph) -> bool:
        return any(n.op == SDPA and _taken(n) for n in graph.nodes)

    def rewrite(self, graph: Graph) -> Graph:
        """The graph with each attention call this kind takes written out."""
        while True:
            found = next(((n, call) for n in graph.nodes if (call := _taken(n)) is not None), None)
            if found is None:
                return graph
            graph = replaced(graph, [found[0]], written_out(found[1]))

    def seeds(self, n: Node) -> bool:
        return bool(n.kwargs.get(OWN)) and super().seeds(n)

    def what(self, g) -> str:
        return "an attention product as a Triton GEMM on tensor cores at fp32 accuracy with the epilogue on its accumulator"


def _taken(n: Node) -> Call | None:
    """The attention call n is, where this kind writes it out: fp32, its scale known at run time."""
    call = attention_of(n)
    if call is None or call.q.dtype != torch.float32:
        return None
    return call if call.scale is not None or _size(call.q, len(call.q.shape) - 1) is not None else None


def written_out(call: Call) -> list[Node]:
    """The nodes of `softmax(scale * (Q @ K^T) [mask] [causal]) @ V`, the last its value."""
    b = Builder()
    rank = len(call.q.shape)
    kt = call.k if call.k_transposed else b.add(
        Node("extern", "aten.transpose.int", (call.k, -2, -1), _swapped(call.k.shape), call.k.dtype, target=TRANSPOSE))
    # causal: the products skip the scores' tiles above the diagonal and P's zeros past it (gemm.TRIANGLES)
    x = b.op("mul", _own_matmul(b, call.q, kt, "output" if call.causal else None), _scale(call))
    if call.mask_kind == MASK_KEEP:
        x = b.op("where", call.mask, x, -math.inf)
    elif call.mask_kind == MASK_ADD:
        x = b.op("add", x, call.mask)
    elif call.mask_kind == MASK_FILL:
        x = b.op("where", call.mask, call.fill, x)
    if call.causal:  # key j <= query i, from the coordinates (no mask in memory)
        rows, cols = (b.add(Node("iota", "iota", (), x.shape, torch.int64, (d,))) for d in (rank - 2, rank - 1))
        x = b.op("where", b.op("le", b.op("sub", cols, rows), 0), x, -math.inf)
    if call.safe and call.mask is not None:
        p = _safe_softmax(b, x, rank - 1)
    else:  # no row can be fully masked, or a written-out softmax's NaN is the reference's own
        p = b.softmax(x, rank - 1, log=False)
    _own_matmul(b, p, call.v, "a" if call.causal else None, split=True)
    return b.nodes


def _own_matmul(b: Builder, x: Node, y: Node, triangle: str | None, split: bool = False) -> Node:
    """x @ y as this kind's matmul call; `split`: x as its TF32 highs and remainders, computed
    where x is (the softmax's kernel writes them: no split pass over P), where the GEMM takes it."""
    kwargs = {OWN: True, **({"triangle": triangle} if triangle else {})}
    shape = (*x.shape[:-1], y.shape[-1])
    mm = Node("extern", "aten.matmul.default", (x, y), shape, x.dtype, target=MATMUL, kwargs=kwargs)
    if split and Gemm().seeds(mm):
        hi = b.op("tf32", x)
        rest = b.op("tf32", b.op("sub", x, hi))
        mm = Node("extern", "aten.matmul.default", (hi, y, rest), shape, x.dtype, target=MATMUL,
                  kwargs={**kwargs, "a_split": True})
    return b.add(mm)


def _safe_softmax(b: Builder, x: Node, dim: int) -> Node:
    """softmax(x) along dim, 0 where every element of the row is -inf (as SDPA gives)."""
    top = b.reduce("max", x, dim, True)
    shift = b.op("where", b.op("eq", top, -math.inf), 0.0, top)
    e = b.op("exp", b.op("sub", x, shift))
    total = b.reduce("sum", e, dim, True)
    return b.op("where", b.op("eq", total, 0.0), 0.0, b.op("div", e, total))


def _scale(call: Call) -> float | Bound:
    """The call's scale; SDPA's default, 1 / sqrt(E), follows the head dim the forward gets."""
    if call.scale is not None:
        return call.scale
    e = len(call.q.shape) - 1
    return Bound(1.0 / math.sqrt(call.q.shape[e]), f"1.0 / math.sqrt({_size(call.q, e)})")


def _swapped(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2])


def _size(n: Node, d: int) -> str | None:
    """A forward expression for the size of n's dim d at run time, traced back through
    elementwise ops, views and transposes to a forward argument, a parameter or a reshape's
    size; None where it comes from elsewhere."""
    if n.kind == "input":
        return f"{n.op}.shape[{d}]"
    if n.kind == "param":
        return f"{module_expr(n.op)}.shape[{d}]"
    if n.kind == "op":  # from an operand that spans the dim (torch's right-aligned broadcast)
        for a in n.inputs:
            j = d - len(n.shape) + len(a.shape)
            found = _size(a, j) if j >= 0 and a.shape[j] == n.shape[d] else None
            if found is not None:
                return found
    elif reshapes(n):
        s = n.kwargs["sizes"][d]
        if isinstance(s, tuple):
            return _size(n.args[0], s[1])
        if isinstance(s, BoundInt):
            return f"int({s.expr})"
        return str(s) if s != -1 else None  # a constant the capture saw stay put as the knobs moved
    elif n.kind == "view" and n.shape[d] != 1:  # a view that adds or drops size-1 dims
        src = [j for j, s in enumerate(n.args[0].shape) if s != 1]
        return _size(n.args[0], src[sum(1 for s in n.shape[:d] if s != 1)])
    elif n.kind == "extern" and n.op == "aten.transpose.int":
        rank = len(n.shape)
        swap = {n.args[1] % rank: n.args[2] % rank, n.args[2] % rank: n.args[1] % rank}
        return _size(n.args[0], swap.get(d, d))
    return None
