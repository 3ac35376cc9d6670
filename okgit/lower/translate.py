"""An exported program translated into a captured graph: ATen calls dispatched to handlers.

Each call_function node goes to its ATen handler (okgit.lower.aten); an op no handler takes,
or one a handler refuses, becomes an `extern` node the rewritten forward leaves to PyTorch.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from okgit.lower import aten_matrices, aten_norms, aten_scans  # noqa: F401 - register their handlers
from okgit.lower.aten import HANDLERS
from okgit.lower.builder import Builder
from okgit.lower.graph import Graph, ModeFlag, Node, Unsupported

# The class of an ATen op no handler lowers, for the note that says why no template took it
OP_CLASSES = {
    **dict.fromkeys(("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"), "scan"),
    **dict.fromkeys(("avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
                     "max_pool2d_with_indices", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
                     "_adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d"), "pooling"),
    **dict.fromkeys(("sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode"), "sort or selection"),
    **dict.fromkeys(("mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "linear", "einsum", "dot", "mv"), "matmul"),
    **dict.fromkeys(("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                     "convolution"), "convolution"),
    **dict.fromkeys(("batch_norm", "group_norm", "instance_norm"), "normalisation"),
    **dict.fromkeys(("transpose", "permute", "t", "cat", "stack", "flip", "roll", "pad", "constant_pad_nd", "repeat",
                     "tile", "narrow", "slice", "select", "index_select", "gather", "scatter", "index", "embedding",
                     "unfold", "view", "reshape", "_unsafe_view", "expand"), "data movement"),
    **dict.fromkeys(("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_bilinear2d",
                     "upsample_bicubic2d", "grid_sampler_2d"), "resampling"),
    **dict.fromkeys(("dropout", "native_dropout", "bernoulli", "rand_like", "randn_like"), "random"),
}


PURE_CALLS = {"aten.flip.default"}
BATCH_NORM = "aten.batch_norm.default"  # its `training` made the module's flag (_mode_dynamic)  # PyTorch calls that change nothing but their result: dropped when unused


def translate(ep, forward_args: list[str], entry: str, constants: dict[str, Any]) -> Graph:
    """The exported program as a Graph: its placeholders as leaves (a tensor constant, from
    `constants`, as the Python scalar it holds), each call as primitives."""
    from torch.export.graph_signature import InputKind

    b = Builder()
    env: dict[str, Any] = {}
    user = iter(forward_args)
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
    for fx in ep.graph.nodes:
        if fx.op == "placeholder":
            spec, val = specs[fx.name], fx.meta["val"]
            if spec.kind == InputKind.USER_INPUT:
                env[fx.name] = b.add(Node("input", next(user), shape=tuple(val.shape), dtype=val.dtype))
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                env[fx.name] = b.add(Node("param", spec.target, shape=tuple(val.shape), dtype=val.dtype))
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                env[fx.name] = _scalar_constant(constants[spec.target])
            else:
                raise Unsupported(f"unsupported graph input kind {spec.kind}")
        elif fx.op == "call_function":
            args = torch.fx.node.map_arg(fx.args, lambda a: env[a.name])
            kwargs = torch.fx.node.map_arg(fx.kwargs, lambda a: env[a.name])
            env[fx.name] = call(b, fx.target, args, kwargs, fx.meta.get("val"))
        elif fx.op == "output":
            outs = fx.args[0]
            flat = [env[o.name] for o in outs]
            if not all(isinstance(o, Node) for o in flat):
                raise Unsupported("an output is not a tensor")
            return Graph(_live(b.nodes, flat), flat, len(flat) > 1, forward_args, entry)
        else:
            raise Unsupported(f"unsupported graph node {fx.op}")
    raise Unsupported("graph without output")



def _scalar_constant(t: torch.Tensor) -> float | int | bool:
    """A tensor the forward makes from a Python number (`torch.tensor(self.value)`), as that number:
    in torch's type promotion a 0-dim tensor weighs as a Python scalar of its kind."""
    if t.dim() != 0 or t.is_meta:
        raise Unsupported("a tensor constant made in the forward" + (" on the input's device" if t.is_meta else ""))
    v = t.item()
    if isinstance(v, float):  # the shortest decimal that rounds to it: 0.3, not float32's 0.30000001192092896
        v = next((c for c in (float(f"{v:.{d}g}") for d in range(1, 18)) if torch.tensor(c, dtype=t.dtype).item() == v), v)
    return v


