"""What a worker and a judge do before their job (okgit.eval.worker.calls.warm_up): the switch to
deterministic algorithms without Inductor's import (a second of each start, on every
evaluation), and Inductor's own flag as torch.use_deterministic_algorithms leaves it, whether
Inductor is loaded before the switch or after it (a candidate that compiles)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHECK = r'''
import sys, torch
from okgit.eval.worker import calls

calls.warm_up(torch, "cpu")
assert "torch._inductor.config" not in sys.modules, "the worker's start loaded Inductor"
assert not torch.are_deterministic_algorithms_enabled()
with calls.poisoned(torch):
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.empty(4).isnan().all()  # the point of the switch: unwritten memory shows up
    import torch._inductor.config as inductor  # loaded by the candidate, mid-call
    assert inductor.deterministic
assert not torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
assert not inductor.deterministic
with calls.poisoned(torch):  # now loaded: set as torch sets it
    assert inductor.deterministic
assert not inductor.deterministic
print("ok")
'''


@pytest.mark.slow  # a Python process of its own: torch, Triton's interpreter and Inductor imported
def test_the_switch_to_deterministic_algorithms_leaves_inductor_unloaded_and_its_flag_right() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("TORCHINDUCTOR_DETERMINISTIC", None)
    proc = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr[-3000:]
