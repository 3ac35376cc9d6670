"""The offline proposer: the reference's graph, cut into fusion groups, rendered from templates.

Each fusion group (okgit.search.fusion.partition) becomes one template under okgit/templates:

| group      | template                 | covers                                                    |
|------------|--------------------------|-----------------------------------------------------------|
| pointwise  | pointwise.py.tmpl        | elementwise chains, parameters and broadcasts included    |
| rows       | rows.py.tmpl             | reductions / normalisations over some dims, per row       |
|            | columns.py.tmpl          | the same, when the folded dims are not the innermost: a   |
|            |                          | second candidate whose programs own contiguous inner      |
|            |                          | positions, so its loads coalesce (the column layout)      |
| scalar     | scalar*.py.tmpl          | reductions to one value (losses), two-stage, no atomics   |
| gemm       | gemm.py.tmpl             | matmul / linear with its elementwise epilogue fused       |
| pointwise, | pointwise_cl.py.tmpl,    | the epilogue of a 2D convolution run channels-last (one   |
| rows       | rows_cl.py.tmpl          | more candidate, after the NCHW one): reads NHWC in 2D     |
|            |                          | tiles, writes NCHW, adds the conv bias it runs without    |

What the groups leave (convolutions, vendor GEMMs, unknown ops) stays a PyTorch call in the
rewritten forward. A proposal is the reference file with the kernels inserted before the
model class and `forward` rewritten (or `ModelNew(Model)` where the file defines ModelNew),
so `get_inputs`, the knobs and the parameters are the reference's own.

Constants the reference reads from its module's float attributes (`self.temperature`,
`self.eps`, ...; graph.Bound) are not baked: the forward recomputes each from `self` and the
launcher passes it to the kernel as a scalar argument (`c0`, ...), so a candidate stays right
for every `Model(...)`.

Each group's launch configuration is a set of module constants (`FUSED_ROWS_0_TILE`, ...),
annotated so they are not mistaken for shape knobs; the autotune proposer varies them.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from importlib import resources
from string import Template

import torch

from okgit.lower.capture import capture
from okgit.lower.fusion import Group, partition
from okgit.lower.graph import Bound, Graph, Node, Unsupported
from okgit.lower.kernelcode import (
    CL_WALK,
    COLUMN_WALK,
    HELPERS,
    NEUTRAL,
    ROW_WALK,
    KernelCode,
    Leaf,
    Scope,
    Walk,
    indent,
    literal,
    prod,
    widest_block,
)
from okgit.search.types import Context, Proposal

TEMPLATE_DIR = resources.files("okgit") / "templates"


def render(template: str, **params: str) -> str:
    """A template with its $params; a placeholder alone on a line takes a block, indented."""
    out: list[str] = []
    for line in (TEMPLATE_DIR / template).read_text().splitlines():
        m = re.fullmatch(r"(\s*)\$\{?(\w+)\}?", line)
        if m and m.group(2) in params:
            out.extend(m.group(1) + b if b else b for b in params[m.group(2)].splitlines())
        else:
            out.append(Template(line).substitute(params))
    return "\n".join(out)


def strided(g: Group) -> bool:
    """A row reduction whose folded dims are not the innermost: a row's elements lie a whole
    inner extent apart in memory, so the row layout's loads cannot coalesce."""
    return g.kind == "rows" and any(s != 1 for s in g.shape[max(g.red) + 1 :])


def layout(g: Group, columns: bool) -> str:
    """The template a group is rendered with: with `columns`, strided row reductions take the
    column layout (columns.py.tmpl), every other group its own kind's template."""
    return "columns" if columns and strided(g) else g.kind


CL_CONV_OPS = ("aten.conv2d.default",)


def channels_last_convs(graph: Graph, items: list) -> dict[int, Node | None]:
    """The 2D convolutions the channels-last candidate runs on channels-last operands, each
    with the bias it folds into its epilogue (None: the bias, if any, stays in the call).

    A convolution qualifies when its output is not returned and every reader of it is one
    group over the output's own shape that reads it elementwise: a pointwise one, or a row
    reduction over the spatial dims (a per-(sample, channel) normalisation); that kernel
    takes the channels-last output and writes NCHW. A bias of one value per output channel
    is folded into that kernel's load, so the convolution runs without one."""
    users = graph.users()
    outs = {id(o) for o in graph.outputs}
    groups = [it for it in items if isinstance(it, Group)]
    out: dict[int, Node | None] = {}
    for n in items:
        if not isinstance(n, Node) or n.op not in CL_CONV_OPS or len(n.shape) != 4 or not n.dtype.is_floating_point:
            continue
        readers = [g for g in groups if g.has(n)]
        if id(n) in outs or len(readers) != 1:
            continue
        g = readers[0]
        identity = tuple(i if s != 1 else None for i, s in enumerate(n.shape))
        if not (g.kind == "pointwise" or (g.kind == "rows" and g.red == (2, 3))) or g.shape != n.shape or n not in g.leaves or g.smap[id(n)] != identity:
            continue
        if not all(g.computes(u) for u in users[id(n)]):
            continue
        bias = n.args[2] if len(n.args) > 2 else n.kwargs.get("bias")
        fold = isinstance(bias, Node) and tuple(bias.shape) == (n.shape[1],) and bias.dtype == n.dtype
        out[id(n)] = bias if fold else None
    return out


