"""Capture a reference op's computation as a small graph the kernel templates can lower.

The reference `Model` is built and exported with torch.export on the meta device (shapes
without memory or compute), and each ATen node is translated into a few primitives:

- `input` / `param`: tensors the forward receives or the module owns (leaves),
- `op`: an elementwise primitive (add, exp, where, ...), broadcasting like torch,
- `reduce`: sum / max / min / argmax / argmin over some dims,
- `count`: the number of elements a reduce folds (a runtime size, never a baked constant),
- `iota`: the coordinate along one dim (for picking a class in a loss),
- `view`: a reshape that only adds or drops size-1 dims (no data movement),
- `extern`: anything else, left to PyTorch (matmul, convolution, unknown ops).

Composite ops (softmax, layer norm, losses, GELU, ...) are expanded into primitives here, so
the lowering sees one vocabulary. Then `okgit.search.fusion.partition` cuts the graph into
fusion groups.

The graph is captured twice, with the shape knobs at their defaults and changed: a scalar
that differs between the two (`x / math.sqrt(dim)`, a view to a knob-sized shape) depends on
a knob, and a lowering that baked it would be wrong at other sizes, so capture refuses.

torch.export turns the module's Python float attributes (`self.temperature`, `self.eps`,
`self.norm.eps`, ...) into literals. A kernel that baked them would be wrong for another
`Model(...)`, so capture also perturbs each float attribute in turn: the constants that move
are matched to an expression of that one attribute (`k * a**p + m`, `k * log(a) + m`, ...,
fitted on two changed values, checked on a third) and become `Bound` constants, which the
lowering reads from `self` at run time. A constant that moves with a float the constructor's
arguments set but matches no such expression, or a computation whose structure changes with
it, is refused (a float the class fixes, `nn.Softplus()`'s beta, may stay baked). Last, the
constructor's float arguments are all scaled by 1.5 (as the evaluator's check does) and every
constant must follow its binding or stay put.
"""

from __future__ import annotations

import inspect
import math
import operator
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import torch

from okgit.problem import Problem

FLOAT = (torch.float32, torch.float16, torch.bfloat16)


class Unsupported(Exception):
    """The reference cannot be captured or lowered; the message says why."""


class Bound(float):
    """A constant computed from the module's float attributes: `expr` (Python over `self`)
    recomputes it in the rewritten forward, so it reaches a kernel as a runtime argument.
    `expr` is one Python expression (`self.eps`, `1.0 - self.p`, `0.5 * self.beta`, ...)."""

    expr: str

    def __new__(cls, value: float, expr: str) -> Self:
        obj = super().__new__(cls, value)
        obj.expr = expr
        return obj

    def __repr__(self) -> str:
        return f"Bound({self.expr})"


@dataclass(eq=False)
class Node:
    kind: str  # input | param | op | reduce | count | iota | view | extern
    op: str  # primitive name; input: forward argument; param: qualified name; extern: "aten.x.y"
    args: tuple = ()
    shape: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32
    dims: tuple[int, ...] = ()  # reduce: own dims folded; iota: (dim,)
    keepdim: bool = False
    target: Any = None  # extern: the callable (OpOverload or operator.getitem)
    kwargs: dict = field(default_factory=dict)
    gemm: bool = False  # extern matmul that a Triton GEMM may replace

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


# ---------------------------------------------------------------------------------------------
# Capture


def capture(problem: Problem) -> Graph:
    """The reference's graph at its default knobs, its attribute constants bound, checked
    against a second knob setting and against scaled constructor floats."""
    graph = _capture(problem.source, {})
    bindings = _bind_attributes(problem.source, graph)
    changed = {k: v + 3 for k, v in problem.knobs.items() if v >= 8}
    if changed:
        try:
            other = _capture(problem.source, changed)
        except Exception:  # noqa: BLE001 - the second setting may be invalid for this op
            other = None
        if other is not None:
            _apply_bindings(other, bindings)
            if [n.signature() for n in graph.nodes] != [n.signature() for n in other.nodes]:
                raise Unsupported("the computation's constants depend on the shape knobs")
    _check_scaled_init(problem.source, graph)
    return graph


