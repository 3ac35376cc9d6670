"""The primitives a captured graph is built from, and the composites spelled in them.

The ATen handlers (okgit.lower.aten) call `Builder.op`, `reduce`, `view`, ... and the shared
composites (`softmax`, `var`, `loss`, `nll`, ...), so that one ATen op and its decomposition
by hand give the same nodes; `op` reuses an elementwise node with the same operands.
"""

from __future__ import annotations

import math

import torch

from okgit.lower.graph import Node, Unsupported


def _reduced_shape(shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def resolve_dims(x: Node, dims) -> tuple[int, ...]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(len(x.shape)))
    if isinstance(dims, int):
        dims = [dims]
    rank = max(len(x.shape), 1)
    return tuple(sorted({d % rank for d in dims}))


def _result_dtype(args) -> torch.dtype:
    dts = [a.dtype for a in args if isinstance(a, Node)]
    floats = [d for d in dts if d.is_floating_point]
    if floats:
        return torch.float32 if torch.float32 in floats or len(set(floats)) > 1 else floats[0]
    if any(isinstance(a, float) for a in args):
        return torch.float32
    return torch.int64 if any(d != torch.bool for d in dts) else torch.bool


def _one_element(x: Node, dims: tuple[int, ...]) -> bool:
    """Whether folding x over dims folds one element per result (every dim folded has size 1)."""
    return bool(x.shape) and all(x.shape[d] == 1 for d in dims)


COMPARE = {"gt", "ge", "lt", "le", "eq", "ne", "and", "or", "not"}


