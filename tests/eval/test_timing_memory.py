"""What a timing holds on the device between its calls (okgit.eval.worker.measure, okgit.eval.worker.timing),
on the CPU against the simulated device of tests/eval/test_streams.py.

An H100's final-gate round of KernelBench L1/63 (1 GiB inputs, four sets; 7.97 GiB outputs) ran out of
memory with 40 GiB allocated in its worker: three clones of checked samples' outputs, kept for a judge
that a round (no correctness check) never asks, and the output in flight. A timing nothing checks
now drops each clone once its stream check is done; a checked evaluation still keeps one clone per
checked sample for the judge's `timed_outputs`. The GPU test of the same is in test_eval_gpu.py."""

from __future__ import annotations

import types
import weakref
from typing import Any

import pytest
import torch
from test_streams import FakeDevice

from okgit.eval.protocol.jobs import Case, Job, Role, Timing
from okgit.eval.worker import measure, timing

WIDE = 8  # output elements per input element: a convolution's output next to its input


class Held:
    """The outputs a timing made that are still alive at each call: those the model returned and the
    timer's clones of them (recorded through the simulated device's bound `clone`)."""

    def __init__(self, device: FakeDevice, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
        self.n = n
        self.outputs: list[weakref.ref[torch.Tensor]] = []
        self.alive_at_call: list[int] = []
        bound = dict(timing._bound)

        def clone(t: torch.Tensor) -> torch.Tensor:
            copy = torch.Tensor.clone(t)
            if copy.numel() == WIDE * n:  # an output's clone, not an input set's
                self.outputs.append(weakref.ref(copy))
            return copy

        bound["clone"] = clone
        monkeypatch.setattr(timing, "_bound", bound)
        self.device = device

    def model(self, x: torch.Tensor) -> torch.Tensor:
        self.alive_at_call.append(sum(ref() is not None for ref in self.outputs))
        self.device.clock_ms += 1.0
        out = x.repeat(WIDE)
        self.outputs.append(weakref.ref(out))
        return out


def _time_model(held: Held, monkeypatch: pytest.MonkeyPatch, *, check: bool,
                role: Role = "candidate") -> list[tuple[Case, Any]]:
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda device: torch.empty(16))  # no device properties here
    module = types.ModuleType("wide_op")
    module.get_inputs = lambda: [torch.randn(held.n)]  # type: ignore[attr-defined]
    seeds = [Case(id=f"s{i}", kind="seed", shape=0, seed=i) for i in range(5)]
    job = Job(role=role, source_path="", device="cpu", backend="triton", root=None, check=check,
              timing=Timing(warmup=2, samples=10))
    _, spot = measure.time_model(torch, held.model, module, seeds, job, "cpu")
    return spot


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> FakeDevice:
    fake = FakeDevice()
    monkeypatch.setattr(timing, "_bound", fake.bound())
    return fake


@pytest.mark.parametrize("role,check", [("candidate", False), ("judge", True)])
def test_a_timing_no_judge_checks_keeps_no_earlier_output_alive(device: FakeDevice, monkeypatch, role: Role,
                                                                 check: bool) -> None:
    """A final-gate round or the search's screen (a candidate's job without checks), and the
    reference's timing in the judge: every call (samples, fenced calls, the back-to-back batch)
    starts with no output of an earlier call alive, its checked samples' clones included."""
    held = Held(device, monkeypatch, n=64)
    spot = _time_model(held, monkeypatch, check=check, role=role)
    assert spot == []
    assert len(held.alive_at_call) == 12 + timing.FENCED_SAMPLES + 10  # the same calls as a checked timing's
    assert max(held.alive_at_call) == 0, held.alive_at_call


def test_a_checked_timing_keeps_one_clone_per_checked_sample_for_the_judge(device: FakeDevice, monkeypatch) -> None:
    """A checked evaluation: the checked samples' clones wait for the judge, and nothing else does."""
    held = Held(device, monkeypatch, n=64)
    spot = _time_model(held, monkeypatch, check=True)
    checked = max(timing.SPOT_CHECKS, measure.set_count(64 * 4, 5))  # one per input set: five here
    assert len(spot) == checked and all(out.numel() == WIDE * 64 for _, out in spot)
    assert len({case.salt for case, _ in spot}) == checked
    assert max(held.alive_at_call) == checked, held.alive_at_call  # from the fenced calls on, all of them


@pytest.mark.parametrize("seeds", [5, 1])
def test_the_judge_counts_a_checked_timing_at_what_it_holds(device: FakeDevice, monkeypatch, seeds: int) -> None:
    """The judge sizes a candidate's checked timing by measure.checked_timing_bytes before it keeps its
    cached memory beside it (okgit.eval.judge.prepared.must_release): the real timing's peak, its input
    sets and the timer's copies of them, the clones it keeps and the output in flight, is that figure."""
    n = 64
    held = Held(device, monkeypatch, n=n)
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda device: torch.empty(16))
    drawn: list[int] = []
    module = types.ModuleType("wide_op")

    def get_inputs() -> list[torch.Tensor]:
        drawn.append(n)
        return [torch.randn(n)]

    module.get_inputs = get_inputs  # type: ignore[attr-defined]
    cases = [Case(id=f"s{i}", kind="seed", shape=0, seed=i) for i in range(seeds)]
    job = Job(role="candidate", source_path="", device="cpu", backend="triton", root=None, cases=cases,
              timing=Timing(warmup=2, samples=10))
    measure.time_model(torch, held.model, module, cases, job, "cpu")
    set_bytes, output_bytes = 4 * n, 4 * WIDE * n
    # each input set drawn once and copied into its slot; at each call the outputs still alive and its own
    peak = 2 * len(drawn) * set_bytes + (max(held.alive_at_call) + 1) * output_bytes
    timing_ahead = job.checked_timing()
    assert timing_ahead is not None
    assert measure.checked_timing_bytes(set_bytes, output_bytes, timing_ahead.seeds, timing_ahead.samples) == peak


def test_escaped_work_is_found_whether_the_clones_are_kept_or_not(device: FakeDevice) -> None:
    """Dropping a clone once compared changes nothing the stream check sees."""
    def side_stream(x: torch.Tensor) -> torch.Tensor:
        y = torch.full_like(x, float("nan"))
        device.pending.append(lambda: y.copy_(x * 2))  # written only at the next device-wide synchronize
        return y

    sets = [[torch.randn(64)], [torch.randn(64)]]
    for keep in (True, False):
        timed = timing.time_calls(side_stream, sets, warmup=2, samples=8, flush=torch.empty(16), keep_checked=keep)
        assert len(timed.escaped) == max(timing.SPOT_CHECKS, len(sets)), timed.escaped
        assert len(timed.spot) == (len(timed.escaped) if keep else 0)
