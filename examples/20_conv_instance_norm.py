"""Conv2d followed by a per-(sample, channel) normalisation over H and W, written as ops."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, eps):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.eps = eps

    def forward(self, x):
        x = self.conv(x)
        mean = x.mean(dim=(2, 3), keepdim=True)
        var = ((x - mean) ** 2).mean(dim=(2, 3), keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps)


batch_size = 64
in_channels = 32
out_channels = 64
height = 64
width = 64
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, 1e-5]