class Builder:
    """Appends primitive nodes to a graph under construction; the composites the ATen handlers
    share (softmax, variance, losses, ...) are spelled here in primitives."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._seen: dict[tuple, Node] = {}  # elementwise ops by operands: composites share work
        self.diagonals: dict[int, Node] = {}  # a diagonal matrix torch.diag made -> its diagonal

    def add(self, n: Node) -> Node:
        if n.kind not in ("input", "param", "extern") and any(m.dtype.is_complex for m in (n, *n.inputs)):
            raise Unsupported("complex tensors: Triton has no complex dtype")  # a vendor call may take them
        self.nodes.append(n)
        return n

    # primitives --------------------------------------------------------------------------
    def op(self, name: str, *args, dtype: torch.dtype | None = None) -> Node:
        shapes = [a.shape for a in args if isinstance(a, Node)]
        shape = tuple(torch.broadcast_shapes(*shapes)) if shapes else ()
        if dtype is None:
            dtype = torch.bool if name in COMPARE else _result_dtype(args)
        key = (name, dtype, tuple(id(a) if isinstance(a, Node) else (type(a), a) for a in args))
        if key not in self._seen:
            self._seen[key] = self.add(Node("op", name, tuple(args), shape, dtype))
        return self._seen[key]

    def reduce(self, name: str, x: Node, dims, keepdim: bool) -> Node:
        dims = resolve_dims(x, dims)
        if _one_element(x, dims) and (name in ("max", "min") or name == "sum" and x.dtype.is_floating_point):
            return self.view(x, _reduced_shape(x.shape, dims, keepdim))  # a fold of one element is that element
        if name in ("argmax", "argmin") or name == "sum" and not x.dtype.is_floating_point:
            dtype = torch.int64
        else:
            dtype = x.dtype
        return self.add(Node("reduce", name, (x,), _reduced_shape(x.shape, dims, keepdim), dtype, dims, keepdim))

    def mean(self, x: Node, dims, keepdim: bool, correction: float = 0.0, of: Node | None = None) -> Node:
        s = self.reduce("sum", of if of is not None else x, dims, keepdim)
        if s.kind != "reduce":  # over one element
            return self.op("div", s, 1.0 - correction) if correction else s
        n = self.add(Node("count", "count", (s,), (), torch.float32))
        if correction:
            n = self.op("sub", n, float(correction))
        return self.op("div", s, n)

    def scan(self, name: str, x: Node, dim: int, reverse: bool = False) -> Node:
        """The cumulative `name` ("sum", "prod") of x along dim, from its last element where
        `reverse`; along a size-1 dim it is x itself."""
        if not x.shape or x.shape[dim] == 1:
            return x
        return self.add(Node("scan", name, (x,), x.shape, x.dtype, (dim,), kwargs={"reverse": True} if reverse else {}))

    def flipped(self, x: Node, dims: list[int]) -> Node:
        """torch.flip(x, dims) as a PyTorch call (a flip of a computed value moves data)."""
        return self.add(Node("extern", "aten.flip.default", (x, dims), x.shape, x.dtype, target=torch.ops.aten.flip.default))

    def unflip(self, x: Node, dims: set[int]) -> Node | None:
        """flip(x, dims) spelled without a flip, or None: a flip undoes a flip, passes through
        elementwise ops to their operands (a size-1 dim needs none), and through a scan along
        one of its dims, which then reads that dim from the other end. What no rule takes (a
        tensor in memory, a reduction) stays a flip."""
        dims = {d for d in dims if x.shape[d] != 1}
        if not dims:
            return x
        if x.kind == "extern" and x.op == "aten.flip.default" and set(resolve_dims(x, x.args[1])) == dims:
            return x.args[0]
        if x.kind == "scan" and x.dims[0] in dims:
            inner = self.unflip(x.args[0], dims)
            return None if inner is None else self.scan(x.op, inner, x.dims[0], not x.kwargs.get("reverse", False))
        if x.kind != "op":
            return None
        args = []
        for a in x.args:
            if isinstance(a, Node):
                off = len(x.shape) - len(a.shape)
                a = self.unflip(a, {d - off for d in dims if d >= off})
                if a is None:
                    return None
            args.append(a)
        return self.op(x.op, *args, dtype=x.dtype)

    def reshape(self, x: Node, shape: tuple[int, ...], sizes: tuple) -> Node:
        """x reshaped to `shape`, which splits or merges its dims; the forward makes it from x in
        memory with `sizes`, one per dim: an int, a BoundInt, ("dim", j) for x's dim j at run
        time, or -1 for the one the others leave (graph.reshapes)."""
        if tuple(shape) == x.shape:
            return x
        return self.add(Node("view", "reshape", (x,), tuple(shape), x.dtype, kwargs={"sizes": tuple(sizes)}))

    def view(self, x: Node, shape: tuple[int, ...]) -> Node:
        if tuple(shape) == x.shape:
            return x
        return self.add(Node("view", "view", (x,), tuple(shape), x.dtype))

    def var(self, x: Node, dims, keepdim: bool, correction: float) -> tuple[Node, Node]:
        mean = self.mean(x, dims, True)
        d = self.op("sub", x, mean)
        var = self.mean(x, dims, keepdim, correction, of=self.op("mul", d, d))
        return var, mean

    # helpers for composites ---------------------------------------------------------------
    def softplus(self, x, beta=1.0, threshold=20.0) -> Node:
        bx = self.op("mul", x, float(beta)) if beta != 1 else x
        sp = self.op("log1p", self.op("exp", bx))
        if beta != 1:
            sp = self.op("div", sp, float(beta))
        return self.op("where", self.op("gt", bx, float(threshold)), x, sp)

    def tanh_gelu(self, x) -> Node:
        inner = self.op("mul", self.op("add", x, self.op("mul", self.op("mul", self.op("mul", x, x), x), 0.044715)), math.sqrt(2 / math.pi))
        return self.op("mul", self.op("mul", x, 0.5), self.op("add", self.op("tanh", inner), 1.0))

    def elu(self, x, alpha=1.0, scale=1.0, input_scale=1.0) -> Node:
        neg = self.op("mul", self.op("expm1", self.op("mul", x, float(input_scale))), float(alpha) * float(scale))
        pos = self.op("mul", x, float(scale)) if scale != 1 else x
        return self.op("where", self.op("gt", x, 0.0), pos, neg)

    def clamp(self, x, lo, hi) -> Node:
        # maximum/minimum, not where: NaN stays NaN as in torch.clamp
        if lo is not None:
            x = self.op("maximum", x, lo if isinstance(lo, Node) else float(lo))
        if hi is not None:
            x = self.op("minimum", x, hi if isinstance(hi, Node) else float(hi))
        return x

    def logsumexp(self, x, dims, keepdim) -> Node:
        m = self.reduce("max", x, dims, True)
        # a row of -inf must give -inf, not NaN: shift by 0 there
        safe = self.op("where", self.op("eq", self.op("abs", m), math.inf), 0.0, m)
        s = self.reduce("sum", self.op("exp", self.op("sub", x, safe)), dims, True)
        out = self.op("add", self.op("log", s), safe)
        return out if keepdim else self.view(out, _reduced_shape(x.shape, resolve_dims(x, dims), False))

    def softmax(self, x, dim, log: bool) -> Node:
        m = self.reduce("max", x, dim, True)
        e = self.op("exp", self.op("sub", x, m))
        s = self.reduce("sum", e, dim, True)
        if log:
            return self.op("sub", self.op("sub", x, m), self.op("log", s))
        return self.op("div", e, s)

    def loss(self, per_elem: Node, reduction: int) -> Node:
        if reduction == 0:
            return per_elem
        if reduction == 2:
            return self.reduce("sum", per_elem, None, False)
        return self.mean(per_elem, None, False)

    def pick(self, x: Node, target: Node, dim: int) -> Node:
        """x gathered at `target` along `dim` (x: (N, C, ...), target: (N, ...)), as a reduce."""
        t = self.view(target, target.shape[:dim] + (1,) + target.shape[dim:])
        iota = self.add(Node("iota", "iota", (), tuple(s if i == dim else 1 for i, s in enumerate(x.shape)), torch.int64, (dim,)))
        hit = self.op("eq", iota, t)
        return self.reduce("sum", self.op("where", hit, x, 0.0), (dim,), False)

    def nll(self, logp: Node, target: Node, reduction: int, ignore_index: int) -> Node:
        if len(logp.shape) != 2:
            raise Unsupported("nll over more than 2 dims")
        picked = self.pick(logp, target, 1)
        valid = self.op("ne", target, int(ignore_index))
        per = self.op("where", valid, self.op("neg", picked), 0.0)
        if reduction == 1:  # mean over the rows that count
            return self.op("div", self.reduce("sum", per, None, False), self.reduce("sum", self.op("cast", valid, dtype=torch.float32), None, False))
        return self.loss(per, reduction)