# ---------------------------------------------------------------------------------------------
# Groups -> kernels and launchers


@dataclass
class Rendered:
    name: str  # launcher
    source: str  # kernels + launcher
    tunables: dict[str, int]
    args: list[str]  # forward expressions passed to the launcher
    outputs: list[Node]
    description: str


class Lowering:
    """Renders the partitioned graph: kernels, launchers and the new forward."""

    def __init__(self, graph: Graph, items: list, columns: bool = False, channels_last: bool = False) -> None:
        self.graph, self.items, self.columns = graph, items, columns
        # convolutions run channels-last, each with the bias its epilogue adds (or None)
        self.cl = channels_last_convs(graph, items) if channels_last else {}
        if channels_last and not self.cl:
            raise Unsupported("no 2D convolution whose output only a pointwise or spatial-reduction kernel reads")
        self.helpers: set[str] = set()
        self.names: dict[int, str] = {}  # node -> forward expression
        self.lines: list[str] = []  # forward body
        self.counter = 0
        self.materialized = {id(n) for it in items if isinstance(it, Group) for n in it.outputs}
        self.materialized |= {id(it) for it in items if isinstance(it, Node)}
        self.materialized |= {id(n) for n in graph.nodes if n.is_leaf}
        for n in graph.nodes:
            if n.kind == "input":
                self.names[id(n)] = n.op
            elif n.kind == "param":
                self.names[id(n)] = "self" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in n.op.split("."))

    # forward ---------------------------------------------------------------------------------
    def fresh(self) -> str:
        self.counter += 1
        return f"t{self.counter - 1}"

    def tensor(self, n: Node) -> str:
        """A forward expression for n's tensor; unit-dim views of tensors become reshapes."""
        if id(n) in self.names:
            return self.names[id(n)]
        if n.kind == "view":
            src = self.tensor(n.args[0])
            dims = iter([j for j, s in enumerate(n.args[0].shape) if s != 1])
            shape = ", ".join(f"{src}.shape[{next(dims)}]" if s != 1 else "1" for s in n.shape)
            var = self.fresh()
            self.lines.append(f"{var} = {src}.reshape({shape}{',' if len(n.shape) == 1 else ''})")
            self.names[id(n)] = var
            return var
        raise Unsupported(f"{n.kind} {n.op} is needed as a tensor")

    def pyarg(self, a, device: str) -> str:
        if isinstance(a, Node):
            return self.tensor(a)
        if isinstance(a, (list, tuple)):
            inner = ", ".join(self.pyarg(x, device) for x in a)
            return f"[{inner}]"
        if isinstance(a, torch.device):
            return device
        if isinstance(a, (torch.dtype, torch.layout, torch.memory_format)):
            return str(a)
        if a is None or isinstance(a, str):
            return repr(a)
        if isinstance(a, Bound):
            return f"float({a.expr})"
        return literal(a)

    def extern(self, n: Node) -> None:
        if n.op == "getitem":
            var = self.fresh()
            self.lines.append(f"{var} = {self.tensor(n.args[0])}[{n.args[1]}]")
            self.names[id(n)] = var
            return
        device = f"{self.graph.forward_args[0]}.device"  # the first input's
        args = [self.pyarg(a, device) for a in n.args]
        kwargs = {k: self.pyarg(v, device) for k, v in n.kwargs.items()}
        if id(n) in self.cl:  # input and weight channels-last (a tiled Triton copy); a folded bias is left out
            self.helpers.add("_to_channels_last")
            args[:2] = [f"_to_channels_last({a})" for a in args[:2]]
            if self.cl[id(n)] is not None:
                if len(args) > 2:
                    args[2] = "None"
                else:
                    kwargs["bias"] = "None"
        args += [f"{k}={v}" for k, v in kwargs.items()]
        var = self.fresh()
        self.lines.append(f"{var} = {public_name(n)}({', '.join(args)})")
        self.names[id(n)] = var

    def forward(self, entry_args: str) -> str:
        self.rendered: list[Rendered] = []
        for k, it in enumerate(self.items):
            if isinstance(it, Node):
                if id(it) in self.names:  # a tuple-returning op already bound
                    continue
                if isinstance(it.args[0], Node) and it.op == "getitem" and id(it.args[0]) not in self.names:
                    self.extern(it.args[0])
                self.extern(it)
                continue
            r = self.group(it, k)
            self.rendered.append(r)
            outs = [self.fresh() for _ in r.outputs]
            self.lines.append(f"# {r.description}")
            self.lines.append(f"{', '.join(outs)} = {r.name}({', '.join(r.args)})")
            for n, v in zip(r.outputs, outs):
                self.names[id(n)] = v
        rets = []
        for o in self.graph.outputs:
            if o.is_leaf:
                raise Unsupported("the forward returns an input unchanged")
            rets.append(self.tensor(o))
        ret = ", ".join(rets) if self.graph.tuple_output else rets[0]
        body = "\n".join(indent(self.lines + [f"return {ret}"], 8))
        return f"    def forward({entry_args}):\n{body}\n"

    # groups ----------------------------------------------------------------------------------
    def group(self, g: Group, k: int) -> Rendered:
        kind = layout(g, self.columns)
        name = f"fused_{kind}_{k}"
        leaves: dict[int, Leaf] = {}
        args: list[str] = []
        params: list[str] = []
        for n in g.leaves:
            base, bmap = n, g.smap[id(n)]
            while base.kind == "view" and id(base) not in self.materialized:
                bmap, base = _source_map(base, bmap), base.args[0]
            arg = f"in{len(args)}"
            leaves[id(n)] = Leaf(n, base, bmap, arg, f"{arg}_ptr")
            args.append(self.tensor(base))
            params.append(f"{arg}_ptr")
        dom = self.domain(g, leaves)
        code = KernelCode(g, leaves, dom, self.helpers)
        conv = next((leaf for leaf in leaves.values() if leaf.node is leaf.base and id(leaf.base) in self.cl), None)
        if conv is not None:
            conv.offset, conv.channels_last = "nhwc", True
            self._fold_conv_bias(code, conv, leaves, args, params)
            lowered_cl = self.pointwise_cl if g.kind == "pointwise" else self.rows_cl
            return lowered_cl(g, f"fused_{g.kind}_cl_{k}", code, leaves, args, params, conv)
        lowered = {"pointwise": self.pointwise, "rows": self.rows, "columns": self.column_layout, "scalar": self.scalar, "gemm": self.gemm}[kind]
        return lowered(g, name, code, leaves, args, params)

    def domain(self, g: Group, leaves: dict[int, Leaf]) -> list[str]:
        """Each domain dim as a launcher variable taken from a leaf dim that spans it, or 1."""
        dom, self._dom_src = [], []
        for d, size in enumerate(g.shape):
            src = ("a.shape[0]", "b.shape[1]")[d] if g.gemm is not None else None
            for leaf in leaves.values():
                if src is None and d in leaf.bmap:
                    src = f"{leaf.arg}.shape[{leaf.bmap.index(d)}]"
            if src is None and size != 1:
                raise Unsupported("a domain dim no operand spans")
            dom.append(f"d{d}" if src is not None else "1")
            if src is not None:
                self._dom_src.append((f"d{d}", src))
        return dom

    def prepare(self, leaves: dict[int, Leaf], outputs: list[Node], code: KernelCode, g: Group, device: str) -> tuple[list[str], list[str]]:
        """Launcher lines before the launch, and the output names."""
        lines = [
            f"{leaf.arg} = {leaf.arg}.contiguous({'memory_format=torch.channels_last' if leaf.channels_last else ''})"
            for leaf in leaves.values()
        ]
        lines += [f"{d} = {src}" for d, src in self._dom_src]
        outs = []
        for i, n in enumerate(outputs):
            m = g.smap[id(n)]
            shape = [code.dom[d] if d is not None else "1" for d in m]
            shape_code = ", ".join(shape) + ("," if len(shape) == 1 else "")
            lines.append(f"out{i} = torch.empty(({shape_code}), device={device}, dtype={n.dtype})")
            outs.append(f"out{i}")
        return lines, outs

    def _common(self, name: str, g: Group, code: KernelCode, leaves, args, params, device):
        prep, outs = self.prepare(leaves, g.outputs, code, g, device)
        ptrs = params + [f"{o}_ptr" for o in outs]
        scalars = list(code.scalars.values())
        sig = "\n".join(f"{p}," for p in ptrs + list(code.sizes.values()) + scalars)
        call = "\n".join(f"{a}," for a in [leaf.arg for leaf in leaves.values()] + outs + list(code.sizes) + scalars)
        launcher_args = ", ".join([leaf.arg for leaf in leaves.values()] + scalars)
        args += [f"float({e})" for e in code.scalars]  # the forward reads them from self
        returns = ", ".join(outs)
        return prep, outs, sig, call, launcher_args, returns

    def _stores(self, code: KernelCode, g: Group, full: Scope, row: Scope | None, outs: list[str], only: str | None = None) -> None:
        for n, o in zip(g.outputs, outs):
            where = code.placement(n)
            if only is not None and where != only:
                continue
            scope = full if where == "full" else row
            v = code.value(n, scope)
            if where == "full":
                scope.lines.append(f"tl.store({o}_ptr + {scope.flat}, {v}, mask={scope.mask})")
            elif scope.mask is None:
                scope.lines.append(f"tl.store({o}_ptr, {v})")
            else:
                scope.lines.append(f"tl.store({o}_ptr + row, {v}, mask=row_mask)")

    def pointwise(self, g, name, code, leaves, args, params) -> Rendered:
        body = Scope(None, "flat", "mask")
        outs = [f"out{i}" for i in range(len(g.outputs))]
        self._stores(code, g, body, None, outs)
        device = f"{next(iter(leaves.values())).arg}.device"
        prep, outs, sig, call, largs, returns = self._common(name, g, code, leaves, args, params, device)
        src = render(
            "pointwise.py.tmpl", name=name, NAME=name.upper(), params=sig, body="\n".join(body.lines),
            args=largs, doc=describe(g), prepare="\n".join(prep), numel=prod(code.dom) if any(d != "1" for d in code.dom) else "1",
            call_args=call, returns=returns,
        )
        numel = math.prod(g.shape)
        tun = {f"{name.upper()}_BLOCK": 1024 if numel >= 1 << 20 else 256, f"{name.upper()}_NUM_WARPS": 4}
        return Rendered(name, src, tun, args, g.outputs, describe(g))

    def pointwise_cl(self, g, name, code, leaves, args, params, conv: Leaf) -> Rendered:
        """An elementwise epilogue of a channels-last convolution (pointwise_cl.py.tmpl): 2D
        tiles of (sample, channel) rows by spatial columns, the convolution read NHWC, the
        outputs written NCHW contiguous."""
        # operands that vary along rows only (per-channel parameters) or columns only are indexed
        # by that coordinate alone: the index math runs on a [YBLOCK, 1] or [1, XBLOCK] vector
        for leaf in leaves.values():
            dims = {d for d in leaf.bmap if d is not None and code.dom[d] != "1"}
            if leaf.offset is None and dims and dims <= {0, 1}:
                leaf.offset, leaf.mask = code.index_within(leaf.bmap, "row", {0, 1}), "row_mask"
            elif leaf.offset is None and dims and dims <= {2, 3}:
                leaf.offset, leaf.mask = code.index_within(leaf.bmap, "col", {2, 3}), "col_mask"
        body = Scope(None, "flat", "mask")
        outs = [f"out{i}" for i in range(len(g.outputs))]
        self._stores(code, g, body, None, outs)
        prep, outs, sig, call, largs, returns = self._common(name, g, code, leaves, args, params, f"{conv.arg}.device")
        shape = [f"{conv.arg}.shape[{d}]" for d in range(4)]
        NAME = name.upper()
        src = render(
            "pointwise_cl.py.tmpl", name=name, NAME=NAME, params=sig, body="\n".join(body.lines), args=largs,
            doc=describe(g, "pointwise_cl"), prepare="\n".join(prep), n_rows=f"{shape[0]} * {shape[1]}",
            n_cols=f"{shape[2]} * {shape[3]}", n_chan=shape[1], call_args=call, returns=returns,
        )
        tun = {f"{NAME}_YBLOCK": 64, f"{NAME}_XBLOCK": 64, f"{NAME}_NUM_WARPS": 4}
        return Rendered(name, src, tun, args, g.outputs, describe(g, "pointwise_cl"))

    def _fold_conv_bias(self, code: KernelCode, conv: Leaf, leaves: dict, args: list[str], params: list[str]) -> None:
        """The bias a channels-last convolution runs without, added as its output is loaded."""
        bias = self.cl[id(conv.base)]
        if bias is None:
            return
        arg = f"in{len(args)}"
        conv.plus = Leaf(bias, bias, (1,), arg, f"{arg}_ptr", offset=code.index_within((1,), "row", {0, 1}), mask="row_mask")
        leaves[("conv_bias", id(bias))] = conv.plus  # a key no node's id matches
        args.append(self.tensor(bias))
        params.append(conv.plus.ptr)

    def rows_cl(self, g, name, code, leaves, args, params, conv: Leaf) -> Rendered:
        """A reduction over the spatial dims of a channels-last convolution's output
        (rows_cl.py.tmpl): each program owns consecutive channels of one sample, read NHWC in
        [BLOCK_R, BLOCK_C] tiles; elementwise outputs are written NCHW contiguous."""
        root = Scope(None, "base", "row_mask")
        outs = [f"out{i}" for i in range(len(g.outputs))]
        body = self._streamed(code, g, root, outs, CL_WALK)
        prep, outs, sig, call, largs, returns = self._common(name, g, code, leaves, args, params, f"{conv.arg}.device")
        NAME = name.upper()
        src = render(
            "rows_cl.py.tmpl", name=name, NAME=NAME, params=sig, prologue="\n".join(root.lines),
            body="\n".join(body.lines), args=largs, doc=describe(g, "rows_cl"), prepare="\n".join(prep),
            n_batch=f"{conv.arg}.shape[0]", n_chan=f"{conv.arg}.shape[1]", n_red=f"{conv.arg}.shape[2] * {conv.arg}.shape[3]",
            call_args=call, returns=returns,
        )
        tun = {f"{NAME}_BLOCK_C": widest_block(g.shape[0], g.shape[1], 64, 8), f"{NAME}_BLOCK_R": 64, f"{NAME}_NUM_WARPS": 4}
        return Rendered(name, src, tun, args, g.outputs, describe(g, "rows_cl"))

    def rows(self, g, name, code, leaves, args, params) -> Rendered:
        kept = [d for d in code.covered if d not in g.red]
        red = [d for d in code.covered if d in g.red]
        row_offset = code.radix("row", kept)
        col_offset = code.radix("col", red)
        root = Scope(None, "base", "row_mask")
        outs = [f"out{i}" for i in range(len(g.outputs))]
        # one pass: the whole row in registers
        code.reduce_tile = ROW_WALK.over
        one = Scope(root, "flat", "mask", row_leaves=root)
        self._stores(code, g, one, one, outs)
        # several passes: the row streamed in chunks
        multi = self._streamed(code, g, root, outs, ROW_WALK)
        device = f"{next(iter(leaves.values())).arg}.device"
        prep, outs, sig, call, largs, returns = self._common(name, g, code, leaves, args, params, device)
        src = render(
            "rows.py.tmpl", name=name, NAME=name.upper(), params=sig, row_offset=row_offset,
            prologue="\n".join(root.lines), col_offset=col_offset, one_pass="\n".join(one.lines),
            multi_pass="\n".join(multi.lines) or "pass", args=largs, doc=describe(g), prepare="\n".join(prep),
            n_rows=prod([code.dom[d] for d in kept]), n_red=prod([code.dom[d] for d in red]), call_args=call, returns=returns,
        )
        n_red = math.prod(g.shape[d] for d in g.red)
        # Defaults from bench/space.py on an H200 (docs/benchmarks.md): rows of 8192 fp32 want 16
        # warps; a row that only feeds per-row outputs streams in chunks (more loads in flight
        # than one register-resident tile), a row with elementwise outputs stays in registers.
        elementwise = any(code.placement(n) == "full" for n in g.outputs)
        tun = {
            f"{name.upper()}_TILE": 2048,
            f"{name.upper()}_BLOCK_N_MAX": 8192 if elementwise else 2048,
            f"{name.upper()}_CHUNK": 2048,
            f"{name.upper()}_NUM_WARPS": 16 if n_red >= 8192 else 8 if n_red >= 2048 else 4,
        }
        return Rendered(name, src, tun, args, g.outputs, describe(g))

    def column_layout(self, g, name, code, leaves, args, params) -> Rendered:
        """A strided row reduction with each program on consecutive inner positions (columns.py.tmpl)."""
        kept = [d for d in code.covered if d not in g.red]
        red = [d for d in code.covered if d in g.red]
        inner = [d for d in kept if d > red[-1]]  # the trailing kept dims: contiguous in memory
        outer = [d for d in kept if d < red[-1]]
        if not inner:
            raise Unsupported("the column layout needs kept dims after the folded ones")
        # row = outer * n_inner + j enumerates the kept dims row-major, as the outputs are laid out
        base = " + ".join(t for t in (code.radix("outer", outer), code.radix("j", inner)) if t != "0")
        root = Scope(None, "base", "row_mask")
        outs = [f"out{i}" for i in range(len(g.outputs))]
        body = self._streamed(code, g, root, outs, COLUMN_WALK)
        device = f"{next(iter(leaves.values())).arg}.device"
        prep, outs, sig, call, largs, returns = self._common(name, g, code, leaves, args, params, device)
        NAME = name.upper()
        src = render(
            "columns.py.tmpl", name=name, NAME=NAME, params=sig, base=base, prologue="\n".join(root.lines),
            body="\n".join(body.lines), args=largs, doc=describe(g, "columns"), prepare="\n".join(prep),
            n_outer=prod([code.dom[d] for d in outer]), n_inner=prod([code.dom[d] for d in inner]),
            n_red=prod([code.dom[d] for d in red]), call_args=call, returns=returns,
        )
        block_j = widest_block(math.prod(g.shape[d] for d in outer), math.prod(g.shape[d] for d in inner), 128, 16)
        tun = {f"{NAME}_BLOCK_J": block_j, f"{NAME}_BLOCK_R": 16, f"{NAME}_NUM_WARPS": 4}
        return Rendered(name, src, tun, args, g.outputs, describe(g, "columns"))

    def _streamed(self, code: KernelCode, g: Group, root: Scope, outs: list[str], walk: Walk) -> Scope:
        """The rows streamed chunk by chunk: once per reduction level (statistics that depend
        on earlier ones, e.g. a variance after its mean), then once to store the elementwise
        outputs. The row layout's multi-pass branch and the whole column layout kernel."""
        code.reduce_tile = None
        col_offset = code.radix("col", [d for d in code.covered if d in g.red])
        multi = Scope(root, "base", "row_mask")
        reduces = [n for n in g.nodes if n.kind == "reduce"]
        levels = sorted({g.level(r.args[0]) for r in reduces})
        for lv in levels:
            self._pass(code, multi, [r for r in reduces if g.level(r.args[0]) == lv], col_offset, walk)
        if any(code.placement(n) == "full" for n in g.outputs):
            loop = Scope(multi, "flat", "mask", row=multi)
            self._stores(code, g, loop, multi, outs, only="full")
            multi.lines += walk.loop(col_offset, loop.lines)
        self._stores(code, g, multi, multi, outs, only="row")
        return multi

    def _pass(self, code: KernelCode, outer: Scope, reduces: list[Node], col_offset: str, walk: Walk) -> None:
        """One streamed pass over the row folding `reduces` into per-row values."""
        loop = Scope(outer, "flat", "mask", row=outer)
        inits, updates, accs = [], [], []
        for r in reduces:
            acc = f"acc{code.count}"
            code.count += 1
            v = code.as_float(r.args[0], code.value(r.args[0], loop))
            w = f"tl.where(mask, {v}, {NEUTRAL[r.op]})"
            shape = walk.tile
            if r.op == "sum":
                inits.append(f"{acc} = tl.zeros({shape}, dtype=tl.float32)")
                updates.append(f"{acc} += {w}")
            elif r.op in ("max", "min"):  # a NaN sticks to its lane (torch's max is NaN then)
                inits.append(f"{acc} = tl.full({shape}, {NEUTRAL[r.op]}, tl.float32)")
                updates.append(f"{acc} = tl.{r.op}imum({acc}, {w}, propagate_nan=tl.PropagateNan.ALL)")
            else:  # argmax / argmin: best value and its first column, per lane; a NaN beats all but an earlier NaN
                better = ">" if r.op == "argmax" else "<"
                inits += [f"{acc} = tl.full({shape}, {NEUTRAL[r.op]}, tl.float32)", f"{acc}_i = tl.zeros({shape}, dtype=tl.int32)"]
                updates += [
                    f"{acc}_w = {w}",
                    f"{acc}_b = ({acc}_w {better} {acc}) | (({acc}_w != {acc}_w) & ({acc} == {acc}))",
                    f"{acc}_i = tl.where({acc}_b, col, {acc}_i)",
                    f"{acc} = tl.where({acc}_b, {acc}_w, {acc})",
                ]
            accs.append(acc)
        outer.lines += inits
        outer.lines += walk.loop(col_offset, loop.lines + updates)
        for r, acc in zip(reduces, accs):
            code.emit(outer, code.fold(outer, r.op, acc, f"{acc}_i", walk.over), r)

    def scalar(self, g, name, code, leaves, args, params) -> Rendered:
        reduces = [n for n in g.nodes if n.kind == "reduce"]
        if any(r.op.startswith("arg") for r in reduces):
            raise Unsupported("arg-reduction over everything")
        slot = {id(r): i for i, r in enumerate(reduces)}
        levels = sorted({g.level(r.args[0]) for r in reduces})
        outs = [f"out{i}" for i in range(len(g.outputs))]
        passes = []  # (partial prologue, loop body, partial stores, final scope) per level
        for lv in levels:
            mine = [r for r in reduces if g.level(r.args[0]) == lv]
            root = Scope(None, "0", None)
            self._load_stats(code, root, reduces, slot, lv)
            loop = Scope(root, "flat", "mask", row=root)
            inits, updates, stores = [], [], []
            for j, r in enumerate(mine):
                v = code.as_float(r.args[0], code.value(r.args[0], loop))
                w = f"tl.where(mask, {v}, {NEUTRAL[r.op]})"
                if r.op == "sum":
                    inits.append(f"acc{j} = tl.zeros([BLOCK], dtype=tl.float32)")
                    updates.append(f"acc{j} += {w}")
                else:  # a NaN sticks to its lane, and wins the folds (torch's max is NaN then)
                    inits.append(f"acc{j} = tl.full([BLOCK], {NEUTRAL[r.op]}, tl.float32)")
                    updates.append(f"acc{j} = tl.{r.op}imum(acc{j}, {w}, propagate_nan=tl.PropagateNan.ALL)")
                stores.append(f"tl.store(partials_ptr + {j} * programs + pid, {code.fold(root, r.op, f'acc{j}', '', 'axis=0')})")
            fin = Scope(None, "0", None)
            self._load_stats(code, fin, reduces, slot, lv)
            for j, r in enumerate(mine):
                part = code.emit(fin, f"tl.load(partials_ptr + {j} * programs + p, mask=pmask, other={NEUTRAL[r.op]})")
                var = code.emit(fin, code.fold(fin, r.op, part, "", "axis=0"), r)
                fin.lines.append(f"tl.store(stats_ptr + {slot[id(r)]}, {var})")
            passes.append((root.lines + inits, loop.lines + updates, stores, fin))
        self._stores(code, g, passes[-1][3], passes[-1][3], outs, only="row")
        apply = None
        if any(code.placement(n) == "full" for n in g.outputs):
            apply = Scope(None, "flat", "mask")
            self._load_stats(code, apply, reduces, slot, max(levels) + 1)
            self._stores(code, g, apply, None, outs, only="full")
        device = f"{next(iter(leaves.values())).arg}.device"
        prep, outs, sig, call, largs, returns = self._common(name, g, code, leaves, args, params, device)
        call = " ".join(call.splitlines())
        NAME = name.upper()
        kernels, launches = [], []
        for p, (prologue, body, stores, fin) in enumerate(passes):
            kernels.append(render("scalar_partial.py.tmpl", name=f"{name}_p{p}", params=sig, npass=str(p), prologue="\n".join(prologue), body="\n".join(body), store="\n".join(stores)))
            kernels.append(render("scalar_final.py.tmpl", name=f"{name}_f{p}", params=sig, npass=str(p), body="\n".join(fin.lines)))
            launches.append(f"{name}_p{p}_kernel[(programs,)]({call} stats, partials, n_red, float(n_red), programs, BLOCK={NAME}_BLOCK, num_warps={NAME}_NUM_WARPS)")
            launches.append(f"{name}_f{p}_kernel[(1,)]({call} stats, partials, float(n_red), programs, BLOCK_P=block_p)")
        if apply is not None:
            kernels.append(render("scalar_apply.py.tmpl", name=f"{name}_apply", params=sig, body="\n".join(apply.lines)))
            launches.append(
                f"{name}_apply_kernel[(triton.cdiv(n_red, {NAME}_BLOCK),)]({call} stats, n_red, float(n_red), "
                f"BLOCK={NAME}_BLOCK, WIDE=n_red >= 2**31, num_warps={NAME}_NUM_WARPS)"
            )
        src = render(
            "scalar.py.tmpl", name=name, NAME=NAME, kernels="\n\n\n".join(kernels), args=largs, doc=describe(g),
            prepare="\n".join(prep), n_red=prod([code.dom[d] for d in code.covered if d in g.red]), device=device,
            n_stats=str(len(reduces)), n_partials=str(max(sum(g.level(r.args[0]) == lv for r in reduces) for lv in levels)),
            launches="\n".join(launches), returns=returns,
        )
        tun = {f"{NAME}_BLOCK": 4096, f"{NAME}_PROGRAMS": 2048, f"{NAME}_NUM_WARPS": 8}
        return Rendered(name, src, tun, args, g.outputs, describe(g))

    def _load_stats(self, code: KernelCode, scope: Scope, reduces: list[Node], slot: dict, before: int) -> None:
        """Statistics folded by earlier passes, read back from the stats buffer."""
        for r in reduces:
            if code.g.level(r.args[0]) < before:
                code.emit(scope, f"tl.load(stats_ptr + {slot[id(r)]})", r)

    def gemm(self, g, name, code, leaves, args, params) -> Rendered:
        mm = g.gemm
        a, b, bias = gemm_operands(mm)
        if bias is not None:
            m = _align_bias(bias, g.shape)
            leaf = Leaf(bias, bias, m, f"in{len(args)}", f"in{len(args)}_ptr")
            leaves[id(bias)] = leaf
            g.smap[id(bias)] = m
            args.append(self.tensor(bias))
            params.append(leaf.ptr)
            code.gemm_value = "acc + " + code.expr(bias, Scope(None, "flat", "mask"))
        body = Scope(None, "flat", "mask")
        outs = [f"out{i}" for i in range(len(g.outputs))]
        self._stores(code, g, body, None, outs)
        prep, outs, sig, call, largs, returns = self._common(name, g, code, leaves, args, params, "a.device")
        a_expr = self.tensor(a)
        b_expr = self.tensor(b) + (".t()" if mm.op.startswith("aten.linear") else "")
        src = render(
            "gemm.py.tmpl", name=name, NAME=name.upper(), params=sig, body="\n".join(body.lines),
            args=", ".join(["a", "b"] + ([largs] if largs else [])), doc=describe(g), prepare="\n".join(prep),
            call_args=call, returns=returns,
        )
        tun = {
            f"{name.upper()}_BLOCK_M": 64, f"{name.upper()}_BLOCK_N": 64, f"{name.upper()}_BLOCK_K": 32,
            f"{name.upper()}_GROUP_M": 8, f"{name.upper()}_NUM_WARPS": 4, f"{name.upper()}_NUM_STAGES": 3,
        }
        return Rendered(name, src, tun, [a_expr, b_expr] + args, g.outputs, describe(g))


