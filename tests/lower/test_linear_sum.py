"""A sum over a linear's output features folded into its weight (kinds/linear_sum.py): offered
first, no GEMM left, the mean's count the weight's feature count at every size, right against
PyTorch under the interpreter; not offered where the GEMM's outputs are needed anyway."""

from __future__ import annotations

import pytest
import torch
from test_templates import HEADER, ctx_for, op, rewrites_right

from okgit.eval.types import Reference, Status
from okgit.lower.capture import capture
from okgit.lower.fusion import Group, partition
from okgit.lower.kinds.linear_sum import LinearSum
from okgit.problem import least_work, load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

OPS = {
    # as L2/51: a linear, a per-feature subtraction, a mean over the features, then per row
    # logsumexp, GELU and a residual add; more features out than in, so a count of the inputs is wrong
    "mean_after_linear": ("""
class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        y = torch.mean(self.gemm(x) - self.subtract, dim=1, keepdim=True)
        return F.gelu(torch.logsumexp(y, dim=1, keepdim=True)) + x

batch_size = 6
in_features = 24
out_features = 40

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
""", {"in_features": 33, "out_features": 17}),
    # a matmul's row sums, a number subtracted before the sum and a per-row value added (both
    # constant along the features), no keepdim, a batch of matrices
    "sum_after_matmul": ("""
class Model(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.b = nn.Parameter(torch.randn(k, n))

    def forward(self, x):
        return (2.5 - (x @ self.b + x[..., :1])).sum(dim=-1)

k = 20
n = 12

def get_inputs():
    return [torch.randn(3, 5, k)]

def get_init_inputs():
    return [k, n]
""", {"k": 9, "n": 31}),
}


def test_the_sum_is_folded_into_the_weight_and_its_candidate_comes_first(tmp_path):
    path = op(tmp_path, "mean_after_linear", OPS["mean_after_linear"][0])
    graph = LinearSum().rewrite(capture(load_problem(path)))
    assert not [n for n in graph.nodes if n.kind == "extern"]  # no GEMM
    groups = [it for it in partition(graph) if isinstance(it, Group)]
    # the bias's and the subtracted vector's sums, the weight's column sums, one kernel over x's rows
    assert len(groups) == 3 and groups[-1].outputs[0] is graph.outputs[0]
    origins = [p.origin for p in plan(ctx_for(path))]
    assert origins[0].startswith("template:linear_sum+") and any("gemm" in o for o in origins[1:])


@pytest.mark.parametrize("forward", [
    "y = self.gemm(x)\n        return y.mean(dim=1), y",  # the GEMM's output is returned too
    "return self.gemm(x).mean(dim=0)",  # a sum over the batch, not the features
    "return (self.gemm(x) * 2.0).sum(dim=1)",  # a product on the way (not folded; the sum would be)
])
def test_no_fold_where_the_outputs_are_needed_or_the_sum_is_not_over_the_features(tmp_path, forward):
    path = op(tmp_path, "other", f"""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(8, 6)

    def forward(self, x):
        {forward}

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return []
""")
    assert not LinearSum().offered(capture(load_problem(path)))


def test_the_op_needs_only_the_folds_work_where_a_sum_folds():
    """The roofline floor's FLOPs (okgit.lower.work): the fold's where a sum folds, torch's count
    where nothing does or the op cannot be traced."""
    source = OPS["mean_after_linear"][0]
    m, k, n = 6, 24, 40
    gemm = 2.0 * m * n * k  # FlopCounterMode's count of the linear
    assert least_work(HEADER + source, {}, gemm) == (n * k + 2.0 * m * k, ["linear_sum"])
    assert least_work(HEADER + source, {"in_features": 33, "out_features": 17}, 2.0 * m * 17 * 33)[0] == 17 * 33 + 2.0 * m * 33
    needed = source.replace("y = torch.mean(self.gemm(x) - self.subtract, dim=1, keepdim=True)",
                            "y = self.gemm(x)").replace("F.gelu(torch.logsumexp(y, dim=1, keepdim=True)) + x", "y")
    assert least_work(HEADER + needed, {}, gemm) == (gemm, [])  # the GEMM's outputs are the op's
    assert least_work(HEADER + source.replace("def get_inputs", "def get_inputs_gone"), {}, gemm) == (gemm, [])


@pytest.mark.slow  # the real evaluator prepares the reference
def test_the_judges_floor_counts_the_folds_work(evaluator, tmp_path):
    path = op(tmp_path, "mean_after_linear", OPS["mean_after_linear"][0])
    prep = evaluator.prepared(load_problem(path))
    main = prep.shapes[0]
    m, k, n = main["batch_size"], main["in_features"], main["out_features"]
    assert prep.cost["counted_flops"] == 2.0 * m * n * k
    assert (prep.cost["flops"], prep.cost["rewrites"]) == (n * k + 2.0 * m * k, ["linear_sum"])


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_the_folded_candidates_match_pytorch_under_the_interpreter(tmp_path):
    """At the ops' sizes and at other knobs (the count follows the weight's features)."""
    rewrites_right(tmp_path, OPS, "linear_sum")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_folded_sum_passes_the_precision_rule_and_is_timed(tmp_path, gpu_evaluator):
    """As L2/51 at a quarter of its size: judged on the GPU, where the reference's GEMM runs in
    strict fp32 (PyTorch's flags): the folded sums add in another order, within the rule."""
    source = OPS["mean_after_linear"][0].replace("batch_size = 6", "batch_size = 1024").replace(
        "in_features = 24", "in_features = 4096").replace("out_features = 40", "out_features = 4096")
    path = op(tmp_path, "mean_after_linear_gpu", source)
    problem = load_problem(path)
    ctx = Context(problem=problem, reference=Reference(device="cuda", timed=True), backend="triton", device="cuda")
    folded = next(p.source for p in plan(ctx) if p.origin.startswith("template:linear_sum+"))
    result = gpu_evaluator.evaluate(problem, folded)
    assert result.status is Status.correct, result.error
    assert result.timed and result.speedup and result.speedup > 1.0, result
