"""The ATen handlers: each ATen op the templates lower, as primitives of the captured graph.

A handler takes the Builder, the op's arguments by schema name (defaults filled in) and the
OpOverload, and returns the op's nodes; None or Unsupported leaves the op to PyTorch (an
extern). `_h` registers a handler for the ATen names (overload aside) it covers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from okgit.lower.builder import Builder, resolve_dims
from okgit.lower.graph import FLOAT, Node, Unsupported

Handler = Callable[[Builder, dict, Any], Any]
HANDLERS: dict[str, Handler] = {}  # ATen op name (overload aside) -> its handler


def _h(*names: str):
    def deco(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn

    return deco


def _unary(prim: str) -> Handler:
    return lambda b, a, t: b.op(prim, a["self"])


for _aten, _prim in {
    "abs": "abs", "neg": "neg", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
    "sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu", "erf": "erf", "sin": "sin", "cos": "cos",
    "floor": "floor", "ceil": "ceil", "sign": "sign", "log1p": "log1p", "expm1": "expm1",
    "log2": "log2", "exp2": "exp2", "logical_not": "not",
}.items():
    HANDLERS[_aten] = _unary(_prim)


def _scalar(v):
    return float(v) if isinstance(v, float) else v


@_h("add", "sub")
def _add(b, a, t):
    other = a["other"]
    alpha = a.get("alpha", 1)
    if alpha != 1:
        other = b.op("mul", other, _scalar(alpha))
    return b.op(t._opname, a["self"], _scalar(other))


@_h("rsub")
def _rsub(b, a, t):
    x = a["self"] if a.get("alpha", 1) == 1 else b.op("mul", a["self"], _scalar(a["alpha"]))
    return b.op("sub", _scalar(a["other"]), x)


@_h("mul")
def _mul(b, a, t):
    return b.op("mul", a["self"], _scalar(a["other"]))


@_h("div", "true_divide")
def _div(b, a, t):
    if a.get("rounding_mode") is not None:
        raise Unsupported("rounding division")
    return b.op("div", a["self"], _scalar(a["other"]))


@_h("reciprocal")
def _recip(b, a, t):
    return b.op("div", 1.0, a["self"])


@_h("square")
def _square(b, a, t):
    return b.op("mul", a["self"], a["self"])


@_h("maximum", "minimum")
def _maxmin(b, a, t):
    return b.op(t._opname, a["self"], a["other"])


@_h("pow")
def _pow(b, a, t):
    base, exp = a["self"], a["exponent"]
    if not isinstance(base, Node):
        raise Unsupported("scalar base")
    return b.op("pow", base, _scalar(exp))


@_h("gt", "ge", "lt", "le", "eq", "ne")
def _cmp(b, a, t):
    return b.op(t._opname, a["self"], _scalar(a["other"]))


@_h("logical_and", "logical_or")
def _logical(b, a, t):
    return b.op(t._opname.split("_")[1], a["self"], a["other"])


@_h("where")
def _where(b, a, t):
    if "self" not in a:
        raise Unsupported("where with one argument")
    return b.op("where", a["condition"], _scalar(a["self"]), _scalar(a["other"]))


@_h("clamp", "clip")
def _clamp(b, a, t):
    return b.clamp(a["self"], a.get("min"), a.get("max"))


@_h("clamp_min")
def _clamp_min(b, a, t):
    return b.clamp(a["self"], a["min"], None)


@_h("clamp_max")
def _clamp_max(b, a, t):
    return b.clamp(a["self"], None, a["max"])


@_h("hardtanh")
def _hardtanh(b, a, t):
    return b.clamp(a["self"], a["min_val"], a["max_val"])


@_h("relu6")
def _relu6(b, a, t):
    return b.clamp(a["self"], 0.0, 6.0)


@_h("leaky_relu")
def _leaky(b, a, t):
    x = a["self"]
    return b.op("where", b.op("gt", x, 0.0), x, b.op("mul", x, float(a["negative_slope"])))


@_h("threshold")
def _threshold(b, a, t):
    x = a["self"]
    return b.op("where", b.op("gt", x, float(a["threshold"])), x, float(a["value"]))


@_h("gelu")
def _gelu(b, a, t):
    x = a["self"]
    if a.get("approximate", "none") == "tanh":
        return b.tanh_gelu(x)
    cdf = b.op("add", b.op("erf", b.op("mul", x, 1 / math.sqrt(2))), 1.0)
    return b.op("mul", b.op("mul", x, 0.5), cdf)


@_h("silu")
def _silu(b, a, t):
    return b.op("mul", a["self"], b.op("sigmoid", a["self"]))


@_h("mish")
def _mish(b, a, t):
    return b.op("mish", a["self"])  # one helper, not tanh of softplus: a fifth of the instructions


@_h("softplus")
def _softplus(b, a, t):
    return b.softplus(a["self"], a["beta"], a["threshold"])


@_h("elu")
def _elu(b, a, t):
    return b.elu(a["self"], a["alpha"], a["scale"], a["input_scale"])


@_h("selu")
def _selu(b, a, t):
    return b.elu(a["self"], 1.6732632423543772, 1.0507009873554805)


@_h("celu")
def _celu(b, a, t):
    alpha = float(a["alpha"])
    return b.elu(a["self"], alpha, 1.0, 1.0 / alpha)


@_h("hardsigmoid")
def _hardsigmoid(b, a, t):
    return b.op("div", b.clamp(b.op("add", a["self"], 3.0), 0.0, 6.0), 6.0)


@_h("hardswish")
def _hardswish(b, a, t):
    return b.op("mul", a["self"], b.op("div", b.clamp(b.op("add", a["self"], 3.0), 0.0, 6.0), 6.0))


@_h("_to_copy", "to", "type_as")
def _to(b, a, t):
    x = a["self"]
    dtype = a.get("dtype")
    if t._opname == "type_as":
        dtype = a["other"].dtype
    if not isinstance(x, Node) or dtype is None or dtype == x.dtype:
        return x if isinstance(x, Node) and dtype in (None, x.dtype) and a.get("device") is None else None
    if dtype not in FLOAT + (torch.int32, torch.int64, torch.bool):
        raise Unsupported(f"cast to {dtype}")
    return b.op("cast", x, dtype=dtype)


@_h("clone", "contiguous", "alias", "detach", "detach_", "lift_fresh_copy")
def _identity(b, a, t):
    return a["self"]


@_h("dropout")
def _dropout(b, a, t):
    if a["p"] == 0 or not a["train"]:
        return a["input"]
    raise Unsupported("random dropout")


@_h("view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "expand", "expand_as", "flatten")
def _view(b, a, t):
    x = a["self"]
    shape = _infer_view_shape(x, a, t._opname)
    if [s for s in shape if s != 1] == [s for s in x.shape if s != 1]:
        return b.view(x, shape)
    if t._opname in ("expand", "expand_as") and tuple(torch.broadcast_shapes(x.shape, shape)) == tuple(shape):
        return x  # broadcasting: the consumer's own broadcast gives the same result
    return None  # moves data between dims: PyTorch's view


def _infer_view_shape(x: Node, a: dict, opname: str) -> tuple[int, ...]:
    if opname == "unsqueeze":
        d = a["dim"] % (len(x.shape) + 1)
        return x.shape[:d] + (1,) + x.shape[d:]
    if opname == "squeeze":
        dims = a.get("dim")
        dims = range(len(x.shape)) if dims is None else resolve_dims(x, dims)
        return tuple(s for i, s in enumerate(x.shape) if not (i in dims and s == 1))
    if opname == "expand_as":
        return a["other"].shape
    if opname == "flatten":
        s, e = a["start_dim"] % max(len(x.shape), 1), a["end_dim"] % max(len(x.shape), 1)
        return x.shape[:s] + (math.prod(x.shape[s : e + 1]),) + x.shape[e + 1 :]
    size = list(a["size"])
    if opname == "expand":
        off = len(size) - len(x.shape)
        return tuple(x.shape[i - off] if s == -1 else s for i, s in enumerate(size))
    if -1 in size:
        known = math.prod(s for s in size if s != -1)
        size[size.index(-1)] = math.prod(x.shape) // known if known else 0
    return tuple(size)


@_h("broadcast_tensors")
def _broadcast_tensors(b, a, t):
    return tuple(a["tensors"])


@_h("sum")
def _sum(b, a, t):
    return b.reduce("sum", a["self"], a.get("dim"), a.get("keepdim", False))


@_h("mean")
def _mean(b, a, t):
    return b.mean(a["self"], a.get("dim"), a.get("keepdim", False))


@_h("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d")
def _adaptive_avg_pool(b, a, t):
    """A global average pool (an output of one element along each pooled dim) is a mean over
    those dims; another output size stays PyTorch's."""
    x, size = a["self"], list(a["output_size"])
    if any(s != 1 for s in size):
        return None
    return b.mean(x, list(range(len(x.shape) - len(size), len(x.shape))), True)