def gemm_operands(mm: Node) -> tuple[Node, Node, Node | None]:
    """(A, B, bias) of a matmul-like extern, B as stored (linear's weight is B transposed)."""
    op = mm.op.split(".")[1]
    if op == "linear":
        x, w = mm.args[0], mm.args[1]
        bias = mm.args[2] if len(mm.args) > 2 and isinstance(mm.args[2], Node) else None
        return x, w, bias
    if op == "addmm":
        beta = mm.kwargs.get("beta", mm.args[3] if len(mm.args) > 3 else 1)
        alpha = mm.kwargs.get("alpha", mm.args[4] if len(mm.args) > 4 else 1)
        if beta != 1 or alpha != 1 or isinstance(beta, Bound) or isinstance(alpha, Bound):
            raise Unsupported("scaled addmm")
        return mm.args[1], mm.args[2], mm.args[0]
    return mm.args[0], mm.args[1], None


def _align_bias(bias: Node, shape: tuple[int, ...]) -> tuple:
    off = len(shape) - len(bias.shape)
    return tuple(None if s == 1 else off + j for j, s in enumerate(bias.shape))


def _source_map(view: Node, view_map) -> tuple:
    dims = iter([d for d, s in zip(view_map, view.shape) if s != 1])
    return tuple(next(dims) if s != 1 else None for s in view.args[0].shape)


