"""A plain fp32 matrix product."""
import torch
import torch.nn as nn

M = 1024
N = 1024
K = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
