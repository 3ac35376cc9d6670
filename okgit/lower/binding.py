"""Constants from the module's float attributes, bound to expressions of `self`.

torch.export turns the module's Python float attributes (`self.temperature`, `self.eps`,
`self.norm.eps`, ...) into literals. A kernel that baked them would be wrong for another
`Model(...)`, so each float attribute is perturbed in turn: the constants that move are
matched to an expression of that one attribute (`k * a**p + m`, `k * log(a) + m`, ...,
fitted on two changed values, checked on a third) and become `Bound` constants, which the
lowering reads from `self` at run time. A constant that moves with a float the constructor's
arguments set but matches no such expression, or a computation whose structure changes with
it, is refused (a float the class fixes, `nn.Softplus()`'s beta, may stay baked). Last, the
constructor's float arguments are all perturbed as the evaluator's init_inputs check does
(okgit.problem.perturb_floats) and every constant must follow its binding or stay put.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from okgit.lower.graph import Bound, BoundInt, Graph, Node, Unsupported, module_expr
from okgit.lower.trace import instantiate, trace
from okgit.problem import perturb_floats


@dataclass
class _Attr:
    """One float the model holds: `module.name`, or `module.name[index]` in a list or tuple."""

    path: str  # the owning module's qualified name ("" for the model)
    name: str
    index: int | None
    value: float

    @property
    def expr(self) -> str:
        base = module_expr(self.path) + f".{self.name}"
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
        return repr(int(x)) if isinstance(x, BoundInt) else repr(x)  # as a capture that bound no int has it

    skeleton: list[tuple[Any, ...]] = [
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


def apply_bindings(graph: Graph, bindings: dict[tuple, str]) -> None:
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
# An attribute is moved to these multiples of its value (to these values from 0): two changed
# values fit an expression, the attribute's own value checks it.
PROBE_FACTORS = (1.5, 0.6)
PROBES_FROM_ZERO = (0.5, 0.25)


def bind_attributes(source: str, graph: Graph) -> dict[tuple, str]:
    """Turn the constants that come from the model's float attributes into Bound constants.

    Each attribute is moved to a second and third value in turn (PROBE_FACTORS of it, or
    PROBES_FROM_ZERO from 0) and the graph captured again: the structure must stay, and each
    constant that moves must be one expression of that one attribute, else capture refuses.
    Except for an attribute the constructor's floats do not set (`nn.Softplus()`'s beta of 1, an attribute
    at 0 or set from an int): the class fixes it, and what cannot be bound stays baked."""
    _, model, _ = instantiate(source, {})
    attrs = _float_attrs(model)
    if len(attrs) > MAX_ATTRS:
        return {}
    try:
        _, scaled, _ = instantiate(source, {}, perturbed=True)
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
        values = PROBES_FROM_ZERO if a0 == 0 else tuple(a0 * f for f in PROBE_FACTORS)
        seen: list[dict[tuple, float]] = []
        mine: dict[tuple, str] = {}  # this attribute's constants
        why = None
        for a in values:
            try:
                other = trace(source, {}, tweak=attr.setter(a))
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
    apply_bindings(graph, bindings)
    return bindings


def _ints(graph: Graph) -> dict[tuple, int]:
    """The graph's int constants (bools aside) by position (node index, arg path)."""
    found: dict[tuple, int] = {}

    def walk(x, pos):
        if isinstance(x, (list, tuple)):
            for j, y in enumerate(x):
                walk(y, pos + (j,))
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, pos + (k,))
        elif isinstance(x, int) and not isinstance(x, bool):
            found[pos] = x

    for i, n in enumerate(graph.nodes):
        walk(n.args, (i, "args"))
        walk(n.kwargs, (i, "kwargs"))
    return found


def _int_attrs(model: torch.nn.Module) -> dict[str, int]:
    """The model's int attributes (bools aside) by their expression over `self`."""
    return {f"{module_expr(path)}.{name}": v for path, mod in model.named_modules() for name, v in vars(mod).items()
            if isinstance(v, int) and not isinstance(v, bool) and name.isidentifier() and not name.startswith("_")}


def bind_ints(source: str, graph: Graph, other: Graph, knobs: dict[str, int]) -> bool:
    """Bind the int constants that differ between `graph` (the default knobs) and `other`
    (captured with `knobs`) to the model's int attribute that holds each in both (GroupNorm's
    `num_groups`, set from a knob): BoundInt in both graphs. False when one matches no attribute."""
    mine, theirs = _ints(graph), _ints(other)
    if mine.keys() != theirs.keys():
        return False
    here, there = _int_attrs(instantiate(source, {})[1]), _int_attrs(instantiate(source, knobs)[1])
    for pos, v in mine.items():
        w = theirs[pos]
        expr = v.expr if isinstance(v, BoundInt) else None
        if expr is None and v == w:
            continue
        if expr is None:
            expr = next((e for e, value in here.items() if value == v and there.get(e) == w), None)
            if expr is None:
                return False
            _replace(graph, pos, BoundInt(v, expr))
        if there.get(expr) != w:
            return False
        _replace(other, pos, BoundInt(w, expr))
    return True


def check_scaled_init(source: str, graph: Graph) -> None:
    """With the constructor's floats perturbed, each constant follows its binding or stays put."""
    ns, _, _ = instantiate(source, {})
    try:
        with torch.device("meta"):
            init = ns["get_init_inputs"]()
    except Exception:  # noqa: BLE001 - instantiate built it already
        return
    if not perturb_floats(list(init))[1]:
        return  # no float to perturb
    try:
        _, model, _ = instantiate(source, {}, perturbed=True)
        other = trace(source, {}, perturbed=True)
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
