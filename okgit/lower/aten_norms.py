"""The ATen handlers of group and instance norms and of distance losses (registered
into okgit.lower.aten.HANDLERS), spelled in the captured graph's primitives so that the rows
kind computes their statistics and the elementwise work around them in one kernel.

Group norm reads its input with the channels split into groups, (N, G, C/G, ...), a reshape
made in the forward (Builder.reshape; G a BoundInt where the model's GroupNorm holds it), folds
each group's channels and positions, and merges the groups back after its affine (the
elementwise ops beside the norm move across those reshapes: okgit.lower.reshaping). Instance
norm folds each channel's positions (with running statistics it stays PyTorch's). Batch norm
has no handler: its call stays one, which the batchnorm kind seeds (okgit.lower.kinds.batchnorm:
its statistics split across programs, its running ones updated in its kernel). The triplet
margin loss is two pairwise distances (a norm per row) and a mean.
"""

from __future__ import annotations

from okgit.lower.aten import _h, _norm
from okgit.lower.graph import Unsupported


def _normalise(b, x, dims, eps):
    """(x - mean) / sqrt(var + eps) over dims, the biased variance, as torch's norms."""
    var, mean = b.var(x, dims, True, 0.0)
    return b.op("mul", b.op("sub", x, mean), b.op("rsqrt", b.op("add", var, float(eps))))


@_h("group_norm")
def _group_norm(b, a, t):
    x, groups = a["input"], a["num_groups"]
    if len(x.shape) < 2 or not groups or x.shape[1] % groups:
        raise Unsupported("group norm shape")
    n, c, *rest = x.shape
    tail = tuple(("dim", j) for j in range(2, len(x.shape)))
    grouped = b.reshape(x, (n, groups, c // groups, *rest), (("dim", 0), groups, -1, *tail))
    y = _normalise(b, grouped, tuple(range(2, len(grouped.shape))), a["eps"])
    for name, prim in (("weight", "mul"), ("bias", "add")):
        p = a.get(name)
        if p is not None:
            ones = (1,) * len(rest)
            y = b.op(prim, y, b.reshape(p, (groups, c // groups, *ones), (groups, -1, *ones)))
    return b.reshape(y, x.shape, (("dim", 0), -1, *(("dim", j) for j in range(3, len(grouped.shape)))))


@_h("instance_norm")
def _instance_norm(b, a, t):
    x = a["input"]
    if not a["use_input_stats"] or a.get("running_mean") is not None or len(x.shape) < 3:
        raise Unsupported("instance norm with running statistics")
    y = _normalise(b, x, tuple(range(2, len(x.shape))), a["eps"])
    ones = (1,) * (len(x.shape) - 2)
    for name, prim in (("weight", "mul"), ("bias", "add")):
        p = a.get(name)
        if p is not None:
            y = b.op(prim, y, b.view(p, p.shape + ones))
    return y


def _distance(b, x1, x2, p, eps):
    """torch.pairwise_distance: the p-norm of x1 - x2 + eps over the last dim."""
    d = b.op("add", b.op("sub", x1, x2), float(eps))
    return _norm(b, {"self": d, "ord": p, "dim": [-1], "keepdim": False}, None)


@_h("pairwise_distance")
def _pairwise_distance(b, a, t):
    if a.get("keepdim"):
        raise Unsupported("pairwise distance with keepdim")
    return _distance(b, a["x1"], a["x2"], a["p"], a["eps"])


@_h("triplet_margin_loss")
def _triplet_margin_loss(b, a, t):
    anchor, positive, negative = a["anchor"], a["positive"], a["negative"]
    near = _distance(b, anchor, positive, a["p"], a["eps"])
    far = _distance(b, anchor, negative, a["p"], a["eps"])
    if a["swap"]:
        far = b.op("minimum", far, _distance(b, positive, negative, a["p"], a["eps"]))
    return b.loss(b.clamp(b.op("sub", b.op("add", near, float(a["margin"])), far), 0.0, None), a["reduction"])
