"""Matmul without bias, then a separate bias add and ReLU."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        return torch.relu(self.fc(x) + self.bias)


batch_size = 4096
in_features = 2048
out_features = 8192


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
