"""One fusion group's kernel code: Triton expressions for its nodes, its loads, its
reductions and its stores (the template kinds in okgit.lower.kinds render these into their
kernel templates; okgit.lower.streamed the loops that stream a group's rows).

All arithmetic is in fp32. A `Scope` is where an expression is evaluated (a row's prologue,
one tile of a streamed pass); `KernelCode` emits each node once per scope and reuses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from okgit.lower.fusion import Group
from okgit.lower.graph import Bound, BoundInt, Node, Unsupported
from okgit.lower.template import template

# ---------------------------------------------------------------------------------------------
# Elementwise primitives in Triton (all arithmetic in fp32)

OPS = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}", "neg": "-{0}",
    "abs": "tl.abs({0})", "exp": "tl.exp({0})", "log": "tl.log({0})", "sqrt": "tl.sqrt({0})",
    "rsqrt": "tl.rsqrt({0})", "sigmoid": "tl.sigmoid({0})", "tanh": "_tanh({0})",
    "relu": "tl.maximum({0}, 0.0, propagate_nan=tl.PropagateNan.ALL)", "erf": "tl.erf({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "floor": "tl.floor({0})", "ceil": "tl.ceil({0})", "log1p": "_log1p({0})", "expm1": "_expm1({0})",
    "log2": "tl.log2({0})", "exp2": "tl.exp2({0})", "mish": "_mish({0})",
    "sign": "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, 0.0))",
    "maximum": "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "minimum": "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "gt": "{0} > {1}", "ge": "{0} >= {1}", "lt": "{0} < {1}", "le": "{0} <= {1}",
    "eq": "{0} == {1}", "ne": "{0} != {1}", "and": "({0}) & ({1})", "or": "({0}) | ({1})",
    "not": "{0} == 0", "where": "tl.where({0}, {1}, {2})",
    # fp32 rounded to nearest at TF32's 10 mantissa bits, as gemm_plan.py.tmpl's split pass rounds
    # (kinds/attention_gemms.py: a softmax writing P split for the GEMM after it)
    "tf32": "((({0}).to(tl.int32, bitcast=True) + 0x1000) & -8192).to(tl.float32, bitcast=True)",
}
# The Triton functions the expressions above call, each rendered once into an op file that uses it
HELPERS = {name: template(__package__, f"helper{name}.py.tmpl") for name in ("_folds", "_tanh", "_log1p", "_expm1", "_pow", "_mish", "_welford")}
TL_DTYPE = {torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16", torch.int32: "tl.int32", torch.int64: "tl.int64"}
NEUTRAL = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")', "argmax": 'float("-inf")', "argmin": 'float("inf")'}


def literal(v) -> str:
    if isinstance(v, (Bound, BoundInt)):
        raise Unsupported(f"{v.expr} is read at run time, not a literal")
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, float):
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        if math.isnan(v):
            return 'float("nan")'
        return repr(v)
    if isinstance(v, int):
        return repr(v)
    raise Unsupported(f"constant {v!r}")


def prod(terms: list[str]) -> str:
    terms = [t for t in terms if t != "1"]
    return " * ".join(terms) if terms else "1"


# ---------------------------------------------------------------------------------------------
# One kernel's code: sizes, loads, expressions, reductions


@dataclass
class Leaf:
    node: Node  # the value as the group reads it
    base: Node  # the tensor handed to the launcher (the node itself, or what a view reads)
    bmap: tuple  # base dims -> domain dims
    arg: str  # launcher argument
    ptr: str  # kernel pointer argument
    offset: str | None = None  # kernel offset expression, in place of the broadcast index at the scope's flat
    mask: str | None = None  # kernel mask for that offset, in place of the scope's ("": in bounds, unmasked)
    plus: Leaf | None = None  # a per-channel operand added on load (a convolution's folded bias)
    # the dims from outermost to innermost in the memory the kernel reads (channels-last: the
    # channels innermost); empty: row-major. The launcher hands the kernel such a copy, the tensor
    # itself where it is laid out so already
    order: tuple[int, ...] = ()


class Scope:
    """A block of kernel code. `row` is where per-row values go (hoisted out of tile loops)."""

    def __init__(self, parent: Scope | None, flat: str, mask: str | None, row: Scope | None = None, row_leaves: Scope | None = None) -> None:
        self.parent, self.flat, self.mask = parent, flat, mask
        self.row = row  # every per-row value goes there
        self.row_leaves = row_leaves or row  # per-row loads go there
        self.lines: list[str] = []
        self.memo: dict[int, str] = {}

    def lookup(self, n: Node) -> str | None:
        s: Scope | None = self
        while s is not None:
            if id(n) in s.memo:
                return s.memo[id(n)]
            s = s.parent
        return None


class KernelCode:
    def __init__(self, g: Group, leaves: dict[int, Leaf], dom: list[str], helpers: set[str]) -> None:
        self.g, self.leaves, self.dom, self.helpers = g, leaves, dom, helpers
        self.sizes: dict[str, str] = {}  # runtime size expression -> kernel argument
        self.scalars: dict[str, str] = {}  # forward expression of an attribute constant -> kernel argument
        self.count = 0
        self.reduce_tile: str | None = None  # one-pass reductions: "axis=1, keep_dims=True" or "axis=0"
        self.seed_value: str | None = None  # the group's seed inside the kernel, as its kind computes it

    @property
    def covered(self) -> list[int]:
        return [k for k, d in enumerate(self.dom) if d != "1"]

    def scalar(self, c: Bound | BoundInt) -> str:
        """The kernel argument that carries the attribute constant c."""
        if c.expr not in self.scalars:
            self.scalars[c.expr] = f"c{len(self.scalars)}"
        return self.scalars[c.expr]

    def const(self, a) -> str:
        return self.scalar(a) if isinstance(a, (Bound, BoundInt)) else literal(a)

    def size(self, expr: str) -> str:
        if expr == "1":
            return "1"
        if expr not in self.sizes:
            self.sizes[expr] = f"s{len(self.sizes)}"
        return self.sizes[expr]

    def _runs(self, dims: list[int]) -> list[list[int]]:
        cov = self.covered
        if sorted(dims) != dims:
            raise Unsupported("permuted operand")
        runs: list[list[int]] = []
        for d in dims:
            if runs and cov.index(d) == cov.index(runs[-1][-1]) + 1:
                runs[-1].append(d)
            else:
                runs.append([d])
        return runs

    def index(self, bmap: tuple, flat: str) -> str:
        """Offset into a broadcast operand whose dims sit on domain dims `bmap`, at `flat`."""
        return self.index_across(bmap, [(flat, set(self.covered))])

    def radix(self, var: str, dims: list[int]) -> str:
        """Domain offset of position `var` in the row-major enumeration of `dims`."""
        dims = [d for d in dims if self.dom[d] != "1"]
        runs = self._runs(dims)
        terms = []
        for i, run in enumerate(runs):
            t = var
            later = [self.dom[k] for r in runs[i + 1 :] for k in r]
            if later:
                t = f"({t} // {self.size(prod(later))})"
            if i > 0:
                t = f"({t} % {self.size(prod([self.dom[k] for k in run]))})"
            stride = prod([self.dom[k] for k in self.covered if k > run[-1]])
            if stride != "1":
                t = f"{t} * {self.size(stride)}"
            terms.append(t)
        return " + ".join(terms) if terms else "0"

    # values ----------------------------------------------------------------------------------
    def emit(self, scope: Scope, code: str, n: Node | None = None) -> str:
        var = f"v{self.count}"
        self.count += 1
        scope.lines.append(f"{var} = {code}")
        if n is not None:
            scope.memo[id(n)] = var
        return var

    def value(self, n: Node, scope: Scope) -> str:
        hit = scope.lookup(n)
        if hit is not None:
            return hit
        if not self.g.full(n):
            if scope.row is not None:
                return self.value(n, scope.row)
            if scope.row_leaves is not None and id(n) in self.leaves:
                return self.value(n, scope.row_leaves)
        if n.kind == "view" and self.g.computes(n):
            var = self.value(n.args[0], scope)
            scope.memo[id(n)] = var
            return var
        return self.emit(scope, self.expr(n, scope), n)

    def arg(self, a, scope: Scope) -> str:
        return self.value(a, scope) if isinstance(a, Node) else self.const(a)

    def expr(self, n: Node, scope: Scope) -> str:
        if id(n) in self.leaves:
            leaf = self.leaves[id(n)]
            code = self.load(leaf, scope)
            return code if leaf.plus is None else f"{code} + {self.load(leaf.plus, scope)}"
        if n is self.g.seed:
            if self.seed_value is None:
                raise Unsupported(f"no kernel value for {n.op}")
            return self.seed_value
        if n.kind == "iota":
            return self.index((n.dims[0],), scope.flat)
        if n.kind == "count":
            return "red_count"
        if n.kind == "reduce":
            return self.reduce_one_pass(n, scope)
        if n.kind != "op":
            raise Unsupported(f"cannot compute {n.kind} {n.op} in a kernel")
        args = [self.arg(a, scope) for a in n.args]
        if n.op == "pow":
            return self.pow(args, n.args[1])
        if n.op == "cast":
            return self.cast(args[0], n.args[0], n.dtype)
        if n.op not in OPS:
            raise Unsupported(f"no Triton form for {n.op}")
        code = OPS[n.op]
        for h in HELPERS:
            if code.startswith(h + "("):
                self.helpers.add(h)
        return code.format(*args)

    def load(self, leaf: Leaf, scope: Scope) -> str:
        idx = leaf.offset or self.index(leaf.bmap, scope.flat)
        if idx == "0":
            code = f"tl.load({leaf.ptr})"
        elif leaf.mask == "":  # in bounds by construction (a program's own scalar position)
            code = f"tl.load({leaf.ptr} + {idx})"
        else:
            code = f"tl.load({leaf.ptr} + {idx}, mask={leaf.mask or scope.mask}, other=0)"
        return code + ".to(tl.float32)" if leaf.node.dtype.is_floating_point else code

    def index_within(self, bmap: tuple, var: str, part: set[int]) -> str:
        """`index` for an operand whose dims all lie in `part`, at position `var` of the
        row-major enumeration of the domain dims in `part` alone."""
        return self.index_across(bmap, [(var, part)])

    def index_across(self, bmap: tuple, parts: list[tuple[str, set[int]]]) -> str:
        """Offset into a broadcast operand whose dims sit on domain dims `bmap`, each read from
        the position of the part of the domain holding it (`parts`: (position, dims), the
        position enumerating its part's covered dims row-major; one part of them all: the flat
        offset). Dims consecutive in the operand and in one part are one term."""
        dims = [d for d in bmap if d is not None and self.dom[d] != "1"]
        if not dims:
            return "0"
        if sorted(dims) != dims:
            raise Unsupported("permuted operand")
        part_of = {d: k for k, (_, ds) in enumerate(parts) for d in ds}
        if any(d not in part_of for d in dims):
            raise Unsupported("an operand dim outside the tile's parts")
        mine = [[d for d in self.covered if d in ds] for _, ds in parts]
        pieces: list[list[int]] = []
        for d in dims:
            k, prev = part_of[d], pieces[-1][-1] if pieces else None
            if prev is not None and part_of[prev] == k and mine[k].index(d) == mine[k].index(prev) + 1:
                pieces[-1].append(d)
            else:
                pieces.append([d])
        terms = []
        for i, piece in enumerate(pieces):
            var, own = parts[part_of[piece[0]]][0], mine[part_of[piece[0]]]
            t = var
            after = prod([self.dom[k] for k in own if k > piece[-1]])
            if after != "1":
                t = f"({t} // {self.size(after)})"
            if any(k < piece[0] for k in own):
                t = f"({t} % {self.size(prod([self.dom[k] for k in piece]))})"
            stride = prod([self.dom[k] for later in pieces[i + 1 :] for k in later])
            if stride != "1":
                t = f"{t} * {self.size(stride)}"
            terms.append(t)
        return " + ".join(terms)

    def pow(self, args: list[str], exponent) -> str:
        x, p = args
        if isinstance(exponent, (Bound, BoundInt)):
            self.helpers.add("_pow")
            return f"_pow({x}, {p})"
        if isinstance(exponent, (int, float)) and float(exponent).is_integer() and abs(exponent) <= 4:
            e = int(exponent)
            if e == 0:
                return f"tl.where({x} == {x}, 1.0, 1.0)"
            body = " * ".join([x] * abs(e))
            return body if e > 0 else f"1.0 / ({body})"
        if exponent == 0.5:
            return f"tl.sqrt({x})"
        self.helpers.add("_pow")
        return f"_pow({x}, {p})"

    def cast(self, x: str, src: Node, dtype: torch.dtype) -> str:
        if dtype == torch.bool:
            return f"{x} != 0"
        if dtype.is_floating_point:
            if dtype == torch.float32:
                return f"{x}.to(tl.float32)"
            return f"{x}.to({TL_DTYPE[dtype]}).to(tl.float32)"  # round as torch would
        return f"{x}.to({TL_DTYPE[dtype]})"

    def as_float(self, n: Node, var: str) -> str:
        return var if n.dtype.is_floating_point else f"{var}.to(tl.float32)"

    def reduce_one_pass(self, n: Node, scope: Scope) -> str:
        if self.reduce_tile is None:
            raise Unsupported("reduction outside a reduction kernel")
        x = n.args[0]
        v = self.as_float(x, self.value(x, scope))
        masked = self.emit(scope, f"tl.where({scope.mask}, {v}, {NEUTRAL[n.op]})")
        return self.fold(scope, n.op, masked, "col", self.reduce_tile)

    def fold(self, scope: Scope, op: str, lanes: str, index: str, over: str) -> str:
        """The reduction `op` of `lanes` over `over` ("axis=1, keep_dims=True"), as torch has it.

        `index` holds each lane's position along the folded dims (argmax / argmin). torch lets
        a NaN win max and min, and argmax / argmin return the first NaN's index; ties go to the
        first index. tl.max, tl.min and tl.argmax skip NaN (maxnum on a GPU, nanmax in the
        interpreter), so the values fold as integer keys that order NaN first (helper_folds); an
        arg-reduction folds the key and the index packed in one int64, so that a tie goes to
        the smaller index whichever lane holds it. One reduction each, as cheap as tl.max."""
        if op == "sum":
            return f"tl.sum({lanes}, {over})"
        self.helpers.add("_folds")
        high = op.endswith("max")
        key = f"_order_key({lanes}, {high})"
        if op in ("max", "min"):
            return f"_from_key(tl.{op}({key}, {over}))"
        rank = f"(2147483647 - {index})" if high else f"{index}"  # the smaller index packs larger for argmax
        packed = self.emit(scope, f"tl.{op[3:]}(({key}.to(tl.int64) << 32) + {rank}.to(tl.int64), {over})")
        low = f"({packed} & 4294967295).to(tl.int32)"
        return f"(2147483647 - {low})" if high else low

    # stores ----------------------------------------------------------------------------------
    def placement(self, n: Node) -> str:
        """'full' (one element per domain element) or 'row' (one per kept position)."""
        dims = sorted(d for d in self.g.smap[id(n)] if d is not None and self.dom[d] != "1")
        if dims == self.covered:
            return "full"
        if dims == [d for d in self.covered if d not in self.g.red] and self.g.red:
            return "row"
        raise Unsupported("an output that is neither elementwise nor per row")


def index_by_part(code: KernelCode, leaves, parts: tuple[tuple[str, set[int], str], ...],
                  mixed: str | None = None) -> None:
    """Operands whose dims all lie in one part of the domain (a tile's rows, its columns) are
    read at that part's position `var` alone, masked by its mask: the index arithmetic runs on
    that part's vector ([ROWS, 1]), not on every element of the tile. With `mixed` (the tile's
    mask), an operand across parts too (a group norm's per-channel weight: the group among the
    rows, the channel in the group among the columns): each of its dims from its part's
    position, summed; only an operand over the whole domain keeps the flat offset."""
    for leaf in leaves:
        dims = {d for d in leaf.bmap if d is not None and code.dom[d] != "1"}
        part = next((p for p in parts if dims and dims <= p[1]), None)
        if leaf.offset is not None or not dims:
            continue
        if part is not None:
            leaf.offset, leaf.mask = code.index_within(leaf.bmap, part[0], part[1]), part[2]
        elif mixed is not None and dims != set(code.covered) and dims <= set().union(*(p[1] for p in parts)):
            leaf.offset, leaf.mask = code.index_across(leaf.bmap, [(p[0], p[1]) for p in parts]), mixed


def indent(lines: list[str], n: int = 4) -> list[str]:
    return [" " * n + ln if ln else ln for ln in lines]


COLUMN_PROGRAMS = 2048  # about 16 programs per SM of an H100/H200


def widest_block(n_outer: int, n_inner: int, widest: int, narrowest: int) -> int:
    """The widest power-of-two block along the inner extent that still gives COLUMN_PROGRAMS
    programs (n_outer of them per block column): on an H200 (bench/space.py) a filled GPU
    beat wider contiguous tile rows."""
    block = widest
    while block > narrowest and n_outer * -(-n_inner // block) < COLUMN_PROGRAMS:
        block //= 2
    return block


def store_outputs(code: KernelCode, g: Group, full: Scope, row: Scope | None, outs: list[str], only: str | None = None) -> None:
    """Stores of g's outputs (`outs`): the elementwise ones in `full`, the per-row ones in
    `row`; with `only`, just the outputs of that placement."""
    for n, o in zip(g.outputs, outs):
        where = code.placement(n)
        if only is not None and where != only:
            continue
        scope = full if where == "full" else row
        assert scope is not None  # per-row outputs come only from kinds that pass a row scope
        v = code.value(n, scope)
        if where == "full":
            scope.lines.append(f"tl.store({o}_ptr + {scope.flat}, {v}, mask={scope.mask})")
        elif scope.mask is None:
            scope.lines.append(f"tl.store({o}_ptr, {v})")
        else:
            scope.lines.append(f"tl.store({o}_ptr + row, {v}, mask=row_mask)")
