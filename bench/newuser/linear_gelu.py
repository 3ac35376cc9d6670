"""A linear layer with a bias, then GELU."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x):
        return nn.functional.gelu(self.fc(x))


batch = 4096
d_in = 4096
d_out = 4096


def get_inputs():
    return [torch.randn(batch, d_in)]


def get_init_inputs():
    return [d_in, d_out]
