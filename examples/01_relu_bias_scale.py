"""Pointwise chain with parameters: relu(x + bias) * scale, bias and scale per feature."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = nn.Parameter(torch.rand(features) + 0.5)

    def forward(self, x):
        return torch.relu(x + self.bias) * self.scale


batch_size = 4096
features = 8192


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
