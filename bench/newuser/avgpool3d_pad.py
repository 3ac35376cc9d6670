"""3D average pooling with padding over a video-like volume."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, kernel, stride, padding):
        super().__init__()
        self.pool = nn.AvgPool3d(kernel, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


batch = 16
channels = 32
depth = 32
height = 64
width = 64


def get_inputs():
    return [torch.randn(batch, channels, depth, height, width)]


def get_init_inputs():
    return [3, 2, 1]
