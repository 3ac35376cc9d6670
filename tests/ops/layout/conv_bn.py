import torch
import torch.nn as nn

# A convolution and a batch norm whose convolution is rounded to TF32 in channels_last only, as
# cuDNN under PyTorch's default flags may take TF32 kernels in one layout and not the other
# (tests/eval/test_modes_layout.py)
batch_size = 4
in_channels = 8
out_channels = 16
height = width = 12
kernel_size = 3


def tf32(y):
    """y rounded to TF32 (10 mantissa bits, to nearest), as a TF32 tensor-core product rounds."""
    return ((y.view(torch.int32) + 0x1000) & -8192).view(torch.float32)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        y = self.conv(x)
        if y.dtype == torch.float32 and not y.is_contiguous() and y.is_contiguous(memory_format=torch.channels_last):
            y = tf32(y)
        return self.bn(y)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
