"""The shapes the Inductor seed is compiled for, before and after torch.compile traces it.

Before: which dims are dynamic. Every dim of an input, parameter or buffer that follows a shape
knob (found by building the op on the meta device with each knob changed, as the evaluator's
extra shapes change them) and the batch (dim 0 of each input) is marked dynamic; the others,
and any dynamic dim the code specialises (a view to a literal size, a size of 1), stay static.

After: everything the compiled code assumed, as Python the standalone file checks before it
takes the compiled path (`Assumed`): how each argument of Inductor's `call` is read from the
forward's arguments, the module and the file's globals (`self.lin.weight`, `x.size(0)`); each
size symbol's source; each tensor's shape and strides as expressions of those symbols, its
dtype and device; the relations and ranges between the symbols that tracing and Inductor
relied on (a view's divisibility, 32-bit indexing); and the constants dynamo read as such (a
module attribute `self.eps`, a global knob that a forward reads). Each expression is checked
here, on the objects it was compiled from, to name the object dynamo's source names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from okgit.eval.worker.calls import load_op
from okgit.problem import shape_knobs

CONSTANT_GUARDS = ("CONSTANT_MATCH", "EQUALS_MATCH")  # dynamo's guards on a value it baked in
_LOCAL = re.compile(r"\bL\['(\w+)'\]")
_GLOBAL = re.compile(r"\bG\['(\w+)'\]")
_MEMBER = re.compile(r"\._(?:modules|parameters|buffers)\['([A-Za-z_]\w*)'\]")
_SIZE = re.compile(r"\.(size|stride)\(\)\[(\d+)\]")


class NotAssumable(Exception):
    """What the compiled code assumed cannot be checked from a standalone file (says why)."""


@dataclass
class Assumed:
    """What a compiled graph needs of its arguments, as Python over the forward's names."""

    args: list[str]  # each argument of Inductor's call(args), in order
    symbols: dict[str, str]  # size symbol -> the expression it is read from
    tensors: list[dict[str, Any]]  # {expr, ndim, shape, stride, dtype, device}, shape/stride as expressions
    relations: list[str]  # boolean expressions over the symbols
    constants: dict[str, Any] = field(default_factory=dict)  # expression -> the value compiled in


def dynamic_dims(path: str, knobs: dict[str, int]) -> tuple[list[set[int]], dict[str, set[int]]]:
    """(per input, per parameter or buffer name) the dims to compile dynamic: those that follow a
    knob, and each input's dim 0 (the batch)."""
    import torch

    with open(path) as f:
        all_knobs = {**shape_knobs(f.read(), path), **knobs}
    base = _meta_shapes(torch, path, all_knobs)
    if base is None:
        return [], {}
    inputs = [{0} if len(s) else set() for s in base[0]]
    named: dict[str, set[int]] = {name: set() for name in base[1]}
    for knob, value in all_knobs.items():
        # doubling keeps the divisibility a setting such as groups needs; +1 where doubling gives the same
        for changed in (2 * value, value + 1):
            other = _meta_shapes(torch, path, {**all_knobs, knob: changed}) if changed != value else None
            if other is not None:
                break
        if other is None:
            continue
        for dims, old, new in zip(inputs, base[0], other[0]):
            dims |= _differing(old, new)
        for name, dims in named.items():
            if name in other[1]:
                dims |= _differing(base[1][name], other[1][name])
    return inputs, named


def _meta_shapes(torch: Any, path: str, knobs: dict[str, int]) -> tuple[list[tuple], dict[str, tuple]] | None:
    """The op's input shapes and its parameters' and buffers' by name, built on the meta device."""
    try:
        module = load_op(path, "okgit_shapes", knobs)
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
            inputs = list(module.get_inputs())
    except Exception:  # noqa: BLE001 - a setting the op does not take tells nothing
        return None
    tensors = {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers(remove_duplicate=False))}
    return ([tuple(x.shape) if isinstance(x, torch.Tensor) else () for x in inputs],
            {name: tuple(t.shape) for name, t in tensors.items()})


def _differing(old: tuple, new: tuple) -> set[int]:
    if len(old) != len(new):
        return set(range(len(old)))
    return {d for d, (a, b) in enumerate(zip(old, new)) if a != b}


def mark_dynamic(torch: Any, model: Any, inputs: tuple, dims: tuple[list[set[int]], dict[str, set[int]]]) -> None:
    """Mark the dims dynamic where the tracing may keep them so (a size of 1 or a dim the
    code specialises stays static)."""
    per_input, named = dims
    for x, ds in zip(inputs, per_input):
        for d in sorted(ds):
            torch._dynamo.maybe_mark_dynamic(x, d)
    tensors = {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers(remove_duplicate=False))}
    for name, ds in named.items():
        for d in sorted(ds):
            torch._dynamo.maybe_mark_dynamic(tensors[name], d)


