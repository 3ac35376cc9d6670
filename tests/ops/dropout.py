"""ReLU plus a dropout that drops everything in training mode: the output depends on the mode
(training: relu(x); eval: relu(x) + x), deterministically in both."""
import torch
import torch.nn as nn

batch_size = 16
dim = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(p=1.0)

    def forward(self, x):
        return torch.relu(x) + self.drop(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