@_h("amax", "amin")
def _amax(b, a, t):
    return b.reduce(t._opname[1:], a["self"], a.get("dim"), a.get("keepdim", False))


@_h("max", "min")
def _max(b, a, t):
    if "other" in a:
        return b.op(t._opname + "imum", a["self"], a["other"])
    if "dim" not in a:
        return b.reduce(t._opname, a["self"], None, False)
    x, dim, keep = a["self"], a["dim"], a.get("keepdim", False)
    return (b.reduce(t._opname, x, dim, keep), b.reduce("arg" + t._opname, x, dim, keep))


@_h("argmax", "argmin")
def _argmax(b, a, t):
    # with dim=None the index is into the flattened tensor: the row-major position over all dims
    return b.reduce(t._opname, a["self"], a.get("dim"), a.get("keepdim", False))


@_h("var", "std")
def _var(b, a, t):
    correction = a.get("correction")
    if correction is None:
        correction = 1 if a.get("unbiased", True) else 0
    var, _ = b.var(a["self"], a.get("dim"), a.get("keepdim", False), float(correction))
    return b.op("sqrt", var) if t._opname == "std" else var


@_h("logsumexp")
def _lse(b, a, t):
    return b.logsumexp(a["self"], a["dim"], a.get("keepdim", False))


