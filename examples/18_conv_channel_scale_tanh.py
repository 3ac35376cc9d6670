"""Conv2d followed by a per-channel scale and tanh."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = nn.Parameter(torch.rand(1, out_channels, 1, 1) + 0.5)

    def forward(self, x):
        return torch.tanh(self.conv(x) * self.scale)


batch_size = 64
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
