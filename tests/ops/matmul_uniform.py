"""A plain fp32 matrix product on KernelBench's uniform inputs (torch.rand): sums of many
positive products, where a fixed relative tolerance hides a single-pass TF32 GEMM. Sized so the
CPU evaluation keeps K whole (the inputs hold 64K elements): the longer the sum, the smaller a
rounding error looks beside it."""
import torch
import torch.nn as nn

M = 16
N = 16
K = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
