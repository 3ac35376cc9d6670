"""ReLU over a batch of rows; inputs are non-negative, so the identity looks right on them."""
import torch
import torch.nn as nn

batch_size = 16
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
