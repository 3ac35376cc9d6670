import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 4
in_channels = 8
out_channels = 16
height = width = 12
kernel_size = 3
SCALE: float = 1.0  # tests/eval/test_modes_layout.py sets it to 1.01 for a candidate that must fail


@triton.jit
def tf32_kernel(y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    # the convolution's output rounded to TF32 in every layout, as a TF32 convolution kernel does
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    y = ((y.to(tl.int32, bitcast=True) + 0x1000) & -8192).to(tl.float32, bitcast=True)
    tl.store(out_ptr + offs, y * scale, mask=mask)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        y = self.conv(x).contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        tf32_kernel[(triton.cdiv(n, 1024),)](y, out, n, SCALE, BLOCK=1024)
        return self.bn(out)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
