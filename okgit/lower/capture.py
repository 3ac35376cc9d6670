"""Capture a reference op's computation as a small graph the kernel templates can lower.

The reference is traced with torch.export on the meta device (okgit.lower.trace) into a
graph of primitives (okgit.lower.graph); then `okgit.lower.fusion.partition` cuts the graph
into fusion groups.

The graph is captured twice, with the shape knobs at their defaults and changed: a scalar
that differs between the two (`x / math.sqrt(dim)`, a view to a knob-sized shape) depends on
a knob, and a lowering that baked it would be wrong at other sizes, so capture refuses. The
constants that come from the module's float attributes are bound to expressions of `self`
(okgit.lower.binding), and the constructor's floats scaled as the evaluator does must move
no constant in any other way.
"""

from __future__ import annotations

from okgit.lower.binding import apply_bindings, bind_attributes, check_scaled_init
from okgit.lower.graph import Graph, Unsupported
from okgit.lower.trace import trace
from okgit.problem import Problem


def capture(problem: Problem) -> Graph:
    """The reference's graph at its default knobs, its attribute constants bound, checked
    against a second knob setting and against scaled constructor floats."""
    graph = trace(problem.source, {})
    bindings = bind_attributes(problem.source, graph)
    changed = {k: v + 3 for k, v in problem.knobs.items() if v >= 8}
    if changed:
        try:
            other = trace(problem.source, changed)
        except Exception:  # noqa: BLE001 - the second setting may be invalid for this op
            other = None
        if other is not None:
            apply_bindings(other, bindings)
            if [n.signature() for n in graph.nodes] != [n.signature() for n in other.nodes]:
                raise Unsupported("the computation's constants depend on the shape knobs")
    check_scaled_init(problem.source, graph)
    return graph
