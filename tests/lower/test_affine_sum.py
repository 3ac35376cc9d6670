"""A sum over an affine function of a tensor taken over the tensor first (kinds/affine_sum.py):
offered first, the norm's output never written, right against PyTorch under the interpreter at
the ops' sizes and other knobs; not offered where the function is not affine or its
coefficients vary along every summed dim."""

from __future__ import annotations

import pytest
from test_templates import ctx_for, op, rewrites_right

from okgit.lower.capture import capture
from okgit.lower.fusion import Group, partition
from okgit.lower.kinds.affine_sum import AffineSum
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan, reshaped

OPS = {
    # as L2/23: a group norm (3 channels a group), then a mean over every dim but the batch
    "group_norm_mean": ("""
class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
        self.norm.weight.data.uniform_(0.5, 1.5)
        self.norm.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(x).mean(dim=[1, 2, 3])

batch_size = 3
channels = 6
groups = 2
height = 5
width = 7

def get_inputs():
    return [torch.randn(batch_size, channels, height, width) + 0.3]

def get_init_inputs():
    return [channels, groups]
""", {"batch_size": 4, "height": 9}),
    # as L2/27 without its hardswish: a group norm, then a mean over the positions alone: the
    # kept channels are the norm's groups and their channels, the result back through its reshape
    "group_norm_spatial_mean": ("""
class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
        self.norm.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        return self.norm(x).mean(dim=[2, 3])

batch_size = 3
channels = 6
groups = 3
height = 5
width = 7

def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]

def get_init_inputs():
    return [channels, groups]
""", {"batch_size": 2, "width": 11}),
    # a tensor centred on its mean, scaled by a constructor's float (bound to the module's
    # attribute, not baked), a number added, summed over the middle dim
    "attribute_scaled_sum": ("""
class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return ((x - x.mean(dim=1, keepdim=True)) * self.alpha + 1.0).sum(dim=1)

n = 4
m = 24

def get_inputs():
    return [torch.randn(n, m, 3)]

def get_init_inputs():
    return [0.7]
""", {"m": 13}),
    # a plain sum, no mean: a row shifted by its max, scaled per row (a subtraction from a
    # constant and a negation on the way), summed over the last dim, keepdim
    "scaled_row_sum": ("""
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(n, 1) + 0.5)

    def forward(self, x):
        return (1.5 - (-(x - x.amax(dim=-1, keepdim=True))) * self.scale).sum(dim=-1, keepdim=True)

n = 6
m = 40

def get_inputs():
    return [torch.randn(n, m)]

def get_init_inputs():
    return [n]
""", {"m": 17}),
}


def test_the_sum_is_taken_over_the_tensor_first_and_its_candidate_comes_first(tmp_path):
    path = op(tmp_path, "group_norm_mean", OPS["group_norm_mean"][0])
    graph = reshaped(capture(load_problem(path)), (AffineSum(),))
    groups = [it for it in partition(graph) if isinstance(it, Group)]
    # the norm's statistics per (sample, group), the sums over the positions per (sample,
    # channel), the mean over the channels: the norm's output is never written
    assert [g.red for g in groups] == [(2, 3, 4), (3, 4), (1, 2)]
    assert [[o.op for o in g.outputs] for g in groups] == [["div", "rsqrt"], ["sub"], ["view"]]
    assert [g.outputs[0].shape for g in groups[1:]] == [(3, 2, 3, 1, 1), (3,)]
    origins = [p.origin for p in plan(ctx_for(path))]
    assert origins[0].startswith("template:affine_sum+") and not origins[-1].startswith("template:affine_sum")


@pytest.mark.parametrize("forward", [
    "return torch.clamp(self.norm(x), -1.0, 1.0).mean(dim=[1, 2, 3])",  # not affine in x
    "return (self.norm(x) * x).sum(dim=[1, 2, 3])",  # a coefficient varying along every summed dim
    "return self.norm(torch.relu(x)).mean(dim=[1, 2, 3])",  # x computed elementwise: written out for both sums
    "return (x * self.norm.weight[0] + 1.0).mean(dim=[1, 2, 3])",  # no reduction's pass to save
    "y = self.norm(x)\n        return y.mean(dim=[1, 2, 3]), y",  # the norm's output returned too
])
def test_not_offered_where_the_sum_needs_each_element(tmp_path, forward):
    source = OPS["group_norm_mean"][0].replace("return self.norm(x).mean(dim=[1, 2, 3])", forward)
    path = op(tmp_path, "other", source)
    assert not AffineSum().offered(capture(load_problem(path)))


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_the_candidates_match_pytorch_under_the_interpreter(tmp_path):
    """At the ops' sizes and at other knobs (the inner counts follow the sizes)."""
    rewrites_right(tmp_path, OPS, "affine_sum")
