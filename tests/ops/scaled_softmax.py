"""Softmax of x / temperature over the last dimension: a float constructor argument used in forward."""
import torch
import torch.nn as nn

batch_size = 8  # rows: each is one program of the interpreter in every checked call
dim = 1024


class Model(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return torch.softmax(x / self.temperature, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.7]
