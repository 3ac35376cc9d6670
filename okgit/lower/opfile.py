"""The op file: the partitioned graph rendered into kernels, launchers and a new forward.

`FileLowering` walks the partition in execution order: a PyTorch op stays a call in the
rewritten forward (`extern`), a fusion group goes to the first template kind that claims it
(okgit.lower.kinds), which renders its kernels and launcher. `lowered_file` puts them into the
reference file: the kernels and their launch settings before the model class, `forward`
rewritten (or `ModelNew(Model)` where the file defines ModelNew), so `get_inputs`, the knobs
and the parameters are the reference's own.

Constants the reference reads from its module's float attributes (`self.temperature`,
`self.eps`, ...; graph.Bound) are not baked: the forward recomputes each from `self` and the
launcher passes it to the kernel as a scalar argument (`c0`, ...), so a candidate stays right
for every `Model(...)`.
"""

from __future__ import annotations

import ast
import re

import torch

from okgit.lower.fusion import Group
from okgit.lower.graph import Bound, BoundInt, Graph, ModeFlag, Node, Unsupported, module_expr, reshapes
from okgit.lower.kernelcode import HELPERS, KernelCode, Leaf, indent, literal
from okgit.lower.kinds import kinds
from okgit.lower.kinds.base import Rendered, TemplateKind, constants
from okgit.lower.template import fill
from okgit.lower.translate import op_description


class FileLowering:
    """Renders the partitioned graph: kernels, launchers and the new forward."""

    def __init__(self, graph: Graph, items: list, turned_on: tuple[TemplateKind, ...] = ()) -> None:
        self.graph, self.items = graph, items
        # a group goes to the first of these that claims it: those that claim first, then the
        # optional kinds turned on, then the others (kinds()'s order, sorted is stable)
        on = [k for k in kinds() if not k.optional or k in turned_on]
        self.kinds = tuple(sorted(on, key=lambda k: not k.claims_first))
        self.chosen: dict[int, TemplateKind] = {}  # group -> the kind that lowered it
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
                self.names[id(n)] = module_expr(n.op)
        self.state = {k: k.candidate_state(self) for k in self.kinds}  # what each kind set up for this candidate

    # forward ---------------------------------------------------------------------------------
    def fresh(self) -> str:
        self.counter += 1
        return f"t{self.counter - 1}"

    def tensor(self, n: Node) -> str:
        """A forward expression for n's tensor; views of tensors become reshapes."""
        if id(n) in self.names:
            return self.names[id(n)]
        if n.kind == "view":
            src = self.tensor(n.args[0])
            if reshapes(n):
                shape = ", ".join(f"{src}.shape[{s[1]}]" if isinstance(s, tuple) else self.pyarg(s, "") for s in n.kwargs["sizes"])
            else:
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
        if isinstance(a, BoundInt):
            return f"int({a.expr})"
        if isinstance(a, ModeFlag):
            return a.expr
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
        for kind in self.kinds:
            kind.extern_args(self, n, args, kwargs)
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
        # every group has a kind that claims it: those that lower the unseeded shapes are always
        # on, and a group is seeded only by a kind turned on
        kind = next(kd for kd in self.kinds if kd.claims(g, self))
        self.chosen[id(g)] = kind
        args: list[str] = []
        params: list[str] = []
        leaves = self.read(g, args, params)
        dom, self._dom_src = self.domain(g, leaves, kind)
        code = KernelCode(g, leaves, dom, self.helpers)
        return kind.lower(self, g, kind.kernel_name(g, k), code, leaves, args, params)

    def read(self, g: Group, args: list[str], params: list[str]) -> dict[int, Leaf]:
        """A Leaf per value g reads from memory (a view of a tensor read through its source),
        its forward expression appended to `args` and its kernel pointer to `params`."""
        leaves: dict[int, Leaf] = {}
        for n in g.leaves:
            base, bmap = n, g.smap[id(n)]
            while base.kind == "view" and id(base) not in self.materialized and not reshapes(base):
                bmap, base = _source_map(base, bmap), base.args[0]
            arg = f"in{len(args)}"
            leaves[id(n)] = Leaf(n, base, bmap, arg, f"{arg}_ptr")
            args.append(self.tensor(base))
            params.append(f"{arg}_ptr")
        return leaves

    def domain(self, g: Group, leaves: dict[int, Leaf], kind: TemplateKind | None, var: str = "d") -> tuple[list[str], list[tuple[str, str]]]:
        """Each domain dim as a launcher variable (`var`0, ...) taken from the kind's own source or
        a leaf dim that spans it, or 1; with the launcher's (variable, source) pairs."""
        dom, sources = [], []
        for d, size in enumerate(g.shape):
            src = kind.domain_source(g, d) if kind is not None else None
            for leaf in leaves.values():
                if src is None and d in leaf.bmap:
                    src = f"{leaf.arg}.shape[{leaf.bmap.index(d)}]"
            if src is None and size != 1:
                raise Unsupported("a domain dim no operand spans")
            dom.append(f"{var}{d}" if src is not None else "1")
            if src is not None:
                sources.append((f"{var}{d}", src))
        return dom, sources

    def launcher_prologue(self, leaves: dict[int, Leaf], outputs: list[Node], code: KernelCode, g: Group, device: str) -> tuple[list[str], list[str]]:
        """Launcher lines before the launch, and the output names."""
        lines = [f"{leaf.arg} = {_laid_out(leaf)}" for leaf in leaves.values()]
        lines += [f"{d} = {src}" for d, src in self._dom_src]
        outs = []
        for i, n in enumerate(outputs):
            m = g.smap[id(n)]
            shape = [code.dom[d] if d is not None else "1" for d in m]
            shape_code = ", ".join(shape) + ("," if len(shape) == 1 else "")
            lines.append(f"out{i} = torch.empty(({shape_code}), device={device}, dtype={n.dtype})")
            outs.append(f"out{i}")
        return lines, outs

    def launcher_parts(self, g: Group, code: KernelCode, leaves: dict[int, Leaf], args: list[str], params: list[str], device: str):
        """(launcher lines before the launch, kernel parameters, launch arguments, launcher
        parameters, returned names); `args` gains the attribute constants' expressions."""
        prep, outs = self.launcher_prologue(leaves, g.outputs, code, g, device)
        ptrs = params + [f"{o}_ptr" for o in outs]
        scalars = list(code.scalars.values())
        sig = "\n".join(f"{p}," for p in ptrs + list(code.sizes.values()) + scalars)
        call = "\n".join(f"{a}," for a in [leaf.arg for leaf in leaves.values()] + outs + list(code.sizes) + scalars)
        launcher_args = ", ".join([leaf.arg for leaf in leaves.values()] + scalars)
        args += [f"float({e})" for e in code.scalars]  # the forward reads them from self
        returns = ", ".join(outs)
        return prep, sig, call, launcher_args, returns

    def origin(self) -> str:
        """The candidate's origin tag: each group's kind and the PyTorch calls beside them, after
        the kinds turned on whose work was their rewrite alone (TemplateKind.rewrite_only)."""
        parts = [k.name for k in self.kinds if k.rewrite_only]
        for it in self.items:
            if isinstance(it, Group):
                parts.append(self.chosen[id(it)].origin(it))
            else:
                parts += [p for p in (k.extern_origin(it, self) for k in kinds()) if p][:1]
        return "template:" + "+".join(dict.fromkeys(parts))


