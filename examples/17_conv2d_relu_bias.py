"""Conv2d, ReLU, then a learned per-channel bias."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.02)

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        return x + self.bias


batch_size = 128
in_channels = 64
out_channels = 128
height = 64
width = 64
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, (out_channels, 1, 1)]
