"""The capture refuses a graph whose constants follow the shape knobs, also where the first
other setting it tries is invalid for the op (found on KernelBench level-2 problem 11)."""

from __future__ import annotations

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
        self.norm = nn.GroupNorm(num_groups=num_groups, num_channels=channels)

    def forward(self, x):
        return torch.tanh(self.norm(x))


def get_inputs():
    return [torch.randn(batch_size, channels, 8, 8)]


def get_init_inputs():
    return [channels, num_groups]
'''


def test_a_knob_sized_group_count_is_refused_where_knobs_plus_three_cannot_build() -> None:
    # knobs + 3 give GroupNorm(11, 35): 35 channels do not split into 11 groups, so only the
    # doubled setting (16 groups of 64 channels) shows that the group count follows a knob
    problem = load_problem("op.py", source=GROUP_NORM)
    with pytest.raises(Unsupported, match="depend on the shape knobs"):
        capture(problem)
