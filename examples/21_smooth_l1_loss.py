"""Smooth L1 (Huber-style) loss to a scalar."""

import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def __init__(self, beta):
        super().__init__()
        self.beta = beta

    def forward(self, predictions, targets):
        return F.smooth_l1_loss(predictions, targets, beta=self.beta)


batch_size = 4096
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.5]
