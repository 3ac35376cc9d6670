"""LayerNorm over the hidden dim of a (batch, seq, hidden) activation."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        return self.norm(x)


batch_size = 32
seq_len = 512
hidden = 2048


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden) * 2 + 1]


def get_init_inputs():
    return [hidden]