def _live(nodes: list[Node], outputs: list[Node]) -> list[Node]:
    """The nodes the outputs need, the leaves, and every PyTorch call but a flip (a call may
    update a buffer in place): a handler's rewrite (a flip absorbed by a scan) leaves the rest."""
    live: set[int] = set()
    stack = list(outputs) + [n for n in nodes if n.is_leaf or n.kind == "extern" and n.op not in PURE_CALLS]
    while stack:
        n = stack.pop()
        if id(n) not in live:
            live.add(id(n))
            stack += n.inputs
    return [n for n in nodes if id(n) in live]


def schema_args(target, args, kwargs) -> dict[str, Any]:
    """ATen arguments by schema name, defaults filled in."""
    out: dict[str, Any] = {}
    for i, a in enumerate(target._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


def call(b: Builder, target, args, kwargs, val) -> Node | tuple | None:
    """One exported call as primitives: its handler's, or an extern node when no handler takes it."""
    if target is operator.getitem:
        container, i = args
        if isinstance(container, (tuple, list)):
            return container[i]
        return _extern(b, target, args, kwargs, val)
    if not isinstance(target, torch._ops.OpOverload):
        return _extern(b, target, args, kwargs, val)
    name = target._opname
    args = _mode_dynamic(name, list(args))
    handler = HANDLERS.get(name)
    if handler is not None:
        a = schema_args(target, args, kwargs)
        try:
            out = handler(b, a, target)
        except Unsupported:
            out = None
        if out is not None:
            return out
    return _extern(b, target, args, kwargs, val)

def _mode_dynamic(name: str, args: list) -> tuple:
    """The reference is traced in training mode, and a few calls take that mode as a constant:
    batch norm's `training` (where it has running statistics: without them it always uses the
    batch's), dropout's `train`, and the step of `num_batches_tracked`, which only training takes.
    Those constants become the module's flag, read at run time (docs/design.md, "Module modes and state")."""
    if name == "batch_norm" and len(args) > 5 and args[5] is True and args[3] is not None:
        args[5] = ModeFlag()
    elif name in ("dropout", "native_dropout") and len(args) > 2 and args[2] is True:
        args[2] = ModeFlag()
    elif (name == "add_" and len(args) == 2 and args[1] == 1 and isinstance(args[0], Node) and args[0].kind == "param"
          and args[0].op.endswith("num_batches_tracked")):
        args[1] = ModeFlag()  # adds True (1) in training, False (0) in eval
    return tuple(args)


def _extern(b: Builder, target, args, kwargs, val) -> Node | tuple | None:
    if target is torch.ops.aten._assert_tensor_metadata.default:
        return None  # a check export adds; nothing to compute
    if isinstance(val, (tuple, list)):
        n = b.add(Node("extern", str(target), tuple(args), (), torch.float32, target=target, kwargs=dict(kwargs)))
        outs = []
        for i, v in enumerate(val):
            outs.append(b.add(Node("extern", "getitem", (n, i), tuple(v.shape), v.dtype, target=operator.getitem)))
        return tuple(outs)
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"{target} returns a non-tensor")
    return b.add(Node("extern", str(target), tuple(args), tuple(val.shape), val.dtype, target=target, kwargs=dict(kwargs)))


def op_description(n: Node) -> str:
    """An extern node's op, overload aside, with its class: "aten.cumsum (scan)"."""
    parts = n.op.split(".")
    name = ".".join(parts[:2])
    kind = OP_CLASSES.get(parts[1]) if len(parts) > 1 else None
    return f"{name} ({kind})" if kind else name
