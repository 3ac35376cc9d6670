"""The work an op needs: the fewest FLOPs of the exact rewrites okgit knows (the roofline floor's).

torch's FlopCounterMode counts the FLOPs of the reference as written. An exact algebraic rewrite
can need far fewer: a sum over a linear's output features is x . sum_j W_j + sum_j b_j, with no
GEMM left (kinds/linear_sum.py; KernelBench L2/51: 2.75e11 FLOPs become 1.0e8). The roofline
gate rejects a time below the work the op needs as work skipped, so its floor takes the fewest:
otherwise a correct kernel of such a rewrite is rejected as a cheat (L2/51's ran 170 us on an
H100 against a floor of 1061 us from the counted FLOPs). The fewest is a property of the op,
found from the reference alone (its graph, okgit.lower.trace), the same for every candidate
whoever wrote it; the floor's bytes term (every input and parameter read once, every output
written once) is unchanged. The judge reads it through okgit.problem.least_work, whose registry
of work models names this module as its built-in: the evaluator never imports the lowering.
"""

from __future__ import annotations

from okgit.lower.graph import Unsupported
from okgit.lower.kinds import kinds
from okgit.lower.trace import trace
from okgit.problem import WORK_MODELS


@WORK_MODELS.register("rewrites")
def rewrites_work(source: str, knobs: dict[str, int], counted: float) -> tuple[float, list[str]]:
    """The fewest FLOPs the op at these knobs needs by the kinds' exact rewrites, from the
    `counted` ones (FlopCounterMode's on the reference), and the kinds whose rewrites save them.
    An op okgit cannot trace keeps its counted FLOPs: the stricter floor."""
    if counted <= 0:
        return counted, []
    try:
        graph = trace(source, knobs)
    except Unsupported:
        return counted, []
    saved = {kind.name: kind.saved_flops(graph) for kind in kinds()}
    rewrites = [name for name, flops in saved.items() if flops > 0]
    return max(counted - sum(saved[name] for name in rewrites), 0.0), rewrites
