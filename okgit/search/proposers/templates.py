"""The offline proposer: the reference captured, cut into fusion groups and rendered by the
template kinds of okgit.lower.kinds into complete op files, one candidate per set of
optional kinds worth trying.

What the groups leave (convolutions, vendor GEMMs, unknown ops) stays a PyTorch call in the
rewritten forward. Each group's launch configuration is a set of module constants
(`FUSED_ROWS_0_TILE`, ...), annotated so they are not mistaken for shape knobs; the autotune
proposer varies them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from okgit.lower.capture import capture
from okgit.lower.fusion import partition
from okgit.lower.graph import Graph, Node, Unsupported
from okgit.lower.kinds import kinds
from okgit.lower.kinds.base import Rendered, TemplateKind
from okgit.lower.opfile import FileLowering, lowered_file, public_name
from okgit.lower.reshaping import moved
from okgit.problem import Problem
from okgit.search.types import Context, Proposal, propose_several


def candidates(graph: Graph, device: str) -> list[tuple[TemplateKind, ...]]:
    """The optional kinds each candidate turns on, best expected first.

    Over the kinds the graph offers, in the kinds' order: every candidate so far, with and without
    the kind, the one with it first where the kind is `before_plain` (the column layout before
    the row layout; the split-precision Triton GEMM before the vendor one). A kind `alone` (okgit's
    convolutions, channels-last ones) gets one candidate, after the others (`made` adds the first
    candidate's kinds to it). A kind whose candidate cannot be
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
        self._planning: _Planning | None = None

    def ahead(self, problem: Problem, device: str) -> None:
        """The candidates planned in a thread while the reference is prepared: capture and
        rendering need only the op and the device, and are CPU work (with torch.export's imports,
        2-2.7 s in a fresh process on a 2-core CPU; 6-7 s on an H100's host beside a seed's
        compile) that would otherwise stand between the reference and the first candidate."""
        if self._source != problem.source:
            self._source, self._queue = problem.source, None
            self._planning = _Planning(problem, device)

    def begin(self, ctx: Context) -> None:
        """Planning begun where the run did not begin it ahead (a search driven on its own)."""
        self.ahead(ctx.problem, ctx.device)

    def propose(self, ctx: Context) -> Proposal | None:
        self.ahead(ctx.problem, ctx.device)
        if self._planning is not None:
            self._queue, self._planning = self._planning.result(ctx), None
        return self._queue.pop(0) if self._queue else None

    def propose_batch(self, ctx: Context, limit: int) -> list[Proposal]:
        """The next `limit` template candidates at once: none depends on how another fared."""
        return propose_several(self, ctx, limit)


class _Planning:
    """`plan` in a thread of its own; its notes are held until the search takes the result, so the
    journal is written by the search's thread alone."""

    def __init__(self, problem: Problem, device: str) -> None:
        self._notes: list[str] = []
        self._out: list[Proposal] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(problem, device), name="okgit-templates", daemon=True)
        self._thread.start()

    def _run(self, problem: Problem, device: str) -> None:
        try:
            self._out = planned(problem, device, self._notes.append)
        except BaseException as e:  # noqa: BLE001 - raised again in the search's thread, where it would have been
            self._error = e

    def result(self, ctx: Context) -> list[Proposal]:
        self._thread.join()
        for message in self._notes:
            ctx.log("note", message=message)
        if self._error is not None:
            raise self._error
        return self._out


def plan(ctx: Context) -> list[Proposal]:
    """Every template candidate for the reference, best expected first, planned here and now."""
    return planned(ctx.problem, ctx.device, lambda message: ctx.log("note", message=message))


@dataclass
class Made:
    """One candidate rendered: the optional kinds it turns on, its partition, its op file."""

    turned_on: tuple[TemplateKind, ...]
    items: list
    source: str
    low: FileLowering


def made(graph: Graph, source: str, device: str) -> Iterator[Made | tuple[tuple[TemplateKind, ...], Unsupported]]:
    """Each candidate of `candidates`, rendered from the reference's `source`, or the kinds it
    turns on with why it could not be made; one the same as a candidate without one of its kinds
    is left out. An `alone` kind's candidate turns on the first made candidate's kinds too, so a
    convolution of okgit's own comes with okgit's pooling or batch norm after it, not PyTorch's;
    where it cannot (channels-last convolutions under okgit's pooling, which reads the
    convolution's output itself), it comes alone."""
    first: tuple[TemplateKind, ...] | None = None
    for turned_on in candidates(graph, device):
        alone = len(turned_on) == 1 and turned_on[0].alone
        error: Unsupported | None = None
        for kinds_on in [first + turned_on, turned_on] if alone and first else [turned_on]:
            try:
                m = _make(graph, source, kinds_on)
            except Unsupported as e:
                error = e  # the last try's reason: the kind's own where it came alone
                continue
            if m is not None:
                first = m.turned_on if first is None and not alone else first
                yield m
                break
        else:
            if error is not None:
                yield turned_on, error


def reshaped(graph: Graph, turned_on: tuple[TemplateKind, ...]) -> Graph:
    """The graph a candidate turning `turned_on` on partitions: each kind's rewrite (a pattern
    made one call the kind seeds), then the reshapes moved across the elementwise ops beside them
    (okgit.lower.reshaping: fewer groups, fewer tensors written)."""
    for kind in turned_on:
        graph = kind.rewrite(graph)
    return moved(graph)


def _make(graph: Graph, source: str, turned_on: tuple[TemplateKind, ...]) -> Made | None:
    """The candidate that turns `turned_on` on; None where one of them changes nothing."""
    shaped = reshaped(graph, turned_on)
    items = partition(shaped, seeding=turned_on)
    if not all(k.changes(items) for k in turned_on):
        return None
    text, low = lowered_file(source, shaped, items, turned_on)
    return Made(turned_on, items, text, low)


def planned(problem: Problem, device: str, note: Callable[[str], None]) -> list[Proposal]:
    """`plan`'s candidates for the reference on `device`; `note` gets what the journal should say
    of a candidate that could not be made."""
    try:
        graph = capture(problem)
    except Unsupported as e:
        note(f"templates: {e}")
        return []
    out: list[Proposal] = []
    for m in made(graph, problem.source, device):
        if not isinstance(m, Made):
            what = label(graph, m[0])
            note(f"templates{f' ({what})' if what else ''}: {m[1]}")
            continue
        out.append(Proposal(
            source=m.source,
            origin=m.low.origin(),
            intent=_intent(m.low.rendered, m.items),
            parent=None,
            meta={"kernels": [r.name for r in m.low.rendered], "tunables": {k: v for r in m.low.rendered for k, v in r.tunables.items()}},
            screen=True,  # alternatives of one computation: after the first, each is worth a check only if faster
        ))
    return out
