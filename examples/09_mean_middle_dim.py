"""Mean and sum over the middle dim of a 3-D tensor (a strided reduction)."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=1) + 0.5 * x.sum(dim=1)


batch_size = 64
reduce_dim = 512
dim2 = 1024


def get_inputs():
    return [torch.randn(batch_size, reduce_dim, dim2)]


def get_init_inputs():
    return []
