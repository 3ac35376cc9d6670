"""Batch norm with the training flag written in, as a trace in training mode leaves it: the
batch's statistics in eval mode too."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def triton_relu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y



class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        bn = self.bn
        bn.num_batches_tracked.add_(1)
        y = torch.ops.aten.batch_norm.default(x * 2.0 + 1.0, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                              True, bn.momentum, bn.eps, False)
        return triton_relu(y)
