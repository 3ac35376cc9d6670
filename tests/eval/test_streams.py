"""Every stream's work in the figure (okgit.eval.worker.timing, okgit.eval.parent.streams), on the CPU.

The timer's protocol runs here against a simulated device: events read a clock the test moves,
and work a candidate leaves "on another stream" is a callback that runs only at the next
device-wide synchronize, the way a side stream's kernels finish whenever the device gets to them.
The GPU cases (tests/ops/gpu, tests/eval/test_eval_gpu.py) run the same checks on real streams."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

from okgit.eval.parent.streams import FENCE_MIN_US, check_streams
from okgit.eval.worker import timing


class FakeDevice:
    """Bound timing functions over CPU tensors; `pending` is work on a stream nobody waits for."""

    def __init__(self) -> None:
        self.clock_ms = 0.0
        self.pending: list[Callable[[], None]] = []
        self.main_selected = 0

    def synchronize(self) -> None:
        while self.pending:
            self.pending.pop(0)()

    def bound(self) -> dict[str, Any]:
        device = self

        class Event:
            def __init__(self) -> None:
                self.t = 0.0

        def record(event: Event, stream: Any) -> None:
            device.clock_ms += 0.01
            event.t = device.clock_ms

        def use_main() -> None:
            device.main_selected += 1

        return dict(new_event=Event, record=record, elapsed=lambda a, b: b.t - a.t, event_synchronize=lambda e: None,
                    stream=None, use_main=use_main, synchronize=self.synchronize, perf_counter=lambda: device.clock_ms,
                    zero_=torch.Tensor.zero_, copy_=torch.Tensor.copy_, clone=torch.Tensor.clone,
                    equal=torch.Tensor.equal, view=torch.Tensor.view, spin=lambda cycles: None)


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> FakeDevice:
    fake = FakeDevice()
    monkeypatch.setattr(timing, "_bound", fake.bound())
    return fake


def _time(fn: Callable[..., Any]) -> timing.Timed:
    sets = [[torch.randn(64)], [torch.randn(64)]]
    return timing.time_calls(fn, sets, warmup=2, samples=8, flush=torch.empty(16))


def test_an_honest_call_escapes_nothing(device: FakeDevice) -> None:
    def honest(x: torch.Tensor) -> torch.Tensor:
        device.clock_ms += 1.0  # its work, on the caller's stream
        return x * 2

    timed = _time(honest)
    assert timed.escaped == []
    assert len(timed.fenced) == timing.FENCED_SAMPLES and len(timed.wake_us) == timing.FENCED_SAMPLES
    assert all(f.all_us >= f.event_us for f in timed.fenced)
    assert len(timed.host_us) == 8
    # the caller's stream made current before every call, every clone and the batch
    assert device.main_selected >= 10 + len(timed.spot) + timing.FENCED_SAMPLES + 1
    assert not check_streams(_as_dict(timed)).device_wide


def test_outputs_written_after_the_call_returned_are_escaped_work(device: FakeDevice) -> None:
    def side_stream(x: torch.Tensor) -> torch.Tensor:
        y = torch.full_like(x, float("nan"))  # what the caller's stream sees at its end event

        def later() -> None:
            y.copy_(x * 2)

        device.pending.append(later)  # finished only when the whole device is synchronized
        return y

    timed = _time(side_stream)
    assert timed.escaped == [f"sample {s}" for s in sorted(int(e.split()[1]) for e in timed.escaped)]
    assert len(timed.escaped) == len(timed.spot) >= timing.SPOT_CHECKS, "every checked sample escaped"
    check = check_streams(_as_dict(timed))
    assert check.escaped and check.device_wide


def test_same_bits_tells_nan_from_nan_and_values_apart(device: FakeDevice) -> None:
    a = torch.tensor([1.0, float("nan"), 3.0])
    assert timing.same_bits(a, a.clone())
    assert not timing.same_bits(a, torch.tensor([1.0, float("nan"), 3.5]))
    assert timing.same_bits([a, 1], [a.clone(), 1])
    assert not timing.same_bits([a], [a, a])
    assert timing.same_bits(torch.tensor([1, 2]), torch.tensor([1, 2]))
    assert not timing.same_bits(a, a.double())


def _fenced(all_us: float, host_us: float, n: int = 5) -> list[dict[str, float]]:
    return [{"event_us": all_us, "all_us": all_us + 30.0, "host_us": host_us}] * n


def test_a_call_as_slow_fenced_as_its_launches_allow_keeps_its_samples() -> None:
    # 1000 us on its stream; fenced, the device waited 40 us for the host's launches
    honest = {"samples_us": [1000.0] * 9, "host_us": [45.0] * 9, "wake_us": [30.0] * 5, "fenced": _fenced(1040.0, 45.0)}
    check = check_streams(honest)
    assert not check.device_wide and check.runtime_us == 1000.0 and check.note() == ""


def test_work_hidden_before_the_start_event_is_timed_device_wide() -> None:
    # on its stream only 300 us; with every stream fenced 1000 us, the host launching in 20 us
    cheat = {"samples_us": [300.0] * 9, "host_us": [20.0] * 9, "wake_us": [30.0] * 5, "fenced": _fenced(1000.0, 20.0)}
    check = check_streams(cheat)
    assert check.device_wide and check.runtime_us == pytest.approx(1000.0)
    assert check.excess_us == pytest.approx(680.0)
    assert "timed device-wide" in check.note()


def test_a_loaded_host_inflating_the_host_time_buys_no_allowance_beyond_the_samples_own() -> None:
    # a call that sleeps on the host only when its stream is not held: the allowance is the smaller host time
    cheat = {"samples_us": [300.0] * 9, "host_us": [20.0] * 9, "wake_us": [30.0] * 5, "fenced": _fenced(1000.0, 700.0)}
    assert check_streams(cheat).device_wide


def test_noise_below_the_margin_is_not_a_finding() -> None:
    small = {"samples_us": [50.0] * 9, "host_us": [5.0] * 9, "wake_us": [30.0] * 5,
             "fenced": _fenced(50.0 + 5.0 + FENCE_MIN_US - 1.0, 5.0)}
    assert not check_streams(small).device_wide


def _as_dict(timed: timing.Timed) -> dict[str, Any]:
    from dataclasses import asdict

    return {"samples_us": timed.samples_us, "host_us": timed.host_us, "escaped": timed.escaped,
            "wake_us": timed.wake_us, "fenced": [asdict(f) for f in timed.fenced]}


def test_the_samples_alone_make_only_the_samples_calls(device: FakeDevice) -> None:
    """`checks=False` (the sweep's baselines, which no gate reads): warm-up and samples, nothing
    else; the full protocol adds its checked clones, fenced calls and the back-to-back batch."""
    calls = {"n": 0}

    def work(x: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        device.clock_ms += 1.0
        return x * 2

    sets = [[torch.randn(64)], [torch.randn(64)]]
    alone = timing.time_calls(work, sets, warmup=2, samples=8, flush=torch.empty(16), checks=False)
    assert calls["n"] == 10 and len(alone.samples_us) == 8 and alone.median_us > 0
    assert alone.spot == [] and alone.fenced == [] and alone.batch_calls == 0
    calls["n"] = 0
    full = timing.time_calls(work, sets, warmup=2, samples=8, flush=torch.empty(16))
    assert calls["n"] == 10 + timing.FENCED_SAMPLES + full.batch_calls and full.spot
    assert len(full.samples_us) == len(alone.samples_us)
