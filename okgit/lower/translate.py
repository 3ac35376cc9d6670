"""An exported program translated into a captured graph: ATen calls dispatched to handlers.

Each call_function node goes to its ATen handler (okgit.lower.aten); an op no handler takes,
or one a handler refuses, becomes an `extern` node the rewritten forward leaves to PyTorch.
Where a torch.nn module's own forward made that call, the integer arguments it passes from
its attributes (a pooling window, a convolution's stride and groups) become `ModuleArg`s, read
from the module at run time rather than baked, so they may follow the shape knobs.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from okgit.lower.aten import HANDLERS
from okgit.lower.builder import Builder
from okgit.lower.graph import Graph, ModeFlag, ModuleArg, Node, Unsupported, module_expr

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


def translate(ep, forward_args: list[str], entry: str, model: torch.nn.Module | None = None) -> Graph:
    """The exported program as a Graph: its placeholders as leaves, each call as primitives;
    with the exported `model`, the arguments its torch.nn modules pass from their attributes
    bound to them (`ModuleArg`)."""
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
            else:
                raise Unsupported(f"unsupported graph input kind {spec.kind}")
        elif fx.op == "call_function":
            args = torch.fx.node.map_arg(fx.args, lambda a: env[a.name])
            kwargs = torch.fx.node.map_arg(fx.kwargs, lambda a: env[a.name])
            env[fx.name] = call(b, fx.target, args, kwargs, fx.meta.get("val"))
            if isinstance(env[fx.name], Node) and env[fx.name].kind == "extern" and model is not None:
                _module_args(env[fx.name], fx.meta.get("nn_module_stack"), model)
        elif fx.op == "output":
            outs = fx.args[0]
            flat = [env[o.name] for o in outs]
            if not all(isinstance(o, Node) for o in flat):
                raise Unsupported("an output is not a tensor")
            return Graph(b.nodes, flat, len(flat) > 1, forward_args, entry)
        else:
            raise Unsupported(f"unsupported graph node {fx.op}")
    raise Unsupported("graph without output")



def schema_args(target, args, kwargs) -> dict[str, Any]:
    """ATen arguments by schema name, defaults filled in."""
    out: dict[str, Any] = {}
    schema_args = target._schema.arguments
    for i, a in enumerate(schema_args):
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

def _module_args(n: Node, stack: dict | None, model: torch.nn.Module) -> None:
    """Bind n's arguments that its torch.nn module passed from the attribute of the same name
    (`MaxPool2d.kernel_size`, `Conv2d.groups`): a module of torch.nn passes them unchanged, and
    each is checked equal to the attribute as traced. A user's module is left alone: its
    attribute `stride` need not be what its forward passes."""
    if not stack or not isinstance(n.target, torch._ops.OpOverload):
        return
    path, cls = list(stack.values())[-1]
    if not str(cls).startswith("torch.nn.modules."):
        return
    try:
        mod = model.get_submodule(path)
    except AttributeError:
        return
    names = [a.name for a in n.target._schema.arguments]
    n.args = tuple(_from_attr(a, mod, path, names[i]) if i < len(names) else a for i, a in enumerate(n.args))
    n.kwargs = {k: _from_attr(v, mod, path, k) for k, v in n.kwargs.items()}


def _from_attr(traced: Any, mod: torch.nn.Module, path: str, name: str) -> Any:
    """`traced` as a ModuleArg reading `mod.<name>` in the form the call takes it, where the two
    agree; else `traced` itself. Only ints, bools and lists of ints (sizes, flags)."""
    attr = getattr(mod, name, None) if name.isidentifier() else None
    expr = f"{module_expr(path)}.{name}"
    if type(traced) in (int, bool) and type(attr) is type(traced) and attr == traced:
        return ModuleArg(traced, expr)
    if not isinstance(traced, (list, tuple)) or not traced or any(type(v) is not int for v in traced):
        return traced  # (fx hands lists over as its immutable_list)
    if type(attr) is int and all(v == attr for v in traced):
        return ModuleArg(traced, f"[{expr}] * {len(traced)}")
    if isinstance(attr, (tuple, list)) and list(attr) == list(traced) and all(type(v) is int for v in attr):
        return ModuleArg(traced, f"list({expr})")
    return traced


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
