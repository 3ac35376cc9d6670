import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 128
in_channels = 64
out_channels = 128
height = width = 128
kernel_size = 3
SCALE: float = 1.0  # tests/eval/test_eval_gpu.py sets it to 1.01 for a candidate that must fail


@triton.jit
def sub_kernel(x_ptr, out_ptr, n, c, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (x - c) * scale, mask=mask)


class Model(nn.Module):
    """The convolution run channels_last, as torch.compile runs it; the epilogue in Triton."""

    def __init__(self, in_channels, out_channels, kernel_size, subtract_value_1, subtract_value_2):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.subtract_value_1 = subtract_value_1
        self.subtract_value_2 = subtract_value_2

    def forward(self, x):
        w = self.conv.weight.contiguous(memory_format=torch.channels_last)
        y = torch.nn.functional.conv2d(x.contiguous(memory_format=torch.channels_last), w, self.conv.bias).contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        sub_kernel[(triton.cdiv(n, 1024),)](y, out, n, self.subtract_value_1 + self.subtract_value_2, SCALE, BLOCK=1024)
        return torch.nn.functional.mish(out)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, 0.5, 0.2]