@_h("linalg_vector_norm", "norm")
def _norm(b, a, t):
    x = a.get("self", a.get("input"))
    p = a.get("ord", a.get("p", 2))
    p = 2.0 if p is None else float(p)
    dims, keep = a.get("dim"), a.get("keepdim", False)
    if a.get("dtype") is not None:
        raise Unsupported("norm with dtype")
    if p == 2:
        return b.op("sqrt", b.reduce("sum", b.op("mul", x, x), dims, keep))
    if p == 1:
        return b.reduce("sum", b.op("abs", x), dims, keep)
    if p == math.inf:
        return b.reduce("max", b.op("abs", x), dims, keep)
    return b.op("pow", b.reduce("sum", b.op("pow", b.op("abs", x), p), dims, keep), 1.0 / p)


@_h("softmax", "_softmax", "log_softmax", "_log_softmax")
def _softmax(b, a, t):
    x = a["self"]
    if a.get("dtype") not in (None, x.dtype) or (a.get("half_to_float") and x.dtype != torch.float32):
        raise Unsupported("softmax with a dtype change")
    return b.softmax(x, a["dim"], log="log" in t._opname)


@_h("layer_norm", "rms_norm")
def _layer_norm(b, a, t):
    x, w = a["input"], a.get("weight")
    dims = tuple(range(len(x.shape) - len(a["normalized_shape"]), len(x.shape)))
    eps = a.get("eps")
    if t._opname == "rms_norm":
        ms = b.mean(x, dims, True, of=b.op("mul", x, x))
        eps = torch.finfo(x.dtype).eps if eps is None else eps
        y = b.op("mul", x, b.op("rsqrt", b.op("add", ms, float(eps))))
    else:
        var, mean = b.var(x, dims, True, 0.0)
        y = b.op("mul", b.op("sub", x, mean), b.op("rsqrt", b.op("add", var, float(eps))))
    if w is not None:
        y = b.op("mul", y, w)
    if a.get("bias") is not None:
        y = b.op("add", y, a["bias"])
    return y


@_h("mse_loss", "l1_loss")
def _mse(b, a, t):
    d = b.op("sub", a["self"], a["target"])
    per = b.op("mul", d, d) if t._opname == "mse_loss" else b.op("abs", d)
    return b.loss(per, a["reduction"])


@_h("smooth_l1_loss", "huber_loss")
def _huber(b, a, t):
    ad = b.op("abs", b.op("sub", a["self"], a["target"]))
    if t._opname == "huber_loss":
        delta = float(a["delta"])
        per = b.op("where", b.op("lt", ad, delta), b.op("mul", b.op("mul", ad, ad), 0.5), b.op("mul", b.op("sub", ad, 0.5 * delta), delta))
    else:
        beta = float(a["beta"])
        if beta == 0:
            per = ad
        else:
            per = b.op("where", b.op("lt", ad, beta), b.op("div", b.op("mul", b.op("mul", ad, ad), 0.5), beta), b.op("sub", ad, 0.5 * beta))
    return b.loss(per, a["reduction"])


@_h("binary_cross_entropy_with_logits")
def _bce_logits(b, a, t):
    if a.get("weight") is not None or a.get("pos_weight") is not None:
        raise Unsupported("weighted BCE")
    x, y = a["self"], a["target"]
    # max(x, 0) - x*y + log1p(exp(-|x|)): stable for large |x|
    per = b.op("add", b.op("sub", b.op("relu", x), b.op("mul", x, y)), b.op("log1p", b.op("exp", b.op("neg", b.op("abs", x)))))
    return b.loss(per, a["reduction"])


@_h("kl_div")
def _kl_div(b, a, t):
    x, y = a["self"], a["target"]
    if a.get("log_target"):
        per = b.op("mul", b.op("exp", y), b.op("sub", y, x))
    else:  # xlogy: 0 where the target is 0
        ylogy = b.op("where", b.op("gt", y, 0.0), b.op("mul", y, b.op("log", y)), 0.0)
        per = b.op("sub", ylogy, b.op("mul", y, x))
    return b.loss(per, a["reduction"])


@_h("cross_entropy_loss")
def _cross_entropy(b, a, t):
    x, target = a["self"], a["target"]
    if a.get("weight") is not None or a.get("label_smoothing", 0.0) or len(x.shape) != 2 or target.dtype.is_floating_point:
        raise Unsupported("cross entropy variant")
    return b.nll(b.softmax(x, 1, log=True), target, a["reduction"], a["ignore_index"])


@_h("nll_loss", "nll_loss_nd")
def _nll(b, a, t):
    if a.get("weight") is not None:
        raise Unsupported("weighted nll")
    return b.nll(a["self"], a["target"], a["reduction"], a["ignore_index"])
