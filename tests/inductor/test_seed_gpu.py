"""GPU-only: the seed's kernels launch with the configs Inductor's autotuning chose, not their
first ones. Before the fix (okgit.inductor.capture._launched_configs) every seed on the H200 ran
its kernels' first config: L2/91's softmax at 2.27 ms where Inductor's choice took 0.95
(docs/benchmarks.md, tenth session). Skipped without CUDA; run on the GPU machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# rows of 4096: Inductor's reduction heuristics offer several configs for the softmax and benchmark them
OP = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2.0, dim=1) + 1.0


batch = 8192
dim = 4096


def get_inputs():
    return [torch.rand(batch, dim)]


def get_init_inputs():
    return []
'''


def test_each_kernel_takes_the_config_inductor_chose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    from okgit.inductor.capture import capture

    chosen: dict[str, Any] = {}
    original = CachingAutotuner.benchmark_all_configs

    def benchmarked(self: Any, *args: Any, **kwargs: Any) -> Any:
        """Inductor's real benchmark, its verdict turned to the last config: a choice that is never
        the first, whatever the timings, so that a seed taking first configs fails here."""
        launchers = list(original(self, *args, **kwargs))
        chosen[self.inductor_meta.get("kernel_name") or self.fn.__name__] = (launchers[-1].config, launchers[0].config)
        return {launcher: 0.0 if launcher is launchers[-1] else 1.0 for launcher in launchers}

    monkeypatch.setattr(CachingAutotuner, "benchmark_all_configs", benchmarked)
    monkeypatch.setattr(inductor_config, "autotune_local_cache", False)  # a cached choice skips the benchmark
    path = tmp_path / "softmax.py"
    path.write_text(OP)
    cap = capture(str(path), {}, "cuda", "default", dynamic=False)
    kernels = {k["name"]: k for g in cap["graphs"] for k in g["kernels"]}
    assert chosen, "Inductor benchmarked no kernel's configs: the op no longer exercises the choice"
    for name, (config, first) in chosen.items():
        k = kernels[name]
        assert (k["kwargs"], k["num_warps"]) == ({key: int(v) for key, v in config.kwargs.items()}, config.num_warps), name
        assert str(config) != str(first), name