def _instantiate(
    source: str, knobs: dict[str, int], init_scale: float | None = None, tweak: Callable[[torch.nn.Module], None] | None = None
) -> tuple[dict[str, Any], torch.nn.Module, tuple]:
    """The op module, its reference Model and its inputs, on the meta device (shapes only).

    `init_scale` multiplies every float of get_init_inputs; `tweak` edits the built model."""
    with tempfile.TemporaryDirectory() as tmp:
        # a real file: @triton.jit in the op file reads its own source
        path = Path(tmp) / "reference.py"
        path.write_text(source)
        ns: dict[str, Any] = {"__name__": "okgit_reference", "__file__": str(path)}
        try:
            exec(compile(source, str(path), "exec"), ns)  # noqa: S102 - the user's own op file
            ns.update(knobs)
            with torch.device("meta"):
                init = ns["get_init_inputs"]()
                if init_scale is not None:
                    init = _scale_floats(init, init_scale)
                model = ns["Model"](*init)
                if tweak is not None:
                    tweak(model)
                inputs = tuple(ns["get_inputs"]())
        except Exception as e:  # noqa: BLE001 - any failure here means: not ours to lower
            raise Unsupported(f"cannot build the reference: {type(e).__name__}: {str(e)[:200]}") from None
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise Unsupported("get_inputs returns non-tensor values")
    return ns, model, inputs


def input_extent(problem: Problem) -> tuple[int, int]:
    """(largest numel, largest dim) over the reference's inputs and parameters, default knobs."""
    _, model, inputs = _instantiate(problem.source, {})
    tensors = list(inputs) + list(model.parameters()) + list(model.buffers())
    numel = max((t.numel() for t in tensors), default=1)
    dim = max((s for t in tensors for s in t.shape), default=1)
    return numel, dim


def _capture(source: str, knobs: dict[str, int], init_scale: float | None = None, tweak=None) -> Graph:
    ns, model, inputs = _instantiate(source, knobs, init_scale, tweak)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(model, inputs, strict=False)
    except Exception as e:  # noqa: BLE001 - any failure to trace means: not ours to lower
        if "triton.jit" in source:  # its own kernels run only on a device, not on the meta tensors of a capture
            raise Unsupported("the reference launches its own Triton kernel, which a capture cannot see into; "
                              "the autotune phase tunes that kernel instead") from None
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise Unsupported(f"cannot trace the reference: {type(e).__name__}: {first}") from None
    names = list(inspect.signature(model.forward).parameters)
    return _translate(ep, names, "ModelNew" if "ModelNew" in ns else "Model")


# ---------------------------------------------------------------------------------------------
# Constants from the module's float attributes


def _scale_floats(value, factor: float):
    """`value` with every float (inside lists and tuples too) multiplied by `factor`."""
    if isinstance(value, float):
        return value * factor
    if type(value) in (list, tuple):
        return type(value)(_scale_floats(v, factor) for v in value)
    return value


def _module_expr(path: str) -> str:
    return "self" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in path.split(".") if p)


@dataclass
class _Attr:
    """One float the model holds: `module.name`, or `module.name[index]` in a list or tuple."""

    path: str  # the owning module's qualified name ("" for the model)
    name: str
    index: int | None
    value: float

    @property
    def expr(self) -> str:
        base = _module_expr(self.path) + f".{self.name}"
        return base if self.index is None else f"{base}[{self.index}]"

    def setter(self, value: float) -> Callable[[torch.nn.Module], None]:
        def tweak(model: torch.nn.Module) -> None:
            mod = model.get_submodule(self.path)
            if self.index is None:
                setattr(mod, self.name, value)
            else:
                old = getattr(mod, self.name)
                new = list(old)
                new[self.index] = value
                setattr(mod, self.name, type(old)(new))

        return tweak


def _float_attrs(model: torch.nn.Module) -> list[_Attr]:
    out = []
    for path, mod in model.named_modules():
        for name, v in vars(mod).items():
            if name.startswith("__") or not name.isidentifier():
                continue
            if isinstance(v, float):
                out.append(_Attr(path, name, None, float(v)))
            elif type(v) in (list, tuple):
                out += [_Attr(path, name, i, float(x)) for i, x in enumerate(v) if isinstance(x, float)]
    return out


