"""Capture a reference op's computation as a small graph the kernel templates can lower.

The reference is traced with torch.export on the meta device (okgit.lower.trace) into a
graph of primitives (okgit.lower.graph); then `okgit.lower.fusion.partition` cuts the graph
into fusion groups.

The graph is captured with the shape knobs at their defaults and at two other settings: a scalar
that differs between them (`x / math.sqrt(dim)`, a view to a knob-sized shape) depends on
a knob, and a lowering that baked it would be wrong at other sizes, so capture refuses, unless
it is an int the model keeps as an attribute (GroupNorm's `num_groups`): the rewritten forward
reads that one from `self` (okgit.lower.binding.bind_ints). The
constants that come from the module's float attributes are bound to expressions of `self`
(okgit.lower.binding), and the constructor's floats scaled as the evaluator does must move
no constant in any other way.

The reference is traced in training mode, where translate takes batch norm's `training` for the
module's flag; a call that passes True itself (a functional batch norm on buffers, always
updating them) is told apart by a second trace in eval mode, where its flag stays True: that
one is a constant (`_constant_modes`).
"""

from __future__ import annotations

from okgit.lower.binding import apply_bindings, bind_attributes, bind_ints, check_scaled_init
from okgit.lower.graph import Graph, ModeFlag, Unsupported
from okgit.lower.trace import trace
from okgit.lower.translate import BATCH_NORM
from okgit.problem import Problem


def capture(problem: Problem) -> Graph:
    """The reference's graph at its default knobs, its attribute constants bound, checked
    against a second knob setting and against scaled constructor floats."""
    graph = _constant_modes(problem, trace(problem.source, {}))
    bindings = bind_attributes(problem.source, graph)
    # two other settings: +3 finds constants that follow a knob, doubling keeps the divisibility a
    # setting like GroupNorm(num_groups, channels) needs where +3 breaks it (131 channels, 11 groups)
    for changed in ({k: v + 3 for k, v in problem.knobs.items() if v >= 8},
                    {k: 2 * v for k, v in problem.knobs.items() if v >= 8}):
        if not changed:
            continue
        try:
            other = trace(problem.source, changed)
        except Exception:  # noqa: BLE001 - this setting may be invalid for the op
            continue
        apply_bindings(other, bindings)
        if not _same(graph, other) and not (bind_ints(problem.source, graph, other, changed) and _same(graph, other)):
            raise Unsupported("the computation's constants depend on the shape knobs")
    check_scaled_init(problem.source, graph)
    return graph


def _constant_modes(problem: Problem, graph: Graph) -> Graph:
    """The graph with each batch norm's `training` that is True in eval mode too made the constant
    True again (translate made every True on running statistics the module's flag)."""
    calls = [n for n in graph.nodes if n.kind == "extern" and n.op == BATCH_NORM and isinstance(n.args[5], ModeFlag)]
    if not calls:
        return graph
    evaled = [n for n in trace(problem.source, {}, tweak=lambda model: model.eval()).nodes
              if n.kind == "extern" and n.op == BATCH_NORM]
    if len(evaled) != len(calls):
        raise Unsupported("the reference calls batch norm differently in eval mode")
    for n, e in zip(calls, evaled):
        if e.args[5] is not False:  # True in eval mode: not the module's flag
            n.args = (*n.args[:5], True, *n.args[6:])
    return graph


def _same(graph: Graph, other: Graph) -> bool:
    return [n.signature() for n in graph.nodes] == [n.signature() for n in other.nodes]