PUBLIC = {
    "aten.linear.default": "torch.nn.functional.linear",
    "aten.conv1d.default": "torch.nn.functional.conv1d",
    "aten.conv2d.default": "torch.nn.functional.conv2d",
    "aten.conv3d.default": "torch.nn.functional.conv3d",
    "aten.mm.default": "torch.mm",
    "aten.bmm.default": "torch.bmm",
    "aten.matmul.default": "torch.matmul",
}


def public_name(n: Node) -> str:
    return PUBLIC.get(n.op, f"torch.ops.{n.op}")


def describe(g: Group, kind: str | None = None) -> str:
    ops = [n.op for n in g.nodes if n.kind in ("op", "reduce")]
    names = ", ".join(dict.fromkeys(ops)) or "copy"
    what = {
        "pointwise": "one elementwise pass",
        "pointwise_cl": "one elementwise pass over 2D tiles, the convolution read channels-last, written NCHW",
        "rows_cl": f"one pass per row over dims {list(g.red)}, the convolution read channels-last, written NCHW",
        "rows": f"one pass per row over dims {list(g.red)}",
        "columns": f"column layout: contiguous inner axis per program, folding dims {list(g.red)} in chunks",
        "scalar": "a two-stage reduction to a scalar",
        "gemm": "a Triton GEMM with the epilogue on its accumulator",
    }[kind or g.kind]
    return f"{what} ({len(ops)} ops: {names})"