def source_name(source: Any) -> str:
    """A dynamo source's Python text (`L['self']._modules['lin']._parameters['weight']`); a method in older torch."""
    name = source.name
    return str(name() if callable(name) else name)


def python_expr(source: str) -> str:
    """Dynamo's source text as the standalone forward writes it: `self.lin.weight`, `x.size(0)`, `eps`."""
    text = _LOCAL.sub(r"\1", source)
    text = _GLOBAL.sub(r"\1", text)
    text = _MEMBER.sub(r".\1", text)
    return _SIZE.sub(r".\1(\2)", text)


class Reader:
    """Evaluates dynamo's sources and their Python forms on the objects compiled from."""

    def __init__(self, model: Any, forward_args: list[str], inputs: tuple, module_globals: dict[str, Any]) -> None:
        self.names = dict(zip(forward_args, inputs))
        self.dynamo_scope = {"L": {"self": model, **self.names}, "G": module_globals}
        self.python_scope = {**module_globals, "self": model, **self.names}

    def expr(self, source: str) -> str:
        """The Python form of a source, checked to read the same object or value."""
        text = python_expr(source)
        try:
            want = eval(source, dict(self.dynamo_scope))  # dynamo's own source text, in the capture's child
            got = eval(text, dict(self.python_scope))
        except Exception as e:  # noqa: BLE001
            raise NotAssumable(f"the compiled graph reads {source}, which a standalone file cannot: {type(e).__name__}") from None
        if not (got is want or (not hasattr(want, "shape") and got == want)):
            raise NotAssumable(f"{text} does not read what dynamo's {source} does")
        return text

    def value(self, source: str) -> Any:
        return eval(source, dict(self.dynamo_scope))

    def in_library(self, source: str) -> bool:
        """Whether the source reads an imported module's attribute (`torch.bool`, `math.pi`), not
        the op's own state."""
        root = _GLOBAL.match(source)
        return root is not None and isinstance(self.dynamo_scope["G"].get(root.group(1)), ModuleType)


def assumed(torch: Any, shape_env: Any, placeholders: list[tuple[Any, Any]], guards: list[tuple[str, str]],
            reader: Reader) -> Assumed:
    """What the graph compiled from these (source, example value) placeholders assumed."""
    import sympy
    from torch.utils._sympy.printers import PythonPrinter

    printer = PythonPrinter()

    def sym(v: Any) -> str:
        expr = v.node.expr if isinstance(v, torch.SymInt) else v
        return printer.doprint(shape_env.simplify(expr)) if shape_env is not None and not isinstance(expr, int) else str(int(expr))

    args, tensors, free = [], [], set()
    for source, value in placeholders:
        text = reader.expr(source)
        args.append(text)
        if isinstance(value, torch.SymInt):
            free |= value.node.expr.free_symbols
        elif isinstance(value, torch.Tensor):
            sizes, strides = list(value.shape), list(value.stride())
            for v in sizes + strides:
                if isinstance(v, torch.SymInt):
                    free |= shape_env.simplify(v.node.expr).free_symbols
            tensors.append({"expr": text, "ndim": value.dim(), "shape": [sym(v) for v in sizes],
                            "stride": [sym(v) for v in strides], "dtype": str(value.dtype), "device": value.device.type})
        else:
            raise NotAssumable(f"the compiled graph takes {source}, neither a tensor nor a size")
    relations = []
    if shape_env is not None:
        for g in shape_env.guards:
            expr = shape_env.simplify(g.expr)
            if expr == sympy.true:  # settled by the replacements (a size equal to another)
                continue
            free |= expr.free_symbols
            relations.append(printer.doprint(expr))
        for s in sorted(free, key=str):
            bounds = shape_env.var_to_range.get(s)
            if bounds is not None and isinstance(bounds.lower, sympy.Integer):  # not -oo
                relations.append(f"{s} >= {int(bounds.lower)}")
            if bounds is not None and isinstance(bounds.upper, sympy.Integer):
                relations.append(f"{s} <= {int(bounds.upper)}")
    symbols = {}
    for s in sorted(free, key=str):
        sources = shape_env.var_to_sources.get(s, [])
        if not sources:
            raise NotAssumable(f"the size {s} the compiled graph uses has no source")
        symbols[str(s)] = reader.expr(source_name(sources[0]))
    constants = {}
    for name, kind in guards:
        if kind not in CONSTANT_GUARDS or not name or reader.in_library(name):
            continue
        value = reader.value(name)
        if not _literal(value):
            raise NotAssumable(f"the compiled graph bakes in {name} = {value!r}, which a file cannot check")
        constants[reader.expr(name)] = value
    return Assumed(args, symbols, tensors, list(dict.fromkeys(relations)), constants)


def _literal(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, tuple) and all(_literal(v) for v in value)
