"""The ATen handlers of matrix structure (registered into okgit.lower.aten.HANDLERS): triangles
and diagonals from the coordinates (`iota` nodes), so they fuse as elementwise work, and a
matmul with a diagonal matrix (`torch.diag(v) @ b`) as the row scaling it is (`v[:, None] * b`),
recognised from the graph: the diagonal matrix is never made. (The product differs only where
the other operand holds inf or NaN: there the matmul's zeros times it give NaN.)
"""

from __future__ import annotations

import torch

from okgit.lower.aten import _h
from okgit.lower.graph import Node, Unsupported


def _coordinates(b, shape: tuple[int, ...]) -> tuple[Node, Node]:
    """The row and column index of every element of a matrix (or batch of them), over its whole
    shape: a group that starts with one spans the matrix."""
    rank = len(shape)
    return tuple(b.add(Node("iota", "iota", (), shape, torch.int64, (d,))) for d in (rank - 2, rank - 1))


@_h("tril", "triu")
def _triangle(b, a, t):
    x, k = a["self"], a["diagonal"]
    if len(x.shape) < 2:
        raise Unsupported("a triangle of a vector")
    rows, cols = _coordinates(b, x.shape)
    keep = b.op("le" if t._opname == "tril" else "ge", b.op("sub", cols, rows), k)
    return b.op("where", keep, x, 0.0 if x.dtype.is_floating_point else 0)


@_h("diag")
def _diag(b, a, t):
    v = a["self"]
    if len(v.shape) != 1 or a["diagonal"] != 0 or not v.dtype.is_floating_point:
        raise Unsupported("a diagonal read from a matrix, or off the main one")
    n = v.shape[0]
    rows, cols = _coordinates(b, (n, n))
    out = b.op("where", b.op("eq", rows, cols), b.view(v, (n, 1)), 0.0)
    b.diagonals[id(out)] = v
    return out


@_h("mm", "matmul")
def _matmul(b, a, t):
    """A product with a diagonal matrix made by torch.diag: each row (column) of the other
    operand scaled; any other product stays PyTorch's (or a GEMM kind's)."""
    x, y = a["self"], a.get("mat2", a.get("other"))
    if id(x) in b.diagonals and len(y.shape) == 2:
        return b.op("mul", b.view(b.diagonals[id(x)], (x.shape[0], 1)), y)
    if id(y) in b.diagonals and len(x.shape) == 2:
        return b.op("mul", x, b.diagonals[id(y)])
    return None