def _laid_out(leaf: Leaf) -> str:
    """The leaf as its kernel reads it (Leaf.order): contiguous; channels-last by torch's memory
    format of that name (channels_last_3d in 3D); in any other order the tensor permuted to it,
    made contiguous and permuted back (no copy where it is laid out so already)."""
    rank = len(leaf.node.shape)
    if not leaf.order or leaf.order == tuple(range(rank)):
        return f"{leaf.arg}.contiguous()"
    if leaf.order == (0, *range(2, rank), 1) and rank in (4, 5):
        return f"{leaf.arg}.contiguous(memory_format=torch.channels_last{'_3d' if rank == 5 else ''})"
    back = tuple(leaf.order.index(d) for d in range(rank))
    return f"{leaf.arg}.permute{leaf.order}.contiguous().permute{back}"


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


def lowered_file(source: str, graph: Graph, items: list, turned_on: tuple[TemplateKind, ...] = ()) -> tuple[str, FileLowering]:
    """The reference file with the kernels inserted and the entry's forward rewritten, its
    groups lowered by the kinds every candidate has and the optional ones `turned_on`; the
    FileLowering tells what was rendered and by which kinds."""
    tree = ast.parse(source)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    model = classes["Model"]
    fwd = next((f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if fwd is None:
        raise Unsupported("Model has no forward")
    low = FileLowering(graph, items, turned_on)
    forward = low.forward(ast.unparse(fwd.args))
    if not low.rendered:
        raise Unsupported(nothing_to_lower(low))
    texts = {**HELPERS, **{name: text for k in kinds() for name, text in k.helpers.items()}}
    helpers = [fill(texts[h]) for h in sorted(low.helpers)]
    block = [
        "# Kernels generated by okgit's template proposer. The annotated constants are launch",
        "# settings (annotated so they are not taken for shape knobs); okgit's autotune varies them.",
        *[line for r in low.rendered for line in constants(r.tunables)],
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
    after = max((end for end in (n.end_lineno for n in imported) if end is not None and end <= first), default=0)
    lines[after:after] = missing
    return "\n".join(lines) + "\n", low


def nothing_to_lower(low: FileLowering) -> str:
    """Why a partition gives no Triton kernel: the ops no template covers, each with its class
    ("no template covers aten.cumsum (scan)"), or else the vendor calls that are all there is."""
    calls = [n for n in low.items if isinstance(n, Node) and n.op != "getitem"]
    uncovered = [n for n in calls if not any(k.extern_origin(n, low) for k in kinds())]
    if uncovered:
        return "no template covers " + ", ".join(dict.fromkeys(op_description(n) for n in uncovered))
    return "nothing for a Triton kernel beside " + ", ".join(dict.fromkeys(op_description(n) for n in calls))
