"""2D max pooling with dilation."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=2)

    def forward(self, x):
        return self.pool(x)


batch = 32
channels = 64
size = 224


def get_inputs():
    return [torch.randn(batch, channels, size, size)]


def get_init_inputs():
    return []
