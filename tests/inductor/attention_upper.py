import math

import torch
import torch.nn as nn

batch_size = 3
num_heads = 2
seq_len = 12
head_dim = 8


class Model(nn.Module):
    """Attention written out, causal; the forward's arguments are upper-case."""

    def __init__(self):
        super().__init__()

    def forward(self, Q, K, V):
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(Q.size(-1))
        n = Q.size(-2)
        causal = torch.ones(n, n, dtype=torch.bool, device=Q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), V)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
