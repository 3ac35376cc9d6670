import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.bn(self.conv(x))).mean(dim=(2, 3))


batch_size = 2
channels = 8


def get_inputs():
    return [torch.rand(batch_size, 3, 8, 8)]


def get_init_inputs():
    return [channels]
