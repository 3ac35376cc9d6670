"""A sum over a linear layer's outputs folded into its weight: no GEMM at all.

The sum over j of (x W^T + b)_j is x . (sum_j W_j) + sum_j b_j: one pass over the weight (its
column sums) and one dot product per row of x, instead of a GEMM whose outputs are all added up
at once (L2/51: a linear, a subtraction and a mean over the features; 2 * M * N * K flops become
N * K + M * K additions). A sum or difference on the way distributes over it: a per-feature
vector adds its own sum, a value constant along the features adds itself once per feature. The
same holds for `x @ B` (B's row sums). A mean's element count becomes the weight's feature
count, read from the tensor at run time.

Optional, a candidate of its own before the plain one: the search times both, and the judge
checks it like any other candidate (it adds in another order than the GEMM does, in fp32). Its
`rewrite` is all it does; the other kinds lower the rewritten graph (a column sum, a rows kernel
over x's rows).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from okgit.lower.graph import Bound, Graph, Node, module_expr, replaced, rewired
from okgit.lower.kinds.base import RewriteKind, template_kind

LINEAR = "aten.linear.default"
MATMULS = ("aten.mm.default", "aten.matmul.default")


@dataclass
class _Sum:
    """A sum over a linear's output features, through the additions on the way."""

    r: Node  # the sum over the last dim
    y: Node  # the linear (or matmul) call
    chain: list[Node]  # the adds and subtracts between them
    terms: list[tuple[int, Node | float]]  # the other addends, with their signs
    sign: int  # the linear's own (-1 where it was subtracted)


def _linear_sums(graph: Graph) -> list[_Sum]:
    users = graph.users()
    outs = {id(o) for o in graph.outputs}
    found = []
    for r in graph.nodes:
        if r.kind != "reduce" or r.op != "sum" or not r.args[0].shape or r.dims != (len(r.args[0].shape) - 1,):
            continue
        e, sign, chain, terms = r.args[0], 1, [], []
        while e.kind == "op" and e.op in ("add", "sub") and len(users[id(e)]) == 1 and id(e) not in outs:
            a, b = e.args
            if _leads(a, e):
                chain.append(e)
                terms.append((sign if e.op == "add" else -sign, b))
                e = a
            elif _leads(b, e):
                chain.append(e)
                terms.append((sign, a))
                sign = sign if e.op == "add" else -sign
                e = b
            else:
                break
        if _weight(e) is not None and len(users[id(e)]) == 1 and id(e) not in outs and all(_summable(t, e) for _, t in terms):
            found.append(_Sum(r, e, chain, terms, sign))
    return found


def _leads(a, e: Node) -> bool:
    """Whether operand a of e carries the linear's output on (it has e's own shape)."""
    return isinstance(a, Node) and a.shape == e.shape and (a.kind == "op" and a.op in ("add", "sub") or _weight(a) is not None)


def _weight(y: Node) -> tuple[Node, int, str] | None:
    """(the weight, the dim its output features lie along, the forward expression of their count)
    of a linear or matmul call y of a 2D weight the forward has by name; None for anything else."""
    if y.kind != "extern" or y.op not in (LINEAR, *MATMULS) or len(y.args) < 2 or not y.dtype.is_floating_point:
        return None
    x, w = y.args[0], y.args[1]
    if not (isinstance(x, Node) and isinstance(w, Node)) or len(w.shape) != 2 or len(x.shape) < 2 or w.kind not in ("param", "input"):
        return None
    dim = 0 if y.op == LINEAR else 1
    if x.shape[-1] != w.shape[1 - dim] or y.shape[-1] != w.shape[dim]:
        return None
    name = module_expr(w.op) if w.kind == "param" else w.op
    return w, dim, f"{name}.shape[{dim}]"


def _summable(t, e: Node) -> bool:
    """Whether the sum of addend t over e's last dim is known: a number, or a tensor broadcast
    into e that spans the last dim or is constant along it."""
    return not isinstance(t, Node) or (len(t.shape) <= len(e.shape) and (not t.shape or t.shape[-1] in (1, e.shape[-1])))


