import torch
import torch.nn as nn

batch_size = 24
in_features = 40
out_features = 48


class Model(nn.Module):
    """A GEMM, a batch norm (mode-dependent, with running statistics), a clamp against a tensor
    the forward makes from an attribute, and a softmax."""

    def __init__(self, in_features, out_features, ceiling):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
        self.ceiling = ceiling

    def forward(self, x):
        x = self.bn(self.lin(x))
        x = torch.min(x, torch.tensor(self.ceiling))
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 0.5]
