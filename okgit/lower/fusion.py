"""Cut a captured graph (okgit.lower.graph) into fusion groups, one kernel each.

A group is the nodes one Triton kernel computes over one iteration domain: an elementwise
chain, a reduction with what it feeds over the same rows, scans along one dim with their
elementwise prologue and epilogue, or, where a template kind turned on
seeds groups from PyTorch calls (kinds/gemm.py: a matmul), that call with its elementwise
epilogue, and, where the kind computes the call's input in its own kernel (a pooling window's
taps, kinds/pool.py), the elementwise group before it that computes only that input (its
`prologue`). Which kind lowers a group is the kinds' business (okgit.lower.kinds): each claims
groups by their shape here. What no group takes (convolutions, vendor GEMMs, unknown ops)
stays a PyTorch call: `partition` returns groups and those nodes in execution order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from okgit.lower.graph import Graph, Node, Unsupported, reshapes


class Seeding(Protocol):
    """A template kind as partitioning sees it (okgit.lower.kinds.base.TemplateKind): whether a
    call starts a group of its own, and which of its operands its kernel computes itself. Stated
    here, so fusion imports nothing of the kinds."""

    def seeds(self, n: Node) -> bool: ...

    def prologue_input(self, n: Node) -> Node | None: ...

    def folds(self, seed: Node, r: Node, red: tuple[int, ...]) -> bool: ...


@dataclass(eq=False)
class Group:
    """Nodes one kernel computes over the domain `shape`, folding the domain dims `red`.

    `smap` maps each value the group touches (computed or read) from its own dims to domain
    dims (None for a size-1 dim): that is how a value broadcasts inside the kernel.
    """

    shape: tuple[int, ...]
    red: tuple[int, ...] = ()
    scan: tuple[int, ...] = ()  # the domain dim its scans run along (one), where it has scans
    seed: Node | None = None  # a PyTorch call the group computes itself, its epilogue after it (a Triton GEMM's matmul)
    prologue: Group | None = None  # an elementwise group computing the seed's input, inside this kernel
    nodes: list[Node] = field(default_factory=list)  # computed here, in order
    leaves: list[Node] = field(default_factory=list)  # read from memory
    outputs: list[Node] = field(default_factory=list)  # written to memory
    smap: dict[int, tuple[int | None, ...]] = field(default_factory=dict)

    def folds_all(self) -> bool:
        """Whether the folded dims are every dim of the domain that is not 1 (one value out)."""
        return all(d in self.red for d, s in enumerate(self.shape) if s != 1)

    def has(self, n: Node) -> bool:
        return id(n) in self.smap

    def computes(self, n: Node) -> bool:
        return self.has(n) and n not in self.leaves

    def full(self, n: Node) -> bool:
        """Whether n varies along the folded dims (a tile value) rather than once per row."""
        return any(d in self.red for d in self.smap[id(n)] if d is not None)

    def level(self, n: Node, memo: dict[int, int] | None = None) -> int:
        """The number of reduction passes that must finish before n can be computed."""
        memo = {} if memo is None else memo
        if id(n) not in memo:
            if not self.computes(n) or n is self.seed or n.kind == "iota":
                memo[id(n)] = 0
            else:
                memo[id(n)] = max((self.level(a, memo) for a in n.inputs), default=0) + (n.kind == "reduce")
        return memo[id(n)]

    def online_max(self, r: Node) -> tuple[Node, str] | None:
        """(m, f) where the reduction r sums f(e - m), f exp or exp2, and m is the max of that same
        e over the same rows, broadcast back along them (a softmax's denominator): a streamed pass
        can fold r beside m, rescaling each lane's partial sum as its running max grows, instead
        of reading the row again once m is known (kernelcode.fold_passes)."""
        if not (r.kind == "reduce" and r.op == "sum"):
            return None
        f = self._through(r.args[0])
        if not (self.computes(f) and f.kind == "op" and f.op in ("exp", "exp2")):
            return None
        d = self._through(f.args[0])
        if not (self.computes(d) and d.kind == "op" and d.op == "sub" and len(d.inputs) == 2):
            return None
        e, m = (self._through(a) for a in d.args)
        if self.computes(m) and m.kind == "reduce" and m.op == "max" and self._through(m.args[0]) is e:
            return m, f.op
        return None

    def online_mean(self, r: Node) -> tuple[Node, Node] | None:
        """(s, m) where the reduction r sums (e - m)^2, m the mean of that same e over the same
        rows (its sum s over the reduction's count), broadcast back along them (a variance): a
        streamed pass can fold r beside s by Welford's updates, each lane's running mean and sum
        of squared deviations, instead of reading the row again once m is known
        (streamed.fold_passes)."""
        if not (r.kind == "reduce" and r.op == "sum"):
            return None
        sq = self._through(r.args[0])
        if not (self.computes(sq) and sq.kind == "op"):
            return None
        if sq.op == "mul" and all(isinstance(a, Node) for a in sq.args) and self._through(sq.args[0]) is self._through(sq.args[1]):
            d = self._through(sq.args[0])
        elif sq.op == "pow" and isinstance(sq.args[0], Node) and sq.args[1] in (2, 2.0):
            d = self._through(sq.args[0])
        else:
            return None
        if not (self.computes(d) and d.kind == "op" and d.op == "sub" and len(d.inputs) == 2):
            return None
        e, m = (self._through(a) for a in d.args)
        if not (self.computes(m) and m.kind == "op" and m.op == "div" and len(m.inputs) == 2):
            return None
        total, count = (self._through(a) for a in m.args)
        if (count.kind == "count" and self.computes(total) and total.kind == "reduce" and total.op == "sum"
                and self._through(total.args[0]) is e):
            return total, m
        return None

    def _through(self, n: Node) -> Node:
        """The value under the unit-dim views the group computes on top of n (they move no data)."""
        while n.kind == "view" and self.computes(n):
            n = n.args[0]
        return n


def _align(own: tuple[int, ...], out_shape: tuple[int, ...], out_map, domain: tuple[int, ...]):
    """Map an operand's dims to domain dims through its consumer's map (torch broadcasting)."""
    off = len(out_shape) - len(own)
    if off < 0:
        return None
    m: list[int | None] = []
    for j, s in enumerate(own):
        d = out_map[off + j]
        if s == 1:
            m.append(None)
        elif d is None or domain[d] != s:
            return None
        else:
            m.append(d)
    return tuple(m)


def _through_view(src: Node, view: Node, view_map) -> tuple:
    """A unit-dim view keeps its non-1 dims in order: its source's map follows from the view's."""
    dims = iter([d for d, s in zip(view_map, view.shape) if s != 1])
    return tuple(next(dims) if s != 1 else None for s in src.shape)


def _from_source(src: Node, src_map, view: Node) -> tuple:
    dims = iter([d for d, s in zip(src_map, src.shape) if s != 1])
    return tuple(next(dims) if s != 1 else None for s in view.shape)


class _Partitioner:
    def __init__(self, graph: Graph, seeding: tuple[Seeding, ...]) -> None:
        self.graph = graph
        self.seeding = seeding
        self.users = users = graph.users()
        self.outs = outs = {id(o) for o in graph.outputs}
        self.items: list[Group | Node] = []
        self.group: Group | None = None
        # Elementwise work on parameters (or constants) alone is recomputed inside the kernel that
        # reads it, unless someone needs it as a tensor.
        self.inline: set[int] = set()
        for n in graph.nodes:
            needed = id(n) in outs or any(u.kind == "extern" for u in users[id(n)])
            if n.kind in ("op", "view") and not reshapes(n) and not needed and all(
                a.kind == "param" or id(a) in self.inline for a in n.inputs
            ):
                self.inline.add(id(n))

    def run(self) -> list[Group | Node]:
        for n in self.graph.nodes:
            if n.is_leaf or id(n) in self.inline:
                continue
            if n.kind == "view" and (reshapes(n) or not (self.group and self.group.computes(n.args[0]))):
                continue  # a view of a tensor in memory is read in place by its consumers
            if n.kind == "extern":
                self._close()
                if n.op != "getitem" and any(k.seeds(n) for k in self.seeding):
                    self.group = Group(shape=n.shape, seed=n)
                    self.group.smap[id(n)] = tuple(range(len(n.shape)))
                else:
                    self.items.append(n)
                continue
            if self.group is None or not self._add(self.group, n):
                self._close()
                self.group = Group(shape=n.args[0].shape if n.kind == "reduce" else n.shape)
                if not self._add(self.group, n):
                    raise Unsupported(f"cannot lower {n.kind} {n.op} of shape {n.shape}")
        self._close()
        return self.items

    def _close(self) -> None:
        if self.group is not None and (self.group.nodes or self.group.seed is not None):
            self.items.append(self.group)
        self.group = None

    # operands ----------------------------------------------------------------------------
    def _operand_map(self, g: Group, a: Node, user: Node, user_map):
        if g.has(a):
            return g.smap[id(a)]
        m = _through_view(a, user, user_map) if user.kind == "view" else _align(a.shape, user.shape, user_map, g.shape)
        if m is not None and id(a) in self.inline and any(self._operand_map(g, b, a, m) is None for b in a.inputs):
            return None
        return m

    def _claim(self, g: Group, a: Node, m) -> None:
        """Record an operand g does not compute from its own nodes: read it, or inline it."""
        if g.has(a):
            return
        if id(a) in self.inline:
            for b in a.inputs:
                self._claim(g, b, self._operand_map(g, b, a, m))
            g.nodes.append(a)
        else:
            g.leaves.append(a)
        g.smap[id(a)] = m

    # nodes -------------------------------------------------------------------------------
    def _add(self, g: Group, n: Node) -> bool:
        if g.seed is not None and n.kind not in ("op", "view", "iota") and not self._folded(g, n):
            return False  # a seeded group is its call and an elementwise epilogue, or one its kind folds
        if n.kind == "reduce":
            return self._add_reduce(g, n)
        if n.kind == "scan":
            return self._add_scan(g, n)
        if n.kind == "count":
            if not g.computes(n.args[0]):
                return False
            return self._put(g, n, ())
        if n.kind == "iota":
            if len(n.shape) != len(g.shape) or any(s not in (1, g.shape[i]) for i, s in enumerate(n.shape)):
                return False
            return self._put(g, n, tuple(i if s != 1 else None for i, s in enumerate(n.shape)))
        if n.kind == "view":
            return self._put(g, n, _from_source(n.args[0], g.smap[id(n.args[0])], n))
        out_map = self._out_map(g, n)
        if out_map is None or (g.seed is not None and any(d in g.red for d in out_map)):
            return False  # after a seeded group's fold, only the rows' own values
        maps = []
        for a in n.inputs:
            m = self._operand_map(g, a, n, out_map)
            if m is None or (g.has(a) and _misaligned(a, g.smap[id(a)], n, out_map)):
                return False
            maps.append((a, m))
        for a, m in maps:
            self._claim(g, a, m)
        return self._put(g, n, out_map)

    def _put(self, g: Group, n: Node, m) -> bool:
        g.smap[id(n)] = m
        g.nodes.append(n)
        return True

    def _out_map(self, g: Group, n: Node):
        """Domain dims of n's dims, from the operands g already has. In a seeded group a size-1
        dim of the domain's own rank is the domain's dim, as it is for the seed (its kind spans it
        at run time: a GEMM's batch of 1), so that the epilogue's outputs cover what the seed's do."""
        if not g.smap:
            return tuple(range(len(n.shape))) if n.shape == g.shape else None
        out: list[int | None] = []
        for j, s in enumerate(n.shape):
            seen = set()
            for a in n.inputs:
                off = len(n.shape) - len(a.shape)
                if g.has(a) and j >= off and a.shape[j - off] != 1:
                    seen.add(g.smap[id(a)][j - off])
            if len(seen) > 1:
                return None
            if seen:
                out.append(seen.pop())
            elif s == 1 and not (g.seed is not None and len(n.shape) == len(g.shape) and g.shape[j] == 1):
                out.append(None)
            elif len(n.shape) == len(g.shape) and g.shape[j] == s:
                out.append(j)
            else:
                return None
        return tuple(out)

    def _folded(self, g: Group, n: Node) -> bool:
        """Whether the seeded group g takes the reduction n (or, after one, its element count): its
        kind folds it in the seed's epilogue (Seeding.folds) and nothing else reads the full values
        g computes, the seed's among them: they never leave the kernel, only the folded rows do."""
        seed = g.seed
        if n.kind == "count":
            return bool(g.red)
        x = n.args[0]
        if seed is None or n.kind != "reduce" or not (g.computes(x) or x is seed):
            return False
        xm = g.smap[id(x)]
        red = tuple(sorted(i for i in (xm[d] for d in n.dims) if i is not None))
        if not any(k.seeds(seed) and k.folds(seed, n, red) for k in self.seeding):
            return False
        full = [m for m in [seed, *g.nodes] if all(d in g.smap[id(m)] for d in red)]
        computed = {id(m) for m in g.nodes} | {id(n)}
        return all(id(m) not in self.outs and all(id(u) in computed or u.kind in ("reduce", "count")
                                                   for u in self.users[id(m)]) for m in full)

    def _operand_of(self, g: Group, x: Node):
        """The map of a reduction's or scan's operand: from g, or read whole over g's domain."""
        if g.has(x):
            return g.smap[id(x)]
        if x.shape == g.shape and not (x.kind == "view" and id(x) in self.inline):
            return tuple(i if s != 1 else None for i, s in enumerate(x.shape))
        return None

    def _add_scan(self, g: Group, n: Node) -> bool:
        """A scan joins an elementwise group, or one scanning the same domain dim the same way."""
        x = n.args[0]
        xm = self._operand_of(g, x)
        if xm is None or g.red or g.seed is not None or xm[n.dims[0]] is None or g.scan not in ((), (xm[n.dims[0]],)):
            return False
        if any(m.kind == "scan" and m.kwargs != n.kwargs for m in g.nodes):
            return False
        self._claim(g, x, xm)
        g.scan = (xm[n.dims[0]],)
        return self._put(g, n, xm)

    def _add_reduce(self, g: Group, n: Node) -> bool:
        x = n.args[0]
        xm = self._operand_of(g, x)
        if xm is None or g.scan:
            return False
        red = tuple(sorted(i for i in (xm[d] for d in n.dims) if i is not None))
        if not red or (g.red and red != g.red):
            return False
        self._claim(g, x, xm)
        g.red = red
        if n.keepdim:
            m = tuple(None if i in n.dims else d for i, d in enumerate(xm))
        else:
            m = tuple(d for i, d in enumerate(xm) if i not in n.dims)
        return self._put(g, n, m)


def _misaligned(a: Node, amap, n: Node, out_map) -> bool:
    """True when torch's right-aligned broadcast puts a's values along other domain dims."""
    off = len(n.shape) - len(a.shape)
    return any(s != 1 and amap[j] != out_map[off + j] for j, s in enumerate(a.shape))


def partition(graph: Graph, seeding: tuple[Seeding, ...] = ()) -> list[Group | Node]:
    """Fusion groups and PyTorch ops in execution order, with each group's outputs; a PyTorch
    call that one of the kinds `seeding` seeds from (Seeding.seeds) starts a group."""
    parts = _Partitioner(graph, seeding)
    items = parts.run()
    users = graph.users()
    outs = {id(o) for o in graph.outputs}
    for g in (it for it in items if isinstance(it, Group)):
        made = ([g.seed] if g.seed is not None else []) + [n for n in g.nodes if id(n) not in parts.inline]
        for n in made:
            if id(n) in outs or any(not g.computes(u) for u in users[id(n)]):
                g.outputs.append(n)
    return _take_prologues(items, graph, seeding)


def _take_prologues(items: list[Group | Node], graph: Graph, seeding: tuple[Seeding, ...]) -> list[Group | Node]:
    """A seeded group whose kind computes the call's input itself (Seeding.prologue_input)
    takes the elementwise group just before it when that group writes only that input, of the
    input's own shape, and nothing else reads it: it is then computed where it is read."""
    users = graph.users()
    outs = {id(o) for o in graph.outputs}
    out: list[Group | Node] = []
    for it in items:
        prev = out[-1] if out else None
        if isinstance(it, Group) and it.seed is not None and isinstance(prev, Group):
            x = next((k.prologue_input(it.seed) for k in seeding if k.seeds(it.seed)), None)
            if (x is not None and prev.seed is None and not prev.red and prev.leaves and prev.outputs == [x] and prev.shape == x.shape
                    and id(x) not in outs and all(u is it.seed for u in users[id(x)])):
                it.prologue = prev
                out.pop()
        out.append(it)
    return out
