"""Test helper: a convolution op file as the conv kinds' tests write them (tests/lower/test_conv_kind.py,
test_conv_direct.py)."""

from __future__ import annotations

import textwrap

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def form(conv: str, epilogue: str, inputs: str, cin: int, cout: int, param_dims: int) -> str:
    """An op file: the convolution `conv` (of cin, cout) and `epilogue` of its output y, where
    self.p is a per-channel parameter of `param_dims` dims."""
    return HEADER + textwrap.dedent(f"""
        class Model(nn.Module):
            def __init__(self, cin, cout):
                super().__init__()
                self.conv = {conv}
                self.p = nn.Parameter(torch.rand(cout, {', '.join(['1'] * param_dims)}) + 0.5)

            def forward(self, x):
                y = self.conv(x)
                return {epilogue}

        batch = 2
        cin = {cin}
        cout = {cout}

        def get_inputs():
            return [{inputs}]

        def get_init_inputs():
            return [cin, cout]
        """)


def narrow_indices(source: str) -> str:
    """A candidate of the conv kinds with 32-bit indices where its tensors allow, as on a GPU
    (`_wide`: the interpreter takes 64-bit ones, as it checks each 32-bit operation)."""
    narrow = source.replace('return device.type != "cuda" or max(numels) >= 2**31', "return max(numels) >= 2**31")
    assert narrow != source
    return narrow
