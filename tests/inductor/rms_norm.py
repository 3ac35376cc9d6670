import torch
import torch.nn as nn

batch_size = 4
features = 16
size = 8


class Model(nn.Module):
    """RMS normalisation over the features: Inductor keeps the rows in registers at static sizes
    and loops over them at dynamic ones."""

    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x / torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + self.eps)


def get_inputs():
    return [torch.randn(batch_size, features, size, size)]


def get_init_inputs():
    return [1e-5]