def _constants(graph: Graph) -> tuple[list, dict[tuple, float]]:
    """The graph with its float constants taken out (a skeleton that must not change when only
    an attribute's value does; sizes aside, the kernels read them at run time), and those
    constants by position (node index, arg path)."""
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    floats: dict[tuple, float] = {}

    def walk(x, pos):
        if isinstance(x, Node):
            return ("node", index.get(id(x)))
        if isinstance(x, (list, tuple)):
            return (type(x).__name__, tuple(walk(y, pos + (j,)) for j, y in enumerate(x)))
        if isinstance(x, dict):
            return ("dict", tuple((k, walk(v, pos + (k,))) for k, v in sorted(x.items())))
        if isinstance(x, float):
            floats[pos] = x  # a Bound stays one
            return "float"
        return repr(x)

    skeleton = [
        (n.kind, n.op, len(n.shape), str(n.dtype), n.dims, n.keepdim, walk(n.args, (i, "args")), walk(n.kwargs, (i, "kwargs")))
        for i, n in enumerate(graph.nodes)
    ]
    skeleton.append(tuple(index.get(id(o)) for o in graph.outputs))
    return skeleton, floats


def _replace(graph: Graph, pos: tuple, value) -> None:
    node = graph.nodes[pos[0]]

    def put(x, path):
        if not path:
            return value
        k, rest = path[0], path[1:]
        if isinstance(x, dict):
            return {**x, k: put(x[k], rest)}
        items = list(x)
        items[k] = put(items[k], rest)
        return type(x)(items)

    if pos[1] == "args":
        node.args = put(node.args, pos[2:])
    else:
        node.kwargs = put(node.kwargs, pos[2:])


def _apply_bindings(graph: Graph, bindings: dict[tuple, str]) -> None:
    """Mark the constants at the bound positions of another capture of the same op as Bound."""
    _, floats = _constants(graph)
    for pos, expr in bindings.items():
        if pos in floats:
            _replace(graph, pos, Bound(float(floats[pos]), expr))


def _nice(x: float) -> float:
    """x rounded to the fewest decimals that keep it to 12 significant digits (0.5, not 0.5000000000000001)."""
    for digits in range(16):
        r = round(x, digits)
        if abs(r - x) <= 1e-12 * max(abs(x), 1e-300):
            return r
    return x


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b)) or (math.isnan(a) and math.isnan(b))


# c = k * f(a) + m: the forms a constant may take of one attribute `a`
_FORMS: list[tuple[Callable[[float], float], str]] = [
    (lambda a: a, "{a}"),
    (lambda a: 1.0 / a, "1.0 / {a}"),
    (lambda a: a * a, "{a} * {a}"),
    (lambda a: 1.0 / (a * a), "1.0 / ({a} * {a})"),
    (math.sqrt, "math.sqrt({a})"),
    (lambda a: 1.0 / math.sqrt(a), "1.0 / math.sqrt({a})"),
    (math.log, "math.log({a})"),
    (math.exp, "math.exp({a})"),
]


def _fit(points: list[tuple[float, float]], attr: str) -> str | None:
    """A Python expression of `attr` through every (attribute value, constant) point, or None."""
    (a0, c0), (a1, c1) = points[:2]
    for f, fmt in _FORMS:
        try:
            u0, u1 = f(a0), f(a1)
            if u0 == u1 or not all(math.isfinite(v) for v in (u0, u1, c0, c1)):
                continue
            k = _nice((c1 - c0) / (u1 - u0))
            m = _nice(c0 - k * u0)
            if k == 0:
                continue
            term = fmt.format(a=attr)
            if abs(k) != 1:
                term = f"{abs(k)!r} / {term[6:]}" if term.startswith("1.0 / ") else f"{abs(k)!r} * {term}"
            if m == 0:
                expr = f"-{term}" if k < 0 else term
            else:
                expr = f"{m!r} {'-' if k < 0 else '+'} {term}"
            if all(_close(_eval(expr, {attr: a}), c) for a, c in points):
                return expr
        except (ValueError, ZeroDivisionError, OverflowError):
            continue
    return None


def _eval(expr: str, values: dict[str, float]) -> float:
    for name, v in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, f"({v!r})")
    return float(eval(expr, {"math": math, "__builtins__": {}}))  # our own expression


MAX_ATTRS = 32  # float attributes probed one by one; past that, constructor floats must not move anything


