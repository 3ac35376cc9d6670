"""A Triton kernel that fails at its first launch, caught, and the library op returned instead:
a launch that raised is no launch (and a call that went on without it is a finding)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.no_such_function(x), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        try:
            relu_kernel[(triton.cdiv(x.numel(), 8192),)](x, y, x.numel(), BLOCK=8192)
        except Exception:
            return torch.relu(x)
        return y