# ---------------------------------------------------------------------------------------------
# The op file


def render_file(source: str, graph: Graph, items: list, columns: bool = False, channels_last: bool = False) -> tuple[str, list[str]]:
    """The reference file with the kernels inserted and the entry's forward rewritten; with
    `columns`, strided row reductions in the column layout; with `channels_last`, 2D
    convolutions on channels-last operands and their epilogues reading that layout."""
    tree = ast.parse(source)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    model = classes["Model"]
    fwd = next((f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if fwd is None:
        raise Unsupported("Model has no forward")
    low = Lowering(graph, items, columns, channels_last)
    forward = low.forward(ast.unparse(fwd.args))
    if not low.rendered:
        raise Unsupported("nothing for a Triton kernel")
    helpers = [render(HELPERS[h]) for h in sorted(low.helpers)]
    block = [
        "# Kernels generated by okgit's template proposer. The annotated constants are launch",
        "# settings (annotated so they are not taken for shape knobs); okgit's autotune varies them.",
        *[f"{k}: int = {v}" for r in low.rendered for k, v in r.tunables.items()],
        "",
        "",
        "\n\n\n".join(helpers + [r.source for r in low.rendered]),
    ]
    lines = source.splitlines()
    if graph.entry == "ModelNew":
        new = classes["ModelNew"]
        start = (new.decorator_list[0].lineno if new.decorator_list else new.lineno) - 1
        doc = '    """Model with its forward lowered to the Triton kernels above."""\n\n'
        lines[start : new.end_lineno] = (f"class ModelNew(Model):\n{doc}{forward}").rstrip("\n").splitlines()
    else:
        start = (fwd.decorator_list[0].lineno if fwd.decorator_list else fwd.lineno) - 1
        lines[start : fwd.end_lineno] = forward.rstrip("\n").splitlines()
    first = min(c.lineno - len(c.decorator_list) for c in classes.values() if c.name in ("Model", "ModelNew")) - 1
    lines[first:first] = "\n".join(block).splitlines() + ["", ""]
    imported = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.asname or a.name for n in imported for a in n.names}
    wanted = [("import torch", "torch"), ("import triton", "triton"), ("import triton.language as tl", "tl")]
    if re.search(r"\bmath\.", forward):  # an attribute constant recomputed with math.log, math.sqrt, ...
        wanted.insert(0, ("import math", "math"))
    missing = [line for line, name in wanted if name not in names]
    after = max((n.end_lineno for n in imported if n.end_lineno <= first), default=0)
    lines[after:after] = missing
    return "\n".join(lines) + "\n", low.rendered


# ---------------------------------------------------------------------------------------------
# The proposer


def _origin(items: list, columns: bool, cl: dict[int, Node | None] | None = None) -> str:
    parts = []
    for it in items:
        if cl and id(it) in cl:
            parts.append("vendor_conv_cl")
            continue
        if isinstance(it, Group):
            parts.append(layout(it, columns))
        elif it.gemm:
            parts.append("vendor_gemm")
        elif "conv" in it.op:
            parts.append("vendor_conv")
    return "template:" + "+".join(dict.fromkeys(parts))


def _intent(rendered: list[Rendered], items: list) -> str:
    kept = sorted({public_name(it) for it in items if isinstance(it, Node) and it.op != "getitem"})
    fused = "; ".join(r.description for r in rendered)
    return f"Fuse into Triton: {fused}" + (f"; keep {', '.join(kept)} in PyTorch." if kept else ".")


class TemplatesProposer:
    """Recognises the reference's computation and proposes fused Triton rewrites of it.

    With a matmul in the graph there are two candidates: the vendor GEMM plus one fused
    epilogue kernel first (cuBLAS beats a Triton GEMM in strict fp32), then a Triton GEMM
    with the epilogue on its accumulator. A reduction over dims that are not the innermost
    has two as well: the column layout first (coalesced loads), then the row layout; the
    search times both and keeps the faster.
    """

    name = "templates"

    def __init__(self) -> None:
        self._queue: list[Proposal] | None = None
        self._source: str | None = None

    def propose(self, ctx: Context) -> Proposal | None:
        if self._source != ctx.problem.source:
            self._source = ctx.problem.source
            self._queue = plan(ctx)
        return self._queue.pop(0) if self._queue else None


def plan(ctx: Context) -> list[Proposal]:
    """Every template candidate for the reference, best expected first."""
    try:
        graph = capture(ctx.problem)
    except Unsupported as e:
        ctx.log("note", message=f"templates: {e}")
        return []
    out: list[Proposal] = []
    gemms = (False, True) if any(n.gemm for n in graph.nodes) else (False,)
    variants = [(f, c, False) for f in gemms for c in (True, False)]
    if any(n.op in CL_CONV_OPS for n in graph.nodes):
        variants.append((False, False, True))  # after the NCHW candidates: both are timed
    for fuse_gemm, columns, channels_last in variants:
        try:
            items = partition(graph, fuse_gemm=fuse_gemm)
            if columns and not any(isinstance(it, Group) and strided(it) for it in items):
                continue  # no strided row reduction: the column layout would change nothing
            source, rendered = render_file(ctx.problem.source, graph, items, columns, channels_last)
        except Unsupported as e:
            what = f"{'Triton' if fuse_gemm else 'vendor'} GEMM{', column layout' if columns else ''}"
            what += ", channels-last convolution" if channels_last else ""
            ctx.log("note", message=f"templates ({what}): {e}")
            continue
        out.append(Proposal(
            source=source,
            origin=_origin(items, columns, channels_last_convs(graph, items) if channels_last else None),
            intent=_intent(rendered, items),
            parent=None,
            meta={"kernels": [r.name for r in rendered], "tunables": {k: v for r in rendered for k, v in r.tunables.items()}},
        ))
    return out