def _bind_attributes(source: str, graph: Graph) -> dict[tuple, str]:
    """Turn the constants that come from the model's float attributes into Bound constants.

    Each attribute is moved to a second and third value in turn (x1.5 and x0.6, or 0.5 and
    0.25 from 0) and the graph captured again: the structure must stay, and each constant that
    moves must be one expression of that one attribute, else capture refuses. Except for an
    attribute the constructor's floats do not set (`nn.Softplus()`'s beta of 1, an attribute
    at 0 or set from an int): the class fixes it, and what cannot be bound stays baked."""
    _, model, _ = _instantiate(source, {})
    attrs = _float_attrs(model)
    if len(attrs) > MAX_ATTRS:
        return {}
    try:
        _, scaled, _ = _instantiate(source, {}, init_scale=1.5)
        after = {a.expr: a.value for a in _float_attrs(scaled)}
    except Unsupported:
        after = {}
    from_init = {a.expr for a in attrs if not _close(after.get(a.expr, math.nan), a.value)}
    attrs.sort(key=lambda a: a.expr not in from_init)  # those first: a fixed one may scale them
    skeleton, floats = _constants(graph)
    bindings: dict[tuple, str] = {}
    owner: dict[tuple, str] = {}  # position -> the attribute its binding reads
    for attr in attrs:
        a0 = attr.value
        if not math.isfinite(a0):
            continue
        values = (0.5, 0.25) if a0 == 0 else (a0 * 1.5, a0 * 0.6)
        seen: list[dict[tuple, float]] = []
        mine: dict[tuple, str] = {}  # this attribute's constants
        why = None
        for a in values:
            try:
                other = _capture(source, {}, tweak=attr.setter(a))
            except Exception:  # noqa: BLE001 - the op may reject the value
                other, why = None, f"the reference cannot be captured with {attr.expr} changed"
            if other is not None:
                sk, fl = _constants(other)
                if sk != skeleton:
                    why = f"the computation's structure depends on {attr.expr}"
                else:
                    seen.append(fl)
                    moved = [p for p in floats if not _close(fl[p], floats[p])]
                    if not moved:
                        break  # the attribute does not reach the computation
            if why:
                break
        else:
            for p in floats:
                if all(_close(fl[p], floats[p]) for fl in seen):
                    continue
                if p in bindings:
                    why = f"a constant depends on both {owner[p]} and {attr.expr}"
                    break
                points = [(a0, floats[p])] + [(a, fl[p]) for a, fl in zip(values, seen)]
                expr = _fit(points, "ATTR")
                if expr is None:
                    why = f"a constant depends on {attr.expr} in a way the templates cannot recompute"
                    break
                mine[p] = expr.replace("ATTR", attr.expr)
        if why:
            if attr.expr not in from_init:
                continue
            raise Unsupported(why)
        bindings.update(mine)
        owner.update(dict.fromkeys(mine, attr.expr))
    _apply_bindings(graph, bindings)
    return bindings


def _check_scaled_init(source: str, graph: Graph) -> None:
    """With the constructor's floats x1.5, each constant follows its binding or stays put."""
    ns, _, _ = _instantiate(source, {})
    try:
        with torch.device("meta"):
            init = ns["get_init_inputs"]()
    except Exception:  # noqa: BLE001 - _instantiate built it already
        return
    if _scale_floats(init, 1.5) == init:
        return
    try:
        _, model, _ = _instantiate(source, {}, init_scale=1.5)
        other = _capture(source, {}, init_scale=1.5)
    except Exception:  # noqa: BLE001
        return  # the scaled arguments are not valid for this op: nothing to compare
    skeleton, floats = _constants(graph)
    sk, fl = _constants(other)
    if sk != skeleton:
        raise Unsupported("the computation's structure depends on the constructor's float arguments")
    for p, c in floats.items():
        want = float(eval(c.expr, {"math": math, "self": model})) if isinstance(c, Bound) else c
        if not _close(fl[p], want):
            raise Unsupported("a constant depends on a constructor argument the module does not keep as a float attribute")


