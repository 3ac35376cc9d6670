"""Batch norm: torch's batch norm (1D to 3D, training and eval mode, with or without running
statistics and affine parameters) as three Triton kernels (batchnorm.py.tmpl) at the bandwidth
floor of two reads and one write of the input, the elementwise epilogue after it fused.
Optional, before the plain candidate, which keeps PyTorch's call (origin vendor_batch_norm).

Statistics: a channel's N x spatial elements are far too many for one program (L1/33: 16M), so
each channel's are split across programs by rule (about STATS_PROGRAMS programs in all), each
folding its share with one Welford accumulator per lane and writing a partial (mean, squared
deviations, count); a small kernel combines a channel's partials (Chan's formula: the partial
means' deviations from the combined one, never E[x^2] - E[x]^2, so a shifted input loses
nothing), and, in training with running statistics, updates them in place as torch.nn.BatchNorm
does (momentum, the unbiased variance, num_batches_tracked counted), so no PyTorch call stays
beside the kernels and the module's buffers end as the reference leaves them. In eval mode
the running statistics are read and nothing is written but the output. Then one normalise
pass, the epilogue on its tile.

Recognition: an `aten.batch_norm` call on a floating input of 2 to 5 dims; `rewrite` makes it,
with the step of the same module's `num_batches_tracked` (the `add_` the module makes in
training), one call the kind seeds. The module's mode (`self.training`) reaches the launcher at
run time (a call that passes True itself stays True: okgit.lower.capture). A cumulative running average (momentum None) cannot be traced (its factor reads the
counter), so capture refuses it before any kind sees it.
"""

from __future__ import annotations

from okgit.lower.graph import FLOAT, Graph, Node, replaced
from okgit.lower.kernelcode import KernelCode
from okgit.lower.kinds.base import Rendered, TemplateKind, template_kind
from okgit.lower.kinds.window import epilogue_lines
from okgit.lower.template import fill, template
from okgit.lower.translate import BATCH_NORM

TEMPLATE = template(__package__, "batchnorm.py.tmpl")
COUNTER_STEP = "aten.add_.Tensor"
SEEDED = "batch_norm"  # the op of the call `rewrite` makes: batch norm with its counter's step
OPERANDS = ("input", "weight", "bias", "running_mean", "running_var")


@template_kind(order=8)
class BatchNorm(TemplateKind):
    name = "batchnorm"
    optional = True
    label = "Triton batch norm"
    label_off = "vendor batch norm"
    before_plain = True
    stands_in_for = "PyTorch's batch norm"

    def offered(self, graph: Graph) -> bool:
        return any(_takes(n) for n in graph.nodes)

    def rewrite(self, graph: Graph) -> Graph:
        """Each batch norm call made one call (op SEEDED) with the step of its module's
        num_batches_tracked, which it then makes in its kernel."""
        for call in [n for n in graph.nodes if _takes(n)]:
            x, weight, bias, mean_run, var_run, training, momentum, eps = call.args[:8]
            step = _counter_step(graph, mean_run)
            counter = step.args[0] if step is not None else None
            node = Node("extern", SEEDED, (x, weight, bias, mean_run, var_run, counter), call.shape, call.dtype,
                        kwargs={"training": training, "momentum": momentum, "eps": eps})
            graph = replaced(graph, [s for s in (step, call) if s is not None], [node])
        return graph

    def seeds(self, n: Node) -> bool:
        return n.kind == "extern" and n.op == SEEDED

    def claims(self, g, low) -> bool:
        return g.seed is not None and self.seeds(g.seed)

    def domain_source(self, g, d: int) -> str | None:
        return f"xshape[{d}]" if g.shape[d] != 1 else None

    def extern_origin(self, n: Node, low) -> str | None:
        return "vendor_batch_norm" if n.op == BATCH_NORM or _is_counter_step(n) else None

    def what(self, g) -> str:
        return "batch norm: per-channel statistics split across programs, running ones updated in the kernel, then a normalise pass with the epilogue on it"

    def tunables(self, NAME: str) -> dict[str, int]:
        # STATS_PROGRAMS: the statistics' programs in all, each channel's elements split evenly
        # among them, so every program has the same work: many waves of them (about 60 per SM of
        # an H200), so that the last, partly filled wave costs little. Tiles of 2048 elements (16
        # a thread at 4 warps) in both passes. Guesses until bench/batchnorm.py measures them.
        return {f"{NAME}_STATS_PROGRAMS": 8192, f"{NAME}_STATS_TILE": 2048, f"{NAME}_STATS_WARPS": 4,
                f"{NAME}_TILE": 2048, f"{NAME}_BLOCK_W": 1024, f"{NAME}_NUM_WARPS": 4}

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        call = g.seed
        code.seed_value = "normed"
        body = epilogue_lines(code, g, leaves)
        prep, sig, call_args, largs, returns = low.launcher_parts(g, code, leaves, args, params, "x.device")
        src = fill(TEMPLATE, name=name, NAME=name.upper(), params=sig, body="\n".join(body), args=f", {largs}" if largs else "",
                   doc=self.describe(g), prepare="\n".join(prep), call_args=call_args, returns=returns)
        device = f"{low.graph.forward_args[0]}.device"
        forward = [low.pyarg(a, device) for a in call.args]
        forward += [low.pyarg(call.kwargs[k], device) for k in ("training", "momentum", "eps")]
        return Rendered(name, src, self.tunables(name.upper()), forward + args, g.outputs, self.describe(g))


def _takes(n: Node) -> bool:
    """A batch norm call this kind lowers: a floating (N, C, *spatial) input of 2 to 5 dims."""
    if n.kind != "extern" or n.op != BATCH_NORM:
        return False
    x = n.args[0]
    return isinstance(x, Node) and 2 <= len(x.shape) <= 5 and x.dtype in FLOAT and n.dtype in FLOAT


def _is_counter_step(n: Node) -> bool:
    """The module's `num_batches_tracked.add_(1)` in training (its 1 the module's flag, translate's)."""
    counter = n.args[0] if n.args else None
    return (n.kind == "extern" and n.op == COUNTER_STEP and isinstance(counter, Node) and counter.kind == "param"
            and counter.op.endswith("num_batches_tracked"))


def _counter_step(graph: Graph, mean_run) -> Node | None:
    """The step of the counter beside the running mean `mean_run` (one module's buffers)."""
    if not isinstance(mean_run, Node) or mean_run.kind != "param" or not mean_run.op.endswith("running_mean"):
        return None
    owner = mean_run.op[: -len("running_mean")]
    return next((n for n in graph.nodes if _is_counter_step(n) and n.args[0].op == owner + "num_batches_tracked"), None)
