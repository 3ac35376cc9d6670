"""The lowering tests' harness (tests/oprun.py) catches a candidate whose second call differs
from its first, and calls it a second time only where the first changed what it would read."""

from __future__ import annotations

from pathlib import Path

import pytest
from oprun import run_ops

REFERENCE = '''import torch
import torch.nn as nn

n = 64


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
'''

HONEST = REFERENCE.replace("class Model(nn.Module):", "CALLS = []\n\n\nclass Model(nn.Module):").replace(
    "return torch.relu(x)", "CALLS.append(1)  # counted, never read\n        return torch.relu(x)")

# what a first call leaves for the second to read, each where the harness looks
STATEFUL = {
    "an attribute": ("return torch.relu(x)",
                     "self.calls = getattr(self, 'calls', 0) + 1\n        return torch.relu(x) * self.calls"),
    "a module's list": ("return torch.relu(x)", "CALLS.append(1)\n        return torch.relu(x) * len(CALLS)"),
    "a buffer written in place": ("def forward(self, x):", "def __init__(self):\n        super().__init__()\n"
                                  "        self.register_buffer('seen', torch.zeros(()), persistent=False)\n\n    def forward(self, x):\n"
                                  "        self.seen += 1\n        return torch.relu(x) * self.seen"),
    "the RNG": ("return torch.relu(x)", "return torch.relu(x) + 1e-6 * torch.rand_like(x)"),
}


def stateful(where: str) -> str:
    old, new = STATEFUL[where]
    return REFERENCE.replace("class Model(nn.Module):", "CALLS = []\n\n\nclass Model(nn.Module):").replace(old, new)


@pytest.mark.slow  # the harness's interpreter process
def test_a_second_call_that_differs_is_caught_wherever_the_first_left_its_state(tmp_path: Path) -> None:
    ref = tmp_path / "relu.py"
    ref.write_text(REFERENCE)
    results = run_ops([(ref, HONEST, {})] + [(ref, stateful(where), {}) for where in STATEFUL])
    assert results[0]["ok"], results[0]["why"]
    for where, result in zip(STATEFUL, results[1:], strict=True):
        assert not result["ok"] and "two calls differ" in result["why"], (where, result)
