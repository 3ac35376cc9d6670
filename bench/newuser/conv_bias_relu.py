"""2D convolution with a bias, then ReLU."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


batch = 32
c_in = 64
c_out = 128
size = 64


def get_inputs():
    return [torch.randn(batch, c_in, size, size)]


def get_init_inputs():
    return [c_in, c_out]
