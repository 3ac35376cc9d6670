"""Matmul, scaled, plus a residual input."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b, residual):
        return torch.matmul(a, b) * self.scale + residual


m = 4096
k = 4096
n = 4096


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n), torch.randn(m, n)]


def get_init_inputs():
    return [0.5]
