"""Depthwise 3D convolution followed by a ReLU."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv3d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x):
        return torch.relu(self.conv(x))


batch = 8
channels = 64
depth = 32
size = 64


def get_inputs():
    return [torch.randn(batch, channels, depth, size, size)]


def get_init_inputs():
    return [channels]
