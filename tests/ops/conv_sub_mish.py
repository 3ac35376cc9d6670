import torch
import torch.nn as nn

# KernelBench level 2 problem 87's sizes: cuDNN at PyTorch's default flags (TF32 allowed) takes
# TF32 kernels for this convolution in channels_last and not in NCHW (tests/eval/test_eval_gpu.py)
batch_size = 128
in_channels = 64
out_channels = 128
height = width = 128
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, subtract_value_1, subtract_value_2):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.subtract_value_1 = subtract_value_1
        self.subtract_value_2 = subtract_value_2

    def forward(self, x):
        x = self.conv(x)
        x = x - self.subtract_value_1
        x = x - self.subtract_value_2
        return torch.nn.functional.mish(x)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, 0.5, 0.2]
