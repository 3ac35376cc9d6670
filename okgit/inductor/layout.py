"""The layout of the seed's convolutions: the one Inductor chooses at the op's own sizes.

Inductor runs a graph's 2D convolutions channels-last (input and weight copied so, cuDNN there)
where its heuristics say it pays (`GraphLowering.decide_layout_opt`), but never where a
convolution's input or weight has a free size ("See perf regression with dynamic shape",
pytorch#102670). So the dynamic seed of a plain convolution ran NCHW where torch.compile at the
op's own sizes ran channels-last: on the H200 a 3x3 convolution with bias and ReLU (32 x 64 x 64
x 64, 128 out) took 176.8 us in the seed against torch.compile's 127.8. Here the decision is taken
again on the same graph with every size at the value it was traced at, and where that says
channels-last the dynamic compile is given it; elsewhere Inductor's own decision stands.
Inductor's `force_layout_optimization` would not do: it skips the heuristics that leave grouped
and small-channel convolutions NCHW for measured reasons.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def as_at_own_sizes(torch: Any, notes: dict[int, str], force: bool = True) -> Iterator[None]:
    """Inductor's layout decision, for each graph compiled inside, taken at the sizes it was traced
    at where that turns channels-last on (`force`; else Inductor's own, for comparison). For each
    graph module with a convolution, `notes[id(gm)]` says the layout it runs and why. Where this
    torch has no such decision to wrap, Inductor's own stands and nothing is noted."""
    from torch._inductor.graph import GraphLowering

    wrapped = GraphLowering.__dict__.get("decide_layout_opt")
    if not isinstance(wrapped, staticmethod):
        yield
        return
    decide = wrapped.__func__

    def decision(gm: Any, *, is_inference: bool) -> bool:
        own = decide(gm, is_inference=is_inference)
        if not any(n.target is torch.ops.aten.convolution.default for n in gm.graph.nodes):
            return bool(own)
        with _sizes_as_traced(torch, gm) as changed:
            static = decide(gm, is_inference=is_inference) if changed else own
        notes[id(gm)] = _note(bool(own), bool(static), force)
        return bool(own or (static and force))

    GraphLowering.decide_layout_opt = staticmethod(decision)  # type: ignore[method-assign]
    try:
        yield
    finally:
        GraphLowering.decide_layout_opt = wrapped  # type: ignore[method-assign]


def _note(own: bool, static: bool, force: bool) -> str:
    if own:
        return "convolutions channels-last (Inductor's choice)"
    if static and force:
        return ("convolutions channels-last (Inductor's choice at the op's own sizes; "
                "it turns the layout optimisation off for dynamic sizes)")
    if static:
        return "convolutions NCHW (Inductor's dynamic compile; at the op's own sizes it would run them channels-last)"
    return "convolutions NCHW (Inductor's choice at the op's own sizes too)"


@contextlib.contextmanager
def _sizes_as_traced(torch: Any, gm: Any) -> Iterator[bool]:
    """The graph's tensor values (`meta["val"]`, what the decision reads) replaced for the time
    being by fake tensors of the sizes and strides they were traced at (the symbols' hints), in the
    same fake mode, dtype and device; yields whether any was."""
    from torch.fx.experimental.symbolic_shapes import has_free_symbols

    saved = {}
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not has_free_symbols(val):
            continue
        sizes, strides = _hints(torch, val.shape), _hints(torch, val.stride())
        mode = getattr(val, "fake_mode", None)
        if sizes is None or strides is None or mode is None:
            continue  # a size without a value to take (data-dependent): left as traced
        with mode:
            node.meta["val"] = torch.empty_strided(sizes, strides, dtype=val.dtype, device=val.device)
        saved[node] = val
    try:
        yield bool(saved)
    finally:
        for node, val in saved.items():
            node.meta["val"] = val


def _hints(torch: Any, sizes: Any) -> list[int] | None:
    out = []
    for s in sizes:
        if isinstance(s, torch.SymInt):
            hint = getattr(s.node, "hint", None)
            if hint is None:
                return None
            s = hint
        out.append(int(s))
    return out
