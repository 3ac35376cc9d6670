"""The offline proposer: the reference captured, cut into fusion groups and rendered by the
template kinds of okgit.lower.kinds into complete op files, one candidate per set of
optional kinds worth trying.

What the groups leave (convolutions, vendor GEMMs, unknown ops) stays a PyTorch call in the
rewritten forward. Each group's launch configuration is a set of module constants
(`FUSED_ROWS_0_TILE`, ...), annotated so they are not mistaken for shape knobs; the autotune
proposer varies them.
"""

from __future__ import annotations

from okgit.lower.capture import capture
from okgit.lower.fusion import partition
from okgit.lower.graph import Graph, Node, Unsupported
from okgit.lower.kinds import kinds
from okgit.lower.kinds.base import Rendered, TemplateKind
from okgit.lower.opfile import lowered_file, public_name
from okgit.search.types import Context, Proposal, propose_several


def candidates(graph: Graph, device: str) -> list[tuple[TemplateKind, ...]]:
    """The optional kinds each candidate turns on, best expected first.

    Over the kinds the graph offers, in the kinds' order: every candidate so far, with and without
    the kind, the one with it first where the kind is `before_plain` (the column layout before
    the row layout; the split-precision Triton GEMM before the vendor one). A kind `alone` (channels-last
    convolutions) gets one candidate of its own, after the others. A kind whose candidate cannot be
    right on `device` (a TF32 convolution on a CPU, whose reference never runs in TF32) gets none;
    `device` is named as the evaluator names it ("cuda:0"), the kinds by type ("cuda")."""
    combos: list[tuple[TemplateKind, ...]] = [()]
    device_type = device.split(":")[0]
    offered = [k for k in kinds() if k.optional and device_type in k.devices and k.offered(graph)]
    for kind in (k for k in offered if not k.alone):
        combos = [c for plain in combos for c in ((plain + (kind,), plain) if kind.before_plain else (plain, plain + (kind,)))]
    return combos + [(k,) for k in offered if k.alone]


def label(graph: Graph, turned_on: tuple[TemplateKind, ...]) -> str:
    """A candidate in a note: its optional kinds, and those off that the graph offers where
    their absence says something ("vendor GEMM, column layout")."""
    named = [k.label if k in turned_on else k.label_off for k in kinds() if k.optional and (k in turned_on or k.offered(graph))]
    return ", ".join(n for n in named if n)


def _intent(rendered: list[Rendered], items: list) -> str:
    kept = sorted({public_name(it) for it in items if isinstance(it, Node) and it.op != "getitem"})
    fused = "; ".join(r.description for r in rendered)
    return f"Fuse into Triton: {fused}" + (f"; keep {', '.join(kept)} in PyTorch." if kept else ".")


class TemplatesProposer:
    """Recognises the reference's computation and proposes fused Triton rewrites of it.

    With a matmul in the graph there are two candidates: a split-precision Triton GEMM on tensor
    cores with the epilogue on its accumulator first (at fp32 accuracy, faster than cuBLAS's
    strict fp32 on the CUDA cores), then the vendor GEMM plus one fused epilogue kernel. A reduction over dims that are not the innermost
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

    def propose_batch(self, ctx: Context, limit: int) -> list[Proposal]:
        """The next `limit` template candidates at once: none depends on how another fared."""
        return propose_several(self, ctx, limit)


def plan(ctx: Context) -> list[Proposal]:
    """Every template candidate for the reference, best expected first."""
    try:
        graph = capture(ctx.problem)
    except Unsupported as e:
        ctx.log("note", message=f"templates: {e}")
        return []
    out: list[Proposal] = []
    for turned_on in candidates(graph, ctx.device):
        try:
            shaped = graph
            for kind in turned_on:
                shaped = kind.rewrite(shaped)
            items = partition(shaped, seeding=turned_on)
            if not all(k.changes(items) for k in turned_on):
                continue  # the candidate without that kind is the same file
            source, low = lowered_file(ctx.problem.source, shaped, items, turned_on)
        except Unsupported as e:
            what = label(graph, turned_on)
            ctx.log("note", message=f"templates{f' ({what})' if what else ''}: {e}")
            continue
        out.append(Proposal(
            source=source,
            origin=low.origin(),
            intent=_intent(low.rendered, items),
            parent=None,
            meta={"kernels": [r.name for r in low.rendered], "tunables": {k: v for r in low.rendered for k, v in r.tunables.items()}},
        ))
    return out
