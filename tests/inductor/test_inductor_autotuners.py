"""The Inductor seed takes each kernel's launch settings from what Inductor launched it with
(okgit.inductor.capture._launched_configs), recorded at the launch. Before, it scanned the live
autotuner objects after the call; on the H200 (torch 2.11) those had no launcher left, so every
seed took its kernels' first config: L2/87's pointwise kernel ran at 2.06 ms where Inductor's
choice took 1.25, L2/91's softmax at 2.27 ms against 0.95 (bench/seed_configs.py,
bench/results/2026-12-04-h200-tenth/). A CPU capture launches nothing (Inductor's CPU Triton code is
never compiled), so the launch is driven here by hand on a real autotuner object: the recording is
what is under test; the GPU path is checked on the device by bench/seed_configs.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from okgit.inductor.capture import _kernel, _launched_configs, _load_kernel

FIXTURE = Path(__file__).parent / "bn_min_softmax.capture.json"


def _autotuned_kernel() -> dict[str, Any]:
    """A kernel of the fixture whose decorator gives Inductor several configs to choose from."""
    kernels = [k for g in json.loads(FIXTURE.read_text())["graphs"] for k in g["kernels"]]
    return next(k for k in kernels if len(_load_kernel(k["name"], k["source"]).configs) > 1)


@pytest.fixture
def launch_sets_one_launcher(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """CachingAutotuner.run as its autotuning leaves it: the chosen launcher alone, then launched."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    launched: list[Any] = []

    def run(self: Any, *args: Any, **kwargs: Any) -> str:
        self.launchers = [SimpleNamespace(config=self.configs[-1])]
        launched.append(self)
        return "ran"

    monkeypatch.setattr(CachingAutotuner, "run", run)
    return launched


def test_the_config_inductor_launched_is_the_one_the_seed_takes(launch_sets_one_launcher: list[Any]) -> None:
    k = _autotuned_kernel()
    autotuner = _load_kernel(k["name"], k["source"])
    chosen: dict[str, Any] = {}
    with _launched_configs(chosen):
        assert autotuner.run() == "ran"  # the launch's own result is passed through
    assert launch_sets_one_launcher == [autotuner]
    assert chosen == {k["name"]: autotuner.configs[-1]}
    kernel = _kernel(k["name"], k["source"], "", chosen[k["name"]])
    assert kernel.kwargs == {key: int(v) for key, v in autotuner.configs[-1].kwargs.items()}
    assert kernel.kwargs != {key: int(v) for key, v in autotuner.configs[0].kwargs.items()}  # not the first config
    assert kernel.num_warps == autotuner.configs[-1].num_warps


def test_a_kernel_never_launched_takes_its_first_config_and_the_launch_is_unhooked_after() -> None:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    before = CachingAutotuner.run
    k = _autotuned_kernel()
    chosen: dict[str, Any] = {}
    with _launched_configs(chosen):
        assert CachingAutotuner.run is not before
    assert CachingAutotuner.run is before
    first = _load_kernel(k["name"], k["source"]).configs[0]
    assert _kernel(k["name"], k["source"], "", chosen.get(k["name"])).kwargs == {key: int(v) for key, v in first.kwargs.items()}
