"""A batch norm between two elementwise steps: its output and its running statistics depend on
the module's mode (training: the batch's statistics, updated into the buffers; eval: the buffers)."""
import torch
import torch.nn as nn

batch_size = 16
features = 32


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return torch.relu(self.bn(x * 2.0 + 1.0))


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
