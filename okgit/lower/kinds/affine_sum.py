"""A sum over an affine function of a tensor, taken over the tensor first: a norm's output never made.

Where e = A * x + B with A and B constant along some of the summed dims (`inner`), the sum of e
over them is A * sum(x) + n * B, n their element count; the rest of the sum then runs over the
small result. A group norm's output is (x - mean) * rstd * weight + bias: affine in its input x,
its coefficients one value per (sample, channel). A mean of it over every dim but the batch
(KernelBench L2/23: a 3D convolution, a group norm, a mean) becomes the mean over the
channels of weight * rstd * (mean(x over the positions) - mean) + bias: the norm's statistics and
one more pass over x in whole contiguous rows (a (sample, channel) pair's positions), instead of a
normalising pass that writes the norm's output for the mean to read again. Offered where a
coefficient comes from a reduction (`_reduced`: the pass the rewrite saves) and x is read from
memory anyway (`_in_memory`).

A mean (a sum divided by its own count) stays a mean: the inner sum divided by its count, the
outer one by its own, each count taken in its reduction's kernel; a plain sum multiplies B by the
inner count. Optional, a candidate of its own before the plain one: the search times both and the
judge checks it (it adds in another order). Its `rewrite` is all it does; the other kinds lower
the result.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from okgit.lower.graph import Bound, BoundInt, Graph, Node, replaced, reshapes
from okgit.lower.kinds.base import RewriteKind, template_kind


@dataclass
class _Affine:
    """e = prod(factors) * x + sum(sign * prod(term) for sign, term in terms), read down e's chain."""

    x: Node
    chain: list[Node]  # e's nodes down to x (x excluded), e first
    factors: list[Any] = field(default_factory=list)
    terms: list[tuple[int, list[Any]]] = field(default_factory=list)


@dataclass
class _Found:
    r: Node  # the sum
    mean: Node | None  # its division by its own count, where it is a mean
    view: Node | None  # a reshape between e and r
    through: bool  # the result goes back through it (its kept dims are not e's own)
    affine: _Affine
    dims: tuple[int, ...]  # r's dims on x's shape
    inner: tuple[int, ...]  # those along which the coefficients are constant


def _read(e: Node) -> _Affine:
    """e's chain of additions, subtractions, negations and products by operands broadcast into it,
    down to the first node that is none of these (x). A node of the chain may have readers
    besides it (a group norm's x - mean, also squared for the variance): it stays for them."""
    got = _Affine(e, [])
    n = e
    while n.kind == "op" and n.op in ("add", "sub", "mul", "neg"):
        if n.op == "neg":
            got.chain.append(n)
            got.factors.append(-1.0)
            n = n.args[0]
            continue
        full = [isinstance(a, Node) and a.shape == e.shape for a in n.args]
        if full.count(True) != 1:
            break
        got.chain.append(n)
        inside, other = (n.args[0], n.args[1]) if full[0] else (n.args[1], n.args[0])
        if n.op == "mul":
            got.factors.append(other)
        else:
            got.terms.append((-1 if n.op == "sub" and not full[1] else 1, [*got.factors, other]))
            if n.op == "sub" and full[1]:  # other - inside
                got.factors.append(-1.0)
        n = inside
    got.x = n
    return got


def _constant_along(a: Any, rank: int) -> set[int]:
    """The dims (of a tensor of this rank) along which operand a, broadcast into it, is constant."""
    if not isinstance(a, Node):
        return set(range(rank))
    pad = rank - len(a.shape)
    return {d for d in range(rank) if d < pad or a.shape[d - pad] == 1}


def _found(graph: Graph) -> list[_Found]:
    users, outs = graph.users(), {id(o) for o in graph.outputs}
    found = []
    for r in graph.nodes:
        if r.kind != "reduce" or r.op != "sum" or not r.dims:
            continue
        counts = [u for u in users[id(r)] if u.kind == "count"]
        readers = [u for u in users[id(r)] if u.kind != "count"]
        mean = readers[0] if (len(readers) == 1 and readers[0].kind == "op" and readers[0].op == "div"
                              and len(counts) == 1 and readers[0].args == (r, counts[0])
                              and len(users[id(counts[0])]) == 1 and id(r) not in outs) else None
        if counts and mean is None:  # r's count read elsewhere: r stays
            continue
        e, view, through, dims = r.args[0], None, False, r.dims
        if reshapes(e) and len(users[id(e)]) == 1 and id(e) not in outs:
            # a sum over a reshape's trailing dims from k on: over z's from k on where the dims
            # before k are z's own (a mean over all but the batch of a group norm's merged
            # output), or over as many of z's last dims where the summed ones are z's last (a
            # mean over the positions alone: the kept channels are z's groups and their channels;
            # the result goes back through the reshape)
            z, k = e.args[0], min(dims)
            tail = len(e.shape) - k
            if dims != tuple(range(k, len(e.shape))):
                continue
            if z.shape[:k] == e.shape[:k]:
                dims = tuple(range(k, len(z.shape)))
            elif e.shape[k:] == z.shape[len(z.shape) - tail:]:
                dims, through = tuple(range(len(z.shape) - tail, len(z.shape))), True
            else:
                continue
            view, e = e, z
        if len(users[id(e)]) != 1 or id(e) in outs:
            continue
        affine = _read(e)
        if not affine.chain:
            continue
        rank = len(e.shape)
        coefficients = affine.factors + [a for _, term in affine.terms for a in term]
        inner = set(dims).intersection(*(_constant_along(a, rank) for a in coefficients))
        if (inner and any(affine.x.shape[d] != 1 for d in inner) and _in_memory(affine.x)
                and any(isinstance(a, Node) and _reduced(a) for a in coefficients)):
            found.append(_Found(r, mean, view, through, affine, dims, tuple(sorted(inner))))
    return found


