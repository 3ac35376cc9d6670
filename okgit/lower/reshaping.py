"""Move the reshapes that split or merge dims (graph.reshapes) across the elementwise ops beside
them, so that those ops join the kernel on the reshape's other side.

Such a reshape is made in the forward from a tensor in memory (a kernel never reshapes), so
the group computing its input writes that input whole and the group after it reads it again. A
group norm splits its input's channels into groups and merges them back after its affine
(okgit.lower.aten_norms): an activation just before it (L2/19's GELU) would cost one write and
one read of the largest tensor in the op, and a clamp just after it (L2/83) as much again.

- A split reshape of an elementwise op's result, that op's only use, is made of its operands
  instead: reshape(gelu(x)) is gelu(reshape(x)), and the norm's kernel computes the activation
  as it reads x (twice where its rows are read twice: arithmetic is cheaper than the memory).
- An elementwise op of a merge reshape is computed before it: min(reshape(y), 0) is
  reshape(min(y, 0)), in the kernel that computes y.

Only operands that reshape the same way move: those of the reshaped tensor's own shape (the
reshape's sizes name that shape's dims) and those of one element (they broadcast either way).
Splits only move up and merges only down, so the two never undo each other.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from okgit.lower.graph import Graph, Node, replaced, reshapes, rewired


def moved(graph: Graph) -> Graph:
    """The graph with every split reshape raised and every merge reshape lowered as far as the
    elementwise ops around them allow; the same graph where none moves."""
    while True:  # one move at a time: each one makes a new graph, whose readers are counted again
        users, outs = graph.users(), {id(o) for o in graph.outputs}
        swap = next((s for n in graph.nodes if (s := _raised(users, outs, n) or _lowered(users, outs, n))), None)
        if swap is None:
            return _shared(graph)
        graph = replaced(graph, *swap)


def _scalar(a: Node) -> bool:
    return math.prod(a.shape) == 1


def _raised(users: dict[int, list[Node]], outs: set[int], r: Node) -> tuple[list[Node], list[Node]] | None:
    """(nodes out, nodes in) raising the split reshape r above the op computing its input."""
    if not reshapes(r) or len(r.shape) <= len(r.args[0].shape):
        return None
    x = r.args[0]
    if x.kind != "op" or id(x) in outs or users[id(x)] != [r]:
        return None
    if not all(a.shape == x.shape or _scalar(a) for a in x.inputs):
        return None
    made: dict[int, Node] = {}
    for a in x.inputs:
        if a.shape == x.shape and id(a) not in made:
            made[id(a)] = dataclasses.replace(r, args=(a,), dtype=a.dtype)
    args = tuple(made.get(id(a), a) if isinstance(a, Node) else a for a in x.args)
    return [x, r], [*made.values(), dataclasses.replace(x, args=args, shape=r.shape)]


def _lowered(users: dict[int, list[Node]], outs: set[int], u: Node) -> tuple[list[Node], list[Node]] | None:
    """(nodes out, nodes in) computing the op u before the merge reshape it reads."""
    m = next((a for a in u.inputs if reshapes(a) and len(a.shape) < len(a.args[0].shape)), None)
    if u.kind != "op" or m is None or u.shape != m.shape:
        return None
    if not all(a is m or _scalar(a) for a in u.inputs):
        return None
    y = m.args[0]
    args = tuple(y if a is m else a for a in u.args)
    op = dataclasses.replace(u, args=args, shape=y.shape)
    merged = dataclasses.replace(m, args=(op,), dtype=u.dtype)
    gone = [u]
    if all(v is u for v in users[id(m)]) and id(m) not in outs:
        gone.insert(0, m)
    return gone, [op, merged]


def _shared(graph: Graph) -> Graph:
    """The graph with one node for each reshape made more than once of the same tensor the same
    way (raising a reshape above ops that read one tensor twice makes one for each), so that the
    kernel reads that tensor once. The first is kept: it comes before every user of the others."""
    first: dict[tuple, Node] = {}
    swap: dict[int, Any] = {}
    nodes: list[Node] = []
    for n in graph.nodes:
        new = rewired(n, swap)
        if reshapes(new):
            key = (id(new.args[0]), new.shape, repr(new.kwargs["sizes"]))
            if key in first:
                swap[id(n)] = first[key]
                continue
            first[key] = new
        nodes.append(new)
    if not swap:
        return graph
    outputs = [swap.get(id(o), o) for o in graph.outputs]
    return dataclasses.replace(graph, nodes=nodes, outputs=outputs)
