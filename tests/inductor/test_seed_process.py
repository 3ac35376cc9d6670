"""The Inductor seed's child process: Inductor's benchmarks in the device lock's exclusive region
(okgit.inductor.locking), and several torch.compile modes made by one process, each seed
handed over as soon as it is made (okgit.search.proposers.inductor.SeedProcess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from okgit.eval.parent.devices import DeviceHold
from okgit.eval.protocol.ledger import LEDGER_ENV

OP = Path(__file__).parents[1] / "kb_fixture" / "KernelBench" / "level2" / "1_ScaleShift.py"


@pytest.mark.slow  # importing Inductor's autotuning takes seconds
def test_inductors_benchmarks_run_with_the_device_held_alone(monkeypatch, tmp_path):
    pytest.importorskip("torch._inductor.select_algorithm")
    from torch._inductor import select_algorithm
    from torch._inductor.runtime import benchmarking, triton_heuristics

    from okgit.inductor.locking import exclusive_benchmarks

    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    hold = DeviceHold(None, "seed")
    seen: list[str | None] = []

    def bench_gpu(*args, **kwargs):
        seen.append(hold.mode)
        return 1.0

    def in_process(cls, *args, **kwargs):
        seen.append(hold.mode)
        return {}

    # stand-ins for what would run on a GPU, put back by monkeypatch afterwards
    monkeypatch.setattr(benchmarking.benchmarker, "benchmark_gpu", bench_gpu)
    monkeypatch.setattr(select_algorithm.AlgorithmSelectorCache, "benchmark_in_current_process", classmethod(in_process))
    for name in ("benchmark_in_sub_process",):
        monkeypatch.setattr(select_algorithm.AlgorithmSelectorCache, name,
                            select_algorithm.AlgorithmSelectorCache.__dict__[name])
    for name in ("benchmark_all_configs", "coordinate_descent_tuning"):
        monkeypatch.setattr(triton_heuristics.CachingAutotuner, name, triton_heuristics.CachingAutotuner.__dict__[name])

    wrapped = exclusive_benchmarks(hold)
    assert wrapped[0] == "benchmarker.benchmark_gpu"
    assert {"CachingAutotuner.benchmark_all_configs", "AlgorithmSelectorCache.benchmark_in_current_process"} <= set(wrapped)
    with hold.region("shared"):  # the compiled graph running: then a benchmark
        assert benchmarking.benchmarker.benchmark_gpu(lambda: None) == 1.0
        assert select_algorithm.AlgorithmSelectorCache.benchmark_in_current_process([]) == {}
        assert hold.mode == "shared"
    assert benchmarking.benchmarker.benchmark_gpu(lambda: None) == 1.0  # from nothing held (max-autotune's compile)
    assert seen == ["exclusive", "exclusive", "exclusive"] and hold.mode is None
    # each exclusive hold names what Inductor ran in it
    alone = [e["for"] for e in map(json.loads, ledger.read_text().splitlines()) if e["mode"] == "exclusive"]
    assert [set(a) for a in alone] == [{"benchmarker.benchmark_gpu"}, {"AlgorithmSelectorCache.benchmark_in_current_process"},
                                       {"benchmarker.benchmark_gpu"}]


@pytest.mark.slow  # Inductor compiles in the seed's child process
@pytest.mark.timeout(900)
def test_one_process_makes_each_mode_in_turn_and_hands_each_over_when_made():
    from okgit.search.proposers.inductor import SeedProcess

    child = SeedProcess(OP.read_text(), str(OP.parent), "cpu", ["default", "default"], {}, "dynamic")
    try:
        first = child.next()
        assert first[0] == "default" and first[1], first[2]
        second = child.next()
        assert second[0] == "default" and second[1], second[2]
        assert "class Model" in second[1][0][0] and "one graph" not in second[1][0][1]  # either mode: compiled once
        assert child.next() == (None, [], "")
    finally:
        child.close()
    assert child.proc.poll() is not None


@pytest.mark.slow  # the seed's child process (torch import)
def test_a_seed_process_runs_below_timing_and_closed_early_leaves_nothing_running():
    import os

    from okgit.search.proposers.inductor import SEED_NICE, SeedProcess

    child = SeedProcess(OP.read_text(), str(OP.parent), "cpu", ["default"], {}, "dynamic")
    assert os.getpriority(os.PRIO_PROCESS, child.proc.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + SEED_NICE)
    child.close()
    assert child.proc.poll() is not None


@pytest.mark.slow  # importing Inductor's autotuning takes seconds
def test_coordinate_descent_compiles_with_nothing_held_and_benchmarks_alone(monkeypatch):
    """Inductor's own coordinate descent (CachingAutotuner._coordinate_descent_tuning) compiles
    each configuration it tries just before benchmarking it: the device is held alone for each
    benchmark, not through the compiles between them (on the H200's sweep, 2026-12-04, single
    seed holds of 28-57 s kept every other problem off the device). Driven here on a real
    autotuner of a captured kernel, its compile and its benchmark standing in for the GPU's."""
    from types import SimpleNamespace

    from torch._inductor import select_algorithm
    from torch._inductor.runtime import benchmarking, triton_heuristics

    from okgit.inductor.capture import _load_kernel
    from okgit.inductor.locking import exclusive_benchmarks

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from test_inductor_autotuners import _autotuned_kernel

    hold = DeviceHold(None, "seed")
    seen: list[tuple[str, str | None]] = []
    monkeypatch.setattr(benchmarking.benchmarker, "benchmark_gpu", lambda fn, **kw: seen.append(("bench", hold.mode)) or 1.0)
    for cls, names in ((select_algorithm.AlgorithmSelectorCache, ("benchmark_in_current_process", "benchmark_in_sub_process")),
                       (triton_heuristics.CachingAutotuner, ("benchmark_all_configs", "coordinate_descent_tuning"))):
        for name in names:  # put back by monkeypatch afterwards
            monkeypatch.setattr(cls, name, cls.__dict__[name])
    exclusive_benchmarks(hold)

    k = _autotuned_kernel()
    autotuner = _load_kernel(k["name"], k["source"])
    autotuner.__dict__["_should_coordesc_tune"] = True  # as max-autotune sets it

    def launcher(config):
        return SimpleNamespace(config=config, n_regs=0, n_spills=0, shared=0, cache_hash=None)

    def compile_config(config):
        seen.append(("compile", hold.mode))
        return SimpleNamespace(make_launcher=lambda: launcher(config))

    autotuner._precompile_config = compile_config
    autotuner.bench = lambda one, *a, **kw: benchmarking.benchmarker.benchmark_gpu(lambda: None)
    autotuner.coordinate_descent_tuning(launcher(autotuner.configs[0]))
    assert {what for what, _ in seen} == {"compile", "bench"} and len(seen) >= 4
    assert {mode for what, mode in seen if what == "compile"} == {None}  # nothing held while it compiles
    assert {mode for what, mode in seen if what == "bench"} == {"exclusive"}
