"""Inductor's hopeless autotuning choices cut after one timed call (okgit.inductor.cutoff, issue 31):
on the H100's sweep one depthwise convolution's max-autotune choice selection held the device alone
for 309.5 s, each of its slow template configurations benchmarked in full though it could not win.
On the CPU the choices are Python callables on a stand-in clock: the full benchmark runs one as
InductorBenchmarker.benchmark_gpu does (7 calls at least) and the one timed call (the seam that
needs CUDA, `cutoff.time_once`) calls it twice, each returning the callable's own time. The GPU
test at the end times real kernels with a real InductorBenchmarker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from okgit.eval.parent.devices import DeviceHold
from okgit.eval.protocol.ledger import LEDGER_ENV
from okgit.inductor import cutoff

SELECTION = "AlgorithmSelectorCache.benchmark_in_current_process"


class Choice:
    """A choice whose every call takes `ms` on the stand-in clock; counts its calls."""

    def __init__(self, ms: float) -> None:
        self.ms, self.calls = ms, 0

    def __call__(self) -> None:
        self.calls += 1


def full_benchmark(fn: Choice, **kwargs: Any) -> float:
    """InductorBenchmarker.benchmark_gpu's least: a warm-up, 5 estimation runs, one run."""
    for _ in range(7):
        fn()
    return fn.ms


def one_timed_call(fn: Choice) -> float:
    """`cutoff.time_once` on the stand-in clock: an untimed call, then the timed one."""
    fn()
    fn()
    return fn.ms


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(cutoff, "time_once", one_timed_call)
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    return path