def _reduced(n: Node) -> bool:
    """Whether n is computed from a reduction (a norm's mean or rstd): then e needs a pass of its
    own over x after that reduction's, which the rewrite saves. Coefficients from parameters or
    constants alone (x * scale + 1) save nothing the reduction's kernel does not fuse anyway."""
    seen: set[int] = set()
    todo = [n]
    while todo:
        m = todo.pop()
        if m.kind == "reduce":
            return True
        if id(m) not in seen:
            seen.add(id(m))
            todo += m.inputs
    return False


def _in_memory(x: Node) -> bool:
    """Whether x is read from memory anyway: a call's output, an input or parameter, or a reshape
    of one. One computed elementwise (L2/27's hardswish before its group norm) the partition
    writes out for the two reductions that then read it (the norm's statistics, the inner sums),
    2.2 GB on L2/27, which may cost what the rewrite saves (not measured): not offered there."""
    while reshapes(x):
        x = x.args[0]
    return x.kind in ("extern", "input", "param")


def _product(factors: list[Any], dtype, new: list[Node]) -> Any:
    """prod(factors) as nodes appended to `new` (plain numbers multiplied out; a constant bound to the
    module's attributes kept as an operand, so the forward computes it), None for an empty product."""
    value: Any = None
    number = 1.0
    for f in factors:
        if not isinstance(f, (Node, Bound, BoundInt)):
            number *= float(f)
            continue
        value = f if value is None else _op("mul", value, f, dtype, new)
    if number != 1.0:
        value = number if value is None else _op("mul", value, number, dtype, new)
    return value


def _op(op: str, a: Any, b: Any, dtype, new: list[Node]) -> Node:
    """a op b appended to `new`, of the shape the two broadcast to."""
    shape = tuple(torch.broadcast_shapes(*(v.shape for v in (a, b) if isinstance(v, Node))))
    new.append(Node("op", op, (a, b), shape, dtype))
    return new[-1]


def _rewritten(f: _Found) -> list[Node]:
    """The nodes computing f's sum (or mean) from x's inner sums, the last giving its value."""
    x, r, dtype = f.affine.x, f.r, f.r.dtype
    kept = tuple(1 if d in f.inner else s for d, s in enumerate(x.shape))
    new: list[Node] = [Node("reduce", "sum", (x,), kept, dtype, f.inner, True)]
    summed = new[-1]
    count = Node("count", "count", (summed,), (), dtype)
    new.append(count)
    if f.mean is not None:  # A * mean(x) + B
        value: Any = _op("div", summed, count, dtype, new)
        scale: Any = None
    else:  # A * sum(x) + n * B
        value, scale = summed, count
    a = _product(f.affine.factors, dtype, new)
    total = value if a is None else _op("mul", value, a, dtype, new)
    for sign, term in f.affine.terms:
        b = _product(term + ([scale] if scale is not None else []), dtype, new)
        total = _op("add" if sign > 0 else "sub", total, 1.0 if b is None else b, dtype, new)
    result = total
    outer = tuple(d for d in f.dims if d not in f.inner)
    if outer:  # the rest of the sum (or mean), over the small result
        shape = tuple(1 if d in outer else s for d, s in enumerate(total.shape))
        new.append(Node("reduce", "sum", (total,), shape, dtype, outer, True))
        result = new[-1]
        if f.mean is not None:
            new.append(Node("count", "count", (result,), (), dtype))
            result = _op("div", result, new[-1], dtype, new)
    if f.through:  # back through the reshape, the summed dims 1 (its sizes read them at run time)
        assert f.view is not None
        k = len(f.view.shape) - len(f.dims)
        new.append(dataclasses.replace(f.view, args=(result,), shape=f.view.shape[:k] + (1,) * len(f.dims)))
        result = new[-1]
    if result.shape != r.shape:  # its dims of 1 dropped where r keeps none
        new.append(Node("view", "view", (result,), r.shape, dtype))
    return new


def rewritten(graph: Graph) -> Graph:
    """The graph with each such sum (or mean) taken over x first."""
    while found := _found(graph):
        f = found[0]
        new = _rewritten(f)
        users = graph.users()
        gone = {id(n) for n in [f.r, *([f.view] if f.view else []), *([f.mean] if f.mean else [])]}
        gone |= {id(u) for u in users[id(f.r)] if u.kind == "count"}
        outs = {id(o) for o in graph.outputs}
        for n in f.affine.chain:  # e first: a node goes where every reader of it goes
            if all(id(u) in gone for u in users[id(n)]) and id(n) not in outs:
                gone.add(id(n))
        graph = replaced(graph, [n for n in graph.nodes if id(n) in gone], new)
    return graph


@template_kind(order=-2)  # a rewrite alone, as linear_sum
class AffineSum(RewriteKind):
    """Its `rewrite` takes the sums over x first; it lowers no group itself."""

    name = "affine_sum"
    label = "sum over an affine function of a tensor taken over the tensor first"

    def offered(self, graph: Graph) -> bool:
        return bool(_found(graph))

    def rewrite(self, graph: Graph) -> Graph:
        return rewritten(graph)
