"""The op-file contract's constructor-float perturbation: one function for the evaluator's
init_inputs case and the lowering's binding check."""

from __future__ import annotations

import numpy as np

from okgit.eval.protocol import jobs
from okgit.lower.trace import instantiate
from okgit.problem import INIT_FLOAT_FACTOR, perturb_floats

NUMPY_FLOAT_OP = """
import numpy as np
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return [np.float64(0.5)]
"""


def test_a_numpy_float_is_perturbed_like_a_python_float():
    new, changes = perturb_floats([np.float64(0.5), 0.5, np.int64(3)], ["scale", "plain", "n"])
    assert new[0] == new[1] == 0.5 * INIT_FLOAT_FACTOR
    assert new[2] == 3
    assert changes == ["scale=0.75 (was 0.5)", "plain=0.75 (was 0.5)"]


def test_the_evaluator_and_the_lowering_perturb_alike():
    assert jobs.perturb_floats is perturb_floats and jobs.INIT_FLOAT_FACTOR == INIT_FLOAT_FACTOR
    _, model, _ = instantiate(NUMPY_FLOAT_OP, {}, perturbed=True)
    assert model.scale == perturb_floats([np.float64(0.5)])[0][0] == 0.75
