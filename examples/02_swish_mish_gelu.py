"""Activation functions: SiLU, Mish and tanh-GELU combined elementwise."""

import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.silu(x) + F.mish(x) * 0.5 - F.gelu(x, approximate="tanh")


batch_size = 4096
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
