"""Argmax over dim 1 of a 3-D tensor."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.argmax(x, dim=self.dim)


batch_size = 128
dim1 = 1024
dim2 = 256


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [1]
