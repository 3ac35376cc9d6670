"""The captured graph's types: a reference op's computation as a small graph of primitives.

Each ATen node of the exported reference becomes a few `Node`s (okgit.lower.aten):

- `input` / `param`: tensors the forward receives or the module owns (leaves),
- `op`: an elementwise primitive (add, exp, where, ...), broadcasting like torch,
- `reduce`: sum / max / min / argmax / argmin over some dims,
- `scan`: a cumulative sum / product along one dim (`kwargs["reverse"]`: from its last element),
- `count`: the number of elements a reduce folds (a runtime size, never a baked constant),
- `iota`: the coordinate along one dim (for picking a class in a loss),
- `view`: a reshape that only adds or drops size-1 dims (no data movement), or one that splits
  or merges dims (`kwargs["sizes"]`, a group norm's channel groups): such a reshape is made in
  the forward from the tensor in memory, never inside a kernel (`reshapes`),
- `extern`: anything else, left to PyTorch (matmul, convolution, unknown ops).

Composite ops (softmax, layer norm, losses, GELU, ...) are expanded into primitives, so the
lowering sees one vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

FLOAT = (torch.float32, torch.float16, torch.bfloat16)


def module_expr(path: str) -> str:
    """A module's qualified name ("blocks.0.norm") as a Python expression over `self`."""
    return "self" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in path.split(".") if p)


class Unsupported(Exception):
    """The reference cannot be captured or lowered; the message says why."""


@dataclass(frozen=True)
class ModeFlag:
    """The module's training flag where a traced call took it as a constant: rendered as `expr`,
    so that the rewritten forward follows model.train() / model.eval() (okgit.lower.translate)."""

    expr: str = "self.training"


class _Bound:
    """A number with the Python expression over `self` that recomputes it in the rewritten forward."""

    expr: str

    def __new__(cls, value, expr: str):
        obj = super().__new__(cls, value)  # type: ignore[call-arg]  # float's or int's, after this class
        obj.expr = expr
        return obj

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.expr})"


class Bound(_Bound, float):
    """A constant computed from the module's float attributes: `expr` (Python over `self`)
    recomputes it in the rewritten forward, so it reaches a kernel as a runtime argument.
    `expr` is one Python expression (`self.eps`, `1.0 - self.p`, `0.5 * self.beta`, ...)."""


class BoundInt(_Bound, int):
    """An int the model holds as an attribute and the shape knobs set (GroupNorm's
    `num_groups`): `expr` reads it in the rewritten forward (okgit.lower.binding.bind_ints)."""


@dataclass(eq=False)
class Node:
    kind: str  # input | param | op | reduce | scan | count | iota | view | extern
    op: str  # primitive name; input: forward argument; param: qualified name; extern: "aten.x.y"
    args: tuple = ()
    shape: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32
    dims: tuple[int, ...] = ()  # reduce: own dims folded; iota, scan: (dim,)
    keepdim: bool = False
    target: Any = None  # extern: the callable (OpOverload or operator.getitem)
    kwargs: dict = field(default_factory=dict)

    @property
    def is_leaf(self) -> bool:
        return self.kind in ("input", "param")

    @property
    def inputs(self) -> list[Node]:
        return [a for a in self.args if isinstance(a, Node)]

    def signature(self) -> tuple:
        """What must not change when only the knobs change (shapes aside)."""
        consts = tuple(repr(a) for a in self.args if not isinstance(a, Node)) if self.kind != "view" else ()
        return (self.kind, self.op, consts, self.dims, self.keepdim, repr(self.kwargs))


def reshapes(n: Node) -> bool:
    """Whether n is a view that splits or merges dims (made in the forward from memory)."""
    return n.kind == "view" and "sizes" in n.kwargs


@dataclass
class Graph:
    nodes: list[Node]  # topological order, leaves first
    outputs: list[Node]
    tuple_output: bool
    forward_args: list[str]
    entry: str  # "Model" or "ModelNew": the class candidates define

    def users(self) -> dict[int, list[Node]]:
        out: dict[int, list[Node]] = {id(n): [] for n in self.nodes}
        for n in self.nodes:
            for a in n.inputs:
                out[id(a)].append(n)
        return out


def replaced(graph: Graph, found: list[Node], new: list[Node]) -> Graph:
    """The graph with the nodes `found` taken out and the nodes `new` in place of the last of them,
    the last of `new` giving its value."""
    gone = {id(n) for n in found}
    swap: dict[int, Any] = {id(found[-1]): new[-1]}
    nodes: list[Node] = []
    for n in graph.nodes:
        if id(n) == id(found[-1]):
            nodes += new
        elif id(n) not in gone:
            nodes.append(rewired(n, swap))
    outputs = [swap.get(id(o), o) for o in graph.outputs]
    return Graph(nodes, outputs, graph.tuple_output, graph.forward_args, graph.entry)


def rewired(n: Node, swap: dict[int, Any]) -> Node:
    """n with each operand that `swap` maps (by id) read from what it maps to, recorded in `swap`
    as n's own replacement; n itself where no operand changed. Each node of a graph rewired in
    order reads the replacements of the nodes before it."""
    args = tuple(swap.get(id(a), a) if isinstance(a, Node) else a for a in n.args)
    if all(x is y for x, y in zip(args, n.args)):
        return n
    swap[id(n)] = dataclasses.replace(n, args=args)
    return swap[id(n)]