def _folded(s: _Sum) -> tuple[list[Node], Bound]:
    """The nodes computing s.r without the GEMM, the last giving its value, and the feature count."""
    w, dim, count_expr = _weight(s.y)  # type: ignore[misc]  # found by _linear_sums
    x, r = s.y.args[0], s.r
    count = Bound(float(w.shape[dim]), count_expr)
    bias = s.y.args[2] if s.y.op == LINEAR and len(s.y.args) > 2 else s.y.kwargs.get("bias")
    addends = [(sign, _sum_of(t, r, count)) for sign, t in ([(1, bias)] if isinstance(bias, Node) else []) + s.terms]
    # the addends' sums first: the dot product's rows kernel then takes them, and what follows, as
    # per-row values (fusion.partition)
    new = [n for _, parts in addends for n in parts if isinstance(n, Node)]
    summed = Node("reduce", "sum", (w,), (w.shape[1 - dim],), w.dtype, (dim,))
    product = Node("op", "mul", (x, summed), x.shape, r.dtype)
    total = Node("reduce", "sum", (product,), r.shape, r.dtype, (len(x.shape) - 1,), r.keepdim)
    new += [summed, product, total]
    if s.sign < 0:
        total = Node("op", "neg", (total,), r.shape, r.dtype)
        new.append(total)
    for sign, parts in addends:
        total = Node("op", "add" if sign > 0 else "sub", (total, parts[-1]), r.shape, r.dtype)
        new.append(total)
    return new, count


def _sum_of(t, r: Node, count: Bound) -> list:
    """The sum of addend t over the summed features, broadcastable to r: nodes, the last its value,
    or for a number, that number times the count (a Bound the forward computes)."""
    if not isinstance(t, Node):
        own = t.expr if isinstance(t, Bound) else repr(float(t))
        return [Bound(float(t) * float(count), f"({own}) * {count.expr}")]
    if t.shape and t.shape[-1] != 1:
        return [Node("reduce", "sum", (t,), t.shape[:-1] + ((1,) if r.keepdim else ()), t.dtype, (len(t.shape) - 1,), r.keepdim)]
    scaled = Node("op", "mul", (t, count), t.shape, t.dtype)
    if r.keepdim or not t.shape:
        return [scaled]
    return [scaled, Node("view", "view", (scaled,), t.shape[:-1], t.dtype)]


def folded(graph: Graph) -> Graph:
    """The graph with every sum over a linear's output features folded into its weight, and each
    mean's element count of such a sum the weight's feature count."""
    while found := _linear_sums(graph):
        s = found[0]
        new, count = _folded(s)
        graph = replaced(graph, [s.y, *s.chain, s.r], new)
        total = new[-1]
        counts = [n for n in graph.nodes if n.kind == "count" and n.args[0] is total]
        graph = _counted(graph, counts, count)
    return graph


def _counted(graph: Graph, counts: list[Node], count: Bound) -> Graph:
    """The graph with the count nodes `counts` gone, their readers reading `count` instead."""
    gone = {id(c) for c in counts}
    swap: dict[int, Any] = dict.fromkeys(gone, count)
    nodes = [rewired(n, swap) for n in graph.nodes if id(n) not in gone]
    return dataclasses.replace(graph, nodes=nodes, outputs=[swap.get(id(o), o) for o in graph.outputs])


@template_kind(order=-1)  # before the GEMM's: with the sum folded, no GEMM is left to take
class LinearSum(RewriteKind):
    """Its `rewrite` folds the sums; it lowers no group itself."""

    name = "linear_sum"
    label = "sum over a linear's outputs folded into its weight"

    def offered(self, graph: Graph) -> bool:
        return bool(_linear_sums(graph))

    def rewrite(self, graph: Graph) -> Graph:
        return folded(graph)

    def saved_flops(self, graph: Graph) -> float:
        """Each folded GEMM's 2 M N K (FlopCounterMode's count), less the fold's own work: the
        weight's N K column sums and the 2 M K of the rows' dot products."""
        saved = 0.0
        for s in _linear_sums(graph):
            w, dim, _ = _weight(s.y)  # type: ignore[misc]  # found by _linear_sums
            n, k = w.shape[dim], w.shape[1 - dim]
            m = math.prod(s.y.args[0].shape) // k
            saved += 2.0 * m * n * k - (n * k + 2.0 * m * k)
        return saved
