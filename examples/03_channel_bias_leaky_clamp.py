"""Broadcasting over NCHW: per-channel bias, leaky ReLU, clamp, and a scalar scale."""

import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def __init__(self, channels, negative_slope, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels, 1, 1) * 0.1)
        self.negative_slope = negative_slope
        self.scale = scale

    def forward(self, x):
        x = F.leaky_relu(x + self.bias, self.negative_slope)
        return torch.clamp(x * self.scale, min=-1.0, max=1.0)


batch_size = 64
channels = 128
height = 64
width = 64


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, 0.01, 0.75]
