"""Reshapes moved across the elementwise ops beside them (okgit.lower.reshaping): a group norm's
split raised above the activation before it, its merge lowered below the clamp after it, so both
run in the norm's rows kernel; what must stay apart stays apart. The candidates' values under the
interpreter: test_norms (its group norm op has an activation before and a clamp after)."""

from __future__ import annotations

from test_templates import op

from okgit.lower.capture import capture
from okgit.lower.fusion import Group, partition
from okgit.lower.graph import reshapes
from okgit.lower.reshaping import moved
from okgit.problem import load_problem

SOURCE = """
class Model(nn.Module):
    def __init__(self, channels, num_groups):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)
        self.scale = nn.Parameter(torch.rand(channels, 1, 1))

    def forward(self, x):
        return {body}

batch = 2
num_groups = 4
channels = 8
size = 6

def get_inputs():
    return [torch.randn(batch, channels, size, size)]

def get_init_inputs():
    return [channels, num_groups]
"""


def groups_of(tmp_path, name: str, body: str):
    graph = capture(load_problem(op(tmp_path, name, SOURCE.format(body=body))))
    shaped = moved(graph)
    return graph, shaped, [it for it in partition(shaped) if isinstance(it, Group)]


def test_the_activation_before_and_the_clamp_after_run_in_the_norms_kernel(tmp_path):
    graph, shaped, groups = groups_of(tmp_path, "gelu_norm_clamp",
                                      "torch.clamp(self.norm(torch.nn.functional.gelu(x)), 0.0, 1.0)")
    (norm,) = groups  # one kernel; before: the activation's, the norm's and the clamp's
    assert len([it for it in partition(graph) if isinstance(it, Group)]) == 3
    ops = {n.op for n in norm.nodes}
    assert {"erf", "maximum", "minimum"} <= ops and norm.red
    (x,) = [leaf for leaf in norm.leaves if leaf.args and leaf.args[0].kind == "input"]
    assert reshapes(x) and x.shape == (2, 4, 2, 6, 6)  # the input read once, split into groups
    (out,) = shaped.outputs  # the norm's output merged back in the forward, from memory
    assert reshapes(out) and out.args[0] is norm.outputs[0] and out.shape == (2, 8, 6, 6)


def test_an_activation_the_op_also_returns_or_a_tensor_of_another_shape_keeps_its_kernel(tmp_path):
    _, _, groups = groups_of(tmp_path, "returned", "(torch.relu(x), self.norm(torch.relu(x)))")
    assert len(groups) == 2  # the activation is written anyway: the norm reads it
    _, _, groups = groups_of(tmp_path, "per_channel", "self.norm(x * self.scale)")
    assert len(groups) == 2  # a channel's scale has no shape the split makes of the input's
    _, _, groups = groups_of(tmp_path, "added_after", "self.norm(x) + x")
    assert len(groups) == 2  # the sum reads the unsplit input beside the merged norm