def _cutoffs(ledger: Path) -> list[dict[str, Any]]:
    """The ledger's cutoff lines, less the writer's pid and clock."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return [{k: v for k, v in e.items() if k not in ("pid", "t")} for e in map(json.loads, lines) if "cutoff" in e]


def test_a_choice_is_hopeless_from_ratio_times_the_best_and_never_without_a_best() -> None:
    assert cutoff.RATIO == 4.0
    assert cutoff.hopeless(4.0, 1.0) and cutoff.hopeless(8.0, 2.0)
    assert not cutoff.hopeless(3.999, 1.0)
    assert not cutoff.hopeless(1e9, None)


def test_in_a_region_a_hopeless_choice_returns_its_one_timed_call(ledger: Path) -> None:
    bench = cutoff.pruned(full_benchmark)
    fast, slow, near, faster, now_slow = Choice(1.0), Choice(10.0), Choice(3.9), Choice(0.5), Choice(2.0)
    with cutoff.region(SELECTION, "seed"):
        assert bench(fast) == 1.0 and fast.calls == 7  # the first: nothing to compare it with
        assert bench(slow) == 10.0 and slow.calls == 2  # 10x the best: cut, its one timing returned
        assert bench(near) == 3.9 and near.calls == 2 + 7  # under 4x: benchmarked in full
        assert bench(faster) == 0.5 and faster.calls == 9  # a new best...
        assert bench(now_slow) == 2.0 and now_slow.calls == 2  # ...that the next ones are held to
        every = Choice(10.0)
        bench(every, return_mode="all")  # every sample asked for: one timing is not that, none is taken
        assert every.calls == 7
    # the ledger says what was cut: slow's 25 ms budget fits 2 runs, 8 calls of 10 ms less the 2 made;
    # now_slow's fits 12, 18 calls of 2 ms less 2
    assert _cutoffs(ledger) == [{"cutoff": SELECTION, "what": "seed", "cut": 2, "saved_s": 0.092}]


def test_outside_a_region_and_in_each_new_one_every_choice_is_benchmarked_in_full(ledger: Path) -> None:
    bench = cutoff.pruned(full_benchmark)
    fast, slow = Choice(1.0), Choice(10.0)
    bench(fast)
    assert bench(slow) == 10.0 and slow.calls == 7  # no region: no best
    with cutoff.region(SELECTION, "seed"):
        bench(Choice(1.0))
    slow = Choice(10.0)
    with cutoff.region(SELECTION, "seed"):
        assert bench(slow) == 10.0 and slow.calls == 7  # the last region's best is not this one's
    assert _cutoffs(ledger) == []  # nothing cut, nothing written


def test_nested_regions_share_the_outermost_regions_best(ledger: Path) -> None:
    bench = cutoff.pruned(full_benchmark)
    slow, later = Choice(10.0), Choice(10.0)
    with cutoff.region("AlgorithmSelectorCache.benchmark_in_sub_process", "seed"):
        with cutoff.region(SELECTION, "seed"):  # the sub-process selection benchmarks the externs in-process
            bench(Choice(1.0))
        assert bench(slow) == 10.0 and slow.calls == 2  # the inner region's best outlives it
        with cutoff.region(SELECTION, "seed"):
            assert bench(later) == 10.0 and later.calls == 2  # a nested region starts from it
    assert [(e["cutoff"], e["cut"]) for e in _cutoffs(ledger)] == [("AlgorithmSelectorCache.benchmark_in_sub_process", 2)]


def test_a_region_that_raises_ends_and_leaves_no_best_behind(ledger: Path) -> None:
    bench = cutoff.pruned(full_benchmark)
    with pytest.raises(RuntimeError):
        with cutoff.region(SELECTION, "seed"):
            bench(Choice(1.0))
            raise RuntimeError("a choice's error Inductor does not catch")
    slow, next_slow = Choice(10.0), Choice(10.0)
    assert bench(slow) == 10.0 and slow.calls == 7  # no region is open any more
    with cutoff.region(SELECTION, "seed"):
        assert bench(next_slow) == 10.0 and next_slow.calls == 7  # a new region, not a nested one


def test_a_choice_whose_timed_call_fails_is_left_to_the_full_benchmark(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fn: Choice) -> float:
        raise RuntimeError("invalid configuration argument")

    def inf_for_a_failure(fn: Choice, **kwargs: Any) -> float:
        return float("inf") if fn.ms == 0 else full_benchmark(fn)  # as TritonBenchmarker returns an invalid config

    bench = cutoff.pruned(inf_for_a_failure)
    with cutoff.region(SELECTION, "seed"):
        bench(Choice(1.0))
        monkeypatch.setattr(cutoff, "time_once", failing)
        assert bench(Choice(0)) == float("inf")  # what the full benchmark makes of it
        monkeypatch.setattr(cutoff, "time_once", one_timed_call)
        slow = Choice(10.0)
        assert bench(slow) == 10.0 and slow.calls == 2  # the best is still the first one's


@pytest.mark.slow  # importing Inductor's autotuning takes seconds
def test_inductors_selections_cut_through_the_locking_wrappers(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """okgit.inductor.locking makes each coarse function a region and prunes the benchmarker: a
    selection in Inductor's sub-process mode (the externs benchmarked in-process first, the
    templates after, as AlgorithmSelectorCache.benchmark_in_sub_process does) cuts the slow one."""
    pytest.importorskip("torch._inductor.select_algorithm")
    from torch._inductor import select_algorithm
    from torch._inductor.runtime import benchmarking, triton_heuristics

    from okgit.inductor.locking import exclusive_benchmarks

    def in_process(cls: Any, choices: list[Choice]) -> dict[Choice, float]:
        return {c: benchmarking.benchmarker.benchmark_gpu(c) for c in choices}

    def in_sub_process(cls: Any, choices: list[Choice]) -> dict[Choice, float]:
        return {**cls.benchmark_in_current_process(choices[:1]), **in_process(cls, choices[1:])}

    # stand-ins for what would run on a GPU, put back by monkeypatch afterwards
    monkeypatch.setattr(benchmarking.benchmarker, "benchmark_gpu", full_benchmark)
    monkeypatch.setattr(select_algorithm.AlgorithmSelectorCache, "benchmark_in_current_process", classmethod(in_process))
    monkeypatch.setattr(select_algorithm.AlgorithmSelectorCache, "benchmark_in_sub_process", classmethod(in_sub_process))
    monkeypatch.setattr(triton_heuristics.CachingAutotuner, "benchmark_all_configs",
                        triton_heuristics.CachingAutotuner.__dict__["benchmark_all_configs"])
    hold = DeviceHold(None, "seed")
    exclusive_benchmarks(hold)

    cublas, template, slow_template = Choice(1.0), Choice(1.5), Choice(30.0)
    selector: Any = select_algorithm.AlgorithmSelectorCache  # called with the stand-ins' arguments
    timings = selector.benchmark_in_sub_process([cublas, template, slow_template])
    assert timings == {cublas: 1.0, template: 1.5, slow_template: 30.0}
    assert (cublas.calls, template.calls, slow_template.calls) == (7, 2 + 7, 2)
    assert [(e["cutoff"], e["what"], e["cut"]) for e in _cutoffs(ledger)] == [
        ("AlgorithmSelectorCache.benchmark_in_sub_process", "seed", 1)]
    assert benchmarking.benchmarker.benchmark_gpu(Choice(30.0)) == 30.0  # after it, nothing is cut
    assert hold.mode is None


@pytest.mark.gpu
def test_on_a_gpu_a_slow_choice_is_called_twice_and_timed_above_the_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from torch._inductor.runtime.benchmarking import InductorBenchmarker

    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))
    bench = cutoff.pruned(InductorBenchmarker().benchmark_gpu)
    x, a = torch.rand(1 << 22, device="cuda"), torch.rand(1024, 1024, device="cuda")
    calls = {"fast": 0, "slow": 0}

    def fast() -> None:
        calls["fast"] += 1
        torch.add(x, 1.0)

    def slow() -> None:  # some 20x the add
        calls["slow"] += 1
        for _ in range(8):
            torch.mm(a, a)

    with cutoff.region(SELECTION, "test"):
        fast_ms = bench(fast)
        slow_ms = bench(slow)
        before = calls["fast"]
        bench(fast)
    assert calls["slow"] <= 2 and slow_ms > cutoff.RATIO * fast_ms, (calls, slow_ms, fast_ms)
    assert calls["fast"] - before > 2 + 6  # the fast one again: near the best, benchmarked in full
    assert [e["cut"] for e in _cutoffs(tmp_path / "ledger.jsonl")] == [1]
