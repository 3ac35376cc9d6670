"""What a template kind is: the contract between a kind's module and the op-file lowering.

A kind lowers the fusion groups it claims into Triton kernels and one launcher each
(`lower`), from its own template texts (beside its module), with its own launch settings
(`tunables`), description (`what`) and part of the candidate's origin tag (`origin`). A kind
owns its recognition: which groups it lowers (`claims`, from the group's shape), which PyTorch
calls start a group of its own (`seeds`: the Triton GEMM's matmul, whose value inside the
kernel the kind sets as KernelCode.seed_value), where its domain's sizes come from when no
operand of the group spans them (`domain_source`). An optional kind is off unless a candidate
turns it on: it is an alternative for groups another kind lowers too (the column layout for a
strided row reduction) or changes what the partition makes (the Triton GEMM), and each such
candidate is one more for the search to time.

The kinds are a registry (`KINDS`, entry-point group `okgit.template_kinds`): a kind's module
registers its class with `@template_kind(order)`, built-ins and extensions alike; a group goes
to the first kind in that order that is on and claims it (okgit.lower.kinds.kinds()).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from okgit.lower.fusion import Group
from okgit.lower.graph import Graph, Node
from okgit.registry import Registry

if TYPE_CHECKING:
    from okgit.lower.kernelcode import KernelCode, Leaf
    from okgit.lower.template import Traversable


class Lowering(Protocol):
    """What a kind may use of the candidate file being lowered. okgit.lower.opfile.FileLowering is
    the one implementation; stated here so that the kinds import nothing of opfile, which imports
    them."""

    graph: Graph
    items: list
    helpers: set[str]  # the Triton helpers the file's kernels call
    state: dict[TemplateKind, Any]  # what each kind set up for this candidate (candidate_state)

    def tensor(self, n: Node) -> str: ...

    def pyarg(self, a: Any, device: str) -> str: ...

    def read(self, g: Group, args: list[str], params: list[str]) -> dict[int, Leaf]: ...

    def domain(self, g: Group, leaves: dict[int, Leaf], kind: TemplateKind | None,
               var: str = "d") -> tuple[list[str], list[tuple[str, str]]]: ...

    def launcher_parts(self, g: Group, code: KernelCode, leaves: dict[int, Leaf], args: list[str], params: list[str],
                       device: str) -> Any: ...


@dataclass
class Rendered:
    name: str  # launcher
    source: str  # kernels + launcher
    tunables: Mapping[str, int | str]  # module constants: launch settings (int), a GEMM's precision (str)
    args: list[str]  # forward expressions passed to the launcher
    outputs: list[Node]
    description: str


class TemplateKind:
    """One template kind; the defaults fit a kind that every candidate has."""

    name: str  # its kernels are fused_<name>_<k>, its origin tag part is the name
    optional = False  # on only in the candidates that turn it on
    label = ""  # an optional kind turned on, as a candidate's note names it ("column layout")
    label_off = ""  # ... and turned off, where that is worth naming ("vendor GEMM")
    before_plain = False  # its candidate comes before the same candidate without it
    alone = False  # one candidate, after the others: the first one's kinds and this one
    # its claims come before every other kind's: it claims only groups reading what its
    # candidate_state set up (conv_cl's epilogues)
    claims_first = False
    devices: tuple[str, ...] = ("cpu", "cuda")  # where its candidate can be right (TF32: a GPU's)
    stands_in_for = ""  # the vendor call its kernel replaces ("cuDNN's convolution"), named where that stays faster
    rewrite_only = False  # its work is its `rewrite`: it lowers no group, and a candidate's origin tag names it first
    helpers: ClassVar[dict[str, Traversable]] = {}  # the Triton helpers its kernels or launch code may call

    def offered(self, graph: Graph) -> bool:
        """Whether a candidate that turns this optional kind on is worth a partition."""
        return True

    def changes(self, items: list) -> bool:
        """Whether, on this partition, turning it on changes the candidate at all."""
        return True

    def candidate_state(self, low: Lowering) -> Any:
        """Per-candidate state, once before any group is lowered (Lowering.state[kind])."""
        return None

    def rewrite(self, graph: Graph) -> Graph:
        """The graph a candidate with this kind turned on partitions: a kind that recognises a
        pattern of several calls (written-out attention) makes it one call that it seeds."""
        return graph

    def saved_flops(self, graph: Graph) -> float:
        """The FLOPs (as torch's FlopCounterMode counts them) that an exact algebraic rewrite of
        this kind takes off the op's, at the graph's shapes: the op needs that much less work
        (okgit.lower.work, the roofline floor's work). 0 for a kind that computes what the op
        computes, however fused."""
        return 0.0

    def seeds(self, n: Node) -> bool:
        """Whether the PyTorch call n starts a group this kind lowers, n computed in its kernel
        (fusion.partition, with this kind turned on)."""
        return False

    def prologue_input(self, n: Node) -> Node | None:
        """The operand of the call n (one it seeds) that its kernel can compute itself, reading
        it element by element: the elementwise group that makes it becomes the seeded group's
        `prologue` (fusion.partition) instead of a kernel of its own."""
        return None

    def folds(self, seed: Node, r: Node, red: tuple[int, ...]) -> bool:
        """Whether its kernel for the call `seed` folds the reduction r (over domain dims `red`) of
        its epilogue in its own tiles, the rows finished after it (fusion.partition: then r, its
        element count and the rows' own values join the seeded group; kinds/conv.py)."""
        return False

    def claims(self, g: Group, low: Lowering) -> bool:
        raise NotImplementedError

    def domain_source(self, g: Group, d: int) -> str | None:
        """The launcher's expression for domain dim d where no operand of g spans it, if any."""
        return None

    def kernel_name(self, g: Group, k: int) -> str:
        return f"fused_{self.name}_{k}"

    def origin(self, g: Group) -> str:
        """Its part of the candidate's origin tag ("template:vendor_gemm+pointwise")."""
        return self.name

    def extern_origin(self, n: Node, low: Lowering) -> str | None:
        """The origin tag part of a PyTorch call this kind stands beside, if any."""
        return None

    def extern_args(self, low: Lowering, n: Node, args: list[str], kwargs: dict[str, str]) -> None:
        """Change a PyTorch call's arguments in place, as this kind's kernels need them."""

    def what(self, g: Group) -> str:
        raise NotImplementedError

    def describe(self, g: Group) -> str:
        ops = [n.op for n in g.nodes if n.kind in ("op", "reduce")]
        if not ops:  # a copy, or a GEMM, convolution or attention with nothing after it
            return f"{self.what(g)} (no elementwise ops)"
        return f"{self.what(g)} ({len(ops)} ops: {', '.join(dict.fromkeys(ops))})"

    def lower(self, low: Lowering, g: Group, name: str, code: KernelCode, leaves: dict[int, Leaf],
              args: list[str], params: list[str]) -> Rendered:
        """Kernels and launcher `name` for g; `args` (forward expressions) and `params` (kernel
        pointers) hold the leaves' already, a kind appends what else it reads."""
        raise NotImplementedError


class RewriteKind(TemplateKind):
    """A kind whose work is its `rewrite` alone (an algebraic one: linear_sum, affine_sum): optional,
    its candidate before the same one without it, lowering no group (the other kinds lower the
    rewritten graph), named first in the origin tag."""

    optional = True
    before_plain = True
    rewrite_only = True

    def claims(self, g: Group, low: Lowering) -> bool:
        return False


KINDS: Registry[type[TemplateKind]] = Registry("template kind", "okgit.template_kinds")


def template_kind(order: int):
    """Register a TemplateKind class under its `name`; groups go to the first kind that is on and
    claims them, by `order` (optional kinds first: they are alternatives to the others)."""

    def add(cls: type[TemplateKind]) -> type[TemplateKind]:
        KINDS.register(cls.name, order=order)(cls)
        return cls

    return add


def constants(tunables: Mapping[str, int | str]) -> list[str]:
    """Launch settings as the annotated module constants a file holds (annotated so they are not
    taken for shape knobs)."""
    return [f"{k}: {type(v).__name__} = {json.dumps(v)}" for k, v in tunables.items()]


def output_names(g: Group) -> list[str]:
    return [f"out{i}" for i in range(len(g.outputs))]


def first_leaf_device(leaves: dict[int, Leaf]) -> str:
    """The launcher's device: its first operand's."""
    return f"{next(iter(leaves.values())).arg}.device"
