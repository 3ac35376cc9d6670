"""Causal self-attention core, head dim 64."""
import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


batch = 8
heads = 16
seq = 1024
head_dim = 64


def get_inputs():
    return [torch.randn(batch, heads, seq, head_dim) for _ in range(3)]


def get_init_inputs():
    return []
