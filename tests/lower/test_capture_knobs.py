"""The capture refuses a graph whose constants follow the shape knobs, also where the first
other setting it tries is invalid for the op (found on KernelBench level-2 problem 11)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from okgit.lower.capture import capture
from okgit.lower.graph import Unsupported
from okgit.problem import load_problem

GROUP_NORM = '''import torch
import torch.nn as nn

batch_size = 16
channels = 32
num_groups = 8


class Model(nn.Module):
    def __init__(self, channels, num_groups):
        super().__init__()

    def forward(self, x):
        return torch.tanh(torch.nn.functional.group_norm(x, num_groups))


def get_inputs():
    return [torch.randn(batch_size, channels, 8, 8)]


def get_init_inputs():
    return [channels, num_groups]
'''


def test_a_knob_sized_group_count_is_refused_where_knobs_plus_three_cannot_build() -> None:
    # knobs + 3 give 11 groups of 35 channels, which do not split, so only the doubled setting
    # (16 groups of 64 channels) shows that the group count follows a knob; no attribute of the
    # model holds it (an nn.GroupNorm's would be read from it: tests/lower/test_norms.py)
    problem = load_problem("op.py", source=GROUP_NORM)
    with pytest.raises(Unsupported, match="depend on the shape knobs"):
        capture(problem)


# as L2/79: a parameter's shape is a module-level constant, so with the channel knob changed
# the forward cannot broadcast it and that trace fails (the capture goes on without it)
FIXED_SHAPE = '''import torch
import torch.nn as nn

batch_size = 4
channels = 16
scale_shape = (16, 1, 1)


class Model(nn.Module):
    def __init__(self, channels, scale_shape):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(scale_shape))

    def forward(self, x):
        return torch.relu(x * self.scale)


def get_inputs():
    return [torch.randn(batch_size, channels, 8, 8)]


def get_init_inputs():
    return [channels, scale_shape]
'''
CAPTURE = """
import sys
from okgit.lower.capture import capture
from okgit.problem import load_problem
capture(load_problem("op.py", source=sys.stdin.read()))
print("CAPTURED")
"""


def test_a_trace_that_fails_at_other_knobs_prints_no_traceback() -> None:
    """torch's fake tensors log a failing op's traceback at ERROR level; the capture answers the
    failure itself, so nothing of it reaches the user's terminal."""
    proc = subprocess.run([sys.executable, "-c", CAPTURE], input=FIXED_SHAPE, capture_output=True, text=True,
                          timeout=300, check=False)
    assert "CAPTURED" in proc.stdout, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "failed while attempting to run meta" not in proc.stderr, proc.stderr[-2000:]