def _translate(ep, forward_args: list[str], entry: str) -> Graph:
    from torch.export.graph_signature import InputKind

    b = _Builder()
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
            env[fx.name] = b.call(fx.target, args, kwargs, fx.meta.get("val"))
        elif fx.op == "output":
            outs = fx.args[0]
            flat = [env[o.name] for o in outs]
            if not all(isinstance(o, Node) for o in flat):
                raise Unsupported("an output is not a tensor")
            return Graph(b.nodes, flat, len(flat) > 1, forward_args, entry)
        else:
            raise Unsupported(f"unsupported graph node {fx.op}")
    raise Unsupported("graph without output")


# ---------------------------------------------------------------------------------------------
# ATen -> primitives


def _bind(target, args, kwargs) -> dict[str, Any]:
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


def _reduced_shape(shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _dims(x: Node, dims) -> tuple[int, ...]:
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


COMPARE = {"gt", "ge", "lt", "le", "eq", "ne", "and", "or", "not"}


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._seen: dict[tuple, Node] = {}  # elementwise ops by operands: composites share work


    def add(self, n: Node) -> Node:
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
        dims = _dims(x, dims)
        if name in ("argmax", "argmin") or name == "sum" and not x.dtype.is_floating_point:
            dtype = torch.int64
        else:
            dtype = x.dtype
        return self.add(Node("reduce", name, (x,), _reduced_shape(x.shape, dims, keepdim), dtype, dims, keepdim))

    def mean(self, x: Node, dims, keepdim: bool, correction: float = 0.0, of: Node | None = None) -> Node:
        s = self.reduce("sum", of if of is not None else x, dims, keepdim)
        n = self.add(Node("count", "count", (s,), (), torch.float32))
        if correction:
            n = self.op("sub", n, float(correction))
        return self.op("div", s, n)

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
        return out if keepdim else self.view(out, _reduced_shape(x.shape, _dims(x, dims), False))

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

    # ATen dispatch ------------------------------------------------------------------------
    def call(self, target, args, kwargs, val) -> Node | tuple:
        if target is operator.getitem:
            container, i = args
            if isinstance(container, (tuple, list)):
                return container[i]
            return self._extern(target, args, kwargs, val)
        if not isinstance(target, torch._ops.OpOverload):
            return self._extern(target, args, kwargs, val)
        name = target._opname
        handler = _HANDLERS.get(name)
        if handler is not None:
            a = _bind(target, args, kwargs)
            try:
                out = handler(self, a, target)
            except Unsupported:
                out = None
            if out is not None:
                return out
        return self._extern(target, args, kwargs, val, gemm=name in GEMM_OPS)

    def _extern(self, target, args, kwargs, val, gemm: bool = False) -> Node | tuple:
        if target is torch.ops.aten._assert_tensor_metadata.default:
            return None  # a check export adds; nothing to compute
        flat = [a for a in _flatten(args) if isinstance(a, Node)]
        if isinstance(val, (tuple, list)):
            n = self.add(Node("extern", str(target), tuple(args), (), torch.float32, target=target, kwargs=dict(kwargs)))
            outs = []
            for i, v in enumerate(val):
                outs.append(self.add(Node("extern", "getitem", (n, i), tuple(v.shape), v.dtype, target=operator.getitem)))
            return tuple(outs)
        if not isinstance(val, torch.Tensor):
            raise Unsupported(f"{target} returns a non-tensor")
        gemm = gemm and len(flat) >= 2 and all(len(a.shape) == 2 for a in flat[:2]) and val.dtype == torch.float32
        return self.add(Node("extern", str(target), tuple(args), tuple(val.shape), val.dtype, target=target, kwargs=dict(kwargs), gemm=gemm))


def _flatten(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flatten(a)
        else:
            yield a


GEMM_OPS = {"linear", "mm", "addmm", "matmul"}

Handler = Callable[[_Builder, dict, Any], Any]
_HANDLERS: dict[str, Handler] = {}


def _h(*names: str):
    def deco(fn: Handler) -> Handler:
        for n in names:
            _HANDLERS[n] = fn
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
    _HANDLERS[_aten] = _unary(_prim)


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
    return b.op("mul", a["self"], b.op("tanh", b.softplus(a["self"])))


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


@_h("clone", "contiguous", "alias", "detach", "lift_fresh_copy")
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
        dims = range(len(x.shape)) if dims is None else _dims(x, dims)
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
