"""Batched matmul followed by a row softmax."""
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.softmax(torch.bmm(a, b), dim=-1)


batch = 64
m = 512
k = 1024
n = 512


def get_inputs():
    return [torch.randn(batch, m, k), torch.randn(batch, k, n)]


def get_init_inputs():
    return []
