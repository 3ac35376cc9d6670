"""An op that already has its own Triton kernel (ModelNew); Model is the reference.

The kernel computes y = relu(x * alpha + beta) with a fixed launch configuration;
okgit's autotune phase varies BLOCK_SIZE and num_warps.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def scale_shift_relu_kernel(x_ptr, y_ptr, alpha, beta, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(x * alpha + beta, 0.0), mask=mask)


class Model(nn.Module):
    def __init__(self, alpha, beta):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x):
        return torch.relu(x * self.alpha + self.beta)


class ModelNew(nn.Module):
    def __init__(self, alpha, beta):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
        scale_shift_relu_kernel[grid](x, y, self.alpha, self.beta, n, BLOCK_SIZE=128, num_warps=2)
        return y


batch_size = 4096
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1.5, -0.25]
