"""GPU-only checks of the evaluator: timing is claimed, and cheats that only show when timed are
caught. Skipped without CUDA; run on the GPU machine (bench/eval.py holds the figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from okgit.eval.types import Status  # noqa: E402
from okgit.problem import Problem, load_problem  # noqa: E402

OPS = Path(__file__).parents[1] / "ops"


@pytest.fixture(scope="module")
def big_relu() -> Problem:
    # 256 MiB of input: each ReLU launch runs ~130 us on an H200, far above the ~25 us it takes
    # to launch, so work escaping the timed stream piles up behind it. At 64 MiB (~32 us a
    # launch) the side-stream cheat's 30 launches were host-bound: its events spanned the
    # launches, its time was about its real cost (0.04x the reference, no false speedup) and
    # the H200 judged it `correct` -- a regime where hiding work gains nothing.
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    source = problem.source.replace("dim = 16384", "dim = 16384 * 256")
    return load_problem(OPS / "relu.py", source=source, root=str(OPS))


def test_honest_kernel_is_timed(gpu_evaluator, big_relu):
    result = gpu_evaluator.evaluate(big_relu, (OPS / "relu_triton.py").read_text())
    assert result.status is Status.correct, result.error
    assert result.timed and result.runtime_us and result.ref_runtime_us and result.speedup
    assert result.profile and result.profile.roofline_position and result.profile.top_kernels
    assert any(k.custom for k in result.profile.top_kernels)


def test_reference_has_floor(gpu_evaluator, big_relu):
    ref = gpu_evaluator.reference(big_relu)
    assert ref.timed and ref.runtime_us and ref.profile.floor_us
    assert ref.runtime_us >= 0.9 * ref.profile.floor_us
    assert ref.hardware.get("copy_bandwidth", 0) > 1e11


@pytest.mark.parametrize("name,gates", [
    ("side_stream", {"streams"}),
    ("cache_when_timed", {"timed_outputs"}),
    ("skip_after_warmup", {"timed_outputs", "repeat"}),
])
def test_timed_cheats_rejected(gpu_evaluator, big_relu, name, gates):
    result = gpu_evaluator.evaluate(big_relu, (OPS / "gpu" / f"{name}.py").read_text())
    assert result.status in (Status.rejected, Status.incorrect), result
    assert result.error.gate in gates, result.error


# Work on other streams (docs/evaluation.md, "Streams"): with the roofline gate off, so that only the
# stream checks can catch each variant; each is rejected at `streams` or timed with its work inside.
STREAM_VARIANTS = [("side_stream", "triton"), ("side_stream_unordered", "triton"), ("graph_side_stream", "triton"),
                   ("cuda_own_stream", "cuda")]


@pytest.mark.parametrize("name,backend", STREAM_VARIANTS)
def test_work_on_other_streams_is_rejected_or_timed_whole(gpu_evaluator, big_relu, name, backend, monkeypatch):
    from okgit.eval.parent.gates.timed import NO_ROOFLINE

    monkeypatch.setenv(NO_ROOFLINE, "1")
    honest = gpu_evaluator.evaluate(big_relu, (OPS / "relu_triton.py").read_text())
    result = gpu_evaluator.evaluate(big_relu, (OPS / "gpu" / f"{name}.py").read_text(), backend=backend)
    if result.status is Status.rejected:
        assert result.error.gate == "streams", result.error
        return
    assert result.status is Status.correct, result.error
    note = next(g.detail for g in result.gates if g.name == "streams")
    assert "timed device-wide" in note, result.gates
    assert result.runtime_us >= 0.9 * honest.runtime_us, (result.runtime_us, honest.runtime_us)


def test_the_screen_times_a_variant_as_its_evaluation_does(gpu_evaluator, big_relu):
    """The search's screen (okgit.search.driver): a fast evaluation's timing alone, no check; the
    same code's median as its evaluation's within the noise; a file that does not parse is left
    to the evaluation (None)."""
    source = (OPS / "relu_triton.py").read_text()
    result = gpu_evaluator.evaluate(big_relu, source)
    assert result.status is Status.correct and result.runtime_us, result.error
    us = gpu_evaluator.screen(big_relu, source)
    assert us is not None and abs(us - result.runtime_us) <= 0.1 * result.runtime_us, (us, result.runtime_us)
    assert gpu_evaluator.screen(big_relu, "def (\n" + source) is None


def test_two_streams_joined_back_are_honest(gpu_evaluator, big_relu):
    result = gpu_evaluator.evaluate(big_relu, (OPS / "gpu" / "two_streams_joined.py").read_text())
    assert result.status is Status.correct, result.error
    assert not next(g.detail for g in result.gates if g.name == "streams"), result.gates


def test_compare_honest_vs_reference(gpu_evaluator, big_relu):
    cmp = gpu_evaluator.compare(big_relu, (OPS / "relu_triton.py").read_text(), rounds=3)
    assert len(cmp.baseline_us) == 3 and cmp.noise < 0.2


def test_compare_after_a_thorough_check_of_the_same_code_checks_it_no_more(gpu_evaluator, big_relu, monkeypatch):
    """The final gate checks its candidate thoroughly, then compares: the comparison's own fast
    check would repeat a subset of what just passed. Other code is still checked first."""
    source = (OPS / "relu_triton.py").read_text()
    assert gpu_evaluator.evaluate(big_relu, source, mode="thorough").status is Status.correct
    modes: list[str] = []
    real = gpu_evaluator.evaluate
    monkeypatch.setattr(gpu_evaluator, "evaluate", lambda *a, **kw: modes.append(kw.get("mode", "fast")) or real(*a, **kw))
    gpu_evaluator.compare(big_relu, source, rounds=2)
    assert modes == []
    gpu_evaluator.compare(big_relu, source + "\n# another candidate\n", rounds=2)
    assert modes == ["fast"]


def test_host_latency_before_launch_is_not_timed():
    """A loaded host that takes 150 us to launch a ~30 us kernel: the spin before the start
    event lets the launch queue first, so the events time the kernel, not the host."""
    import time

    from okgit.eval.worker import timing

    timing.bind()
    flush = timing.l2_flush_buffer("cuda")
    sets = [[torch.rand(16 * 2**20, device="cuda")] for _ in range(3)]

    def slow_host(x):
        t = time.perf_counter()
        while time.perf_counter() - t < 150e-6:
            pass
        return x * 2

    plain = timing.time_calls(lambda x: x * 2, sets, warmup=5, samples=30, flush=flush).median_us
    slow = timing.time_calls(slow_host, sets, warmup=5, samples=30, flush=flush).median_us
    assert plain < 100 and slow < plain * 1.15 + 5, (plain, slow)


def test_a_timing_no_judge_checks_holds_its_input_sets_and_two_outputs_at_most():
    """An output eight times its input, as KernelBench L1/63's convolution (1 GiB in, 7.97 GiB out):
    a timing no judge checks (a final-gate round) holds its input sets and their copies, the output
    in flight and the clone under the stream check; a checked evaluation's keeps a clone per checked
    sample until the judge has seen them (that round ran out of memory on an 80 GB H100 holding
    three of them beside the output in flight). tests/eval/test_timing_memory.py is the CPU's."""
    import types

    from okgit.eval.protocol.jobs import Case, Job, Timing
    from okgit.eval.worker import timing
    from okgit.eval.worker.measure import set_count, time_model

    timing.bind()
    n = 2**24  # 64 MiB of input, 512 MiB of output
    module = types.ModuleType("wide_op")
    module.get_inputs = lambda: [torch.randn(n)]
    seeds = [Case(id=f"s{i}", kind="seed", shape=0, seed=i) for i in range(4)]
    sets = set_count(4 * n, len(seeds))
    inputs, output = 2 * sets * 4 * n, 8 * 4 * n  # the sets and the timer's copies; one output
    peaks = {}
    for check in (False, True):
        job = Job(role="candidate", source_path="", device="cuda", backend="triton", root=None, check=check,
                  timing=Timing(warmup=2, samples=10))
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        _, spot = time_model(torch, lambda x: x.repeat(8), module, seeds, job, "cuda")
        peaks[check] = torch.cuda.max_memory_allocated() - base
        assert len(spot) == (max(timing.SPOT_CHECKS, sets) if check else 0)
        del spot
    flush = 2**28  # the L2 flush buffer (twice the L2) and the allocator's rounding, with room to spare
    assert peaks[False] <= inputs + 2 * output + flush, peaks
    assert peaks[True] >= inputs + (max(timing.SPOT_CHECKS, sets) + 1) * output, peaks


HUGE = '''
import torch
import torch.nn as nn

rows = 32769
cols = 65536  # 2**31 + 65536 elements: flat offsets past int32, compared chunk by chunk


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(rows, cols, dtype=torch.float16)]


def get_init_inputs():
    return []
'''

HUGE_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask) * 2
    tl.store(y_ptr + offs, tl.where(offs == n - 1 - WRONG_AT, y + 1.0, y), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        twice[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
        return y
'''


def test_outputs_past_two_to_the_31_elements_are_compared_on_the_device(gpu_evaluator, tmp_path):
    """A 4 GiB fp16 output: the honest kernel passes, and one wrong element at its very end is
    found, with its position, by the judge's chunked comparison."""
    op = tmp_path / "huge.py"
    op.write_text(HUGE)
    problem = load_problem(op, root=str(tmp_path))
    honest = gpu_evaluator.evaluate(problem, HUGE_KERNEL.replace("WRONG_AT", "-1"))
    assert honest.status is Status.correct, honest.error
    wrong = gpu_evaluator.evaluate(problem, HUGE_KERNEL.replace("WRONG_AT", "0"))
    assert wrong.status is Status.incorrect and wrong.error.gate == "seeds", wrong.error
    assert "1 of 2147549184 elements" in wrong.error.message and "(32768, 65535)" in wrong.error.message


def test_a_check_finds_room_beside_a_worker_after_its_timing(gpu_evaluator, tmp_path):
    """An input a tenth of the device: after the timing, the worker's allocator caches its input
    sets, their copies and the flush buffer, about six inputs' worth; the judge's check of a timed
    output computes the case again, in float64 too, about five. Together more than the device:
    the worker hands its cache back before each check and drops each timed output once judged
    (on an 80 GB H100, 2026-12-05, every check of KernelBench L1/39's timed outputs ran out of
    memory in the judge beside a worker holding 49 GiB)."""
    total = torch.cuda.mem_get_info()[1]
    cols = 65536
    rows = total // 10 // (4 * cols)
    op = tmp_path / "tenth.py"
    op.write_text(HUGE.replace("rows = 32769", f"rows = {rows}").replace("dtype=torch.float16", "dtype=torch.float32"))
    problem = load_problem(op, root=str(tmp_path))
    result = gpu_evaluator.evaluate(problem, HUGE_KERNEL.replace("WRONG_AT", "-1"))
    assert result.status is Status.correct, result.error
    assert result.timed and result.runtime_us


REMEMBERING = ["remember_fingerprint", "remember_full_hash", "remember_address", "remember_call_counter"]


@pytest.mark.parametrize("name", REMEMBERING)
def test_remembered_outputs_rejected_without_the_roofline(gpu_evaluator, big_relu, name, monkeypatch):
    """The four caches of tests/cases, at a size where the lookup would be all that is timed,
    with the roofline gate off (docs/evaluation.md, "Remembered outputs")."""
    import json

    monkeypatch.setenv("OKGIT_TEST_NO_ROOFLINE", "1")
    cases = Path(__file__).parents[1] / "cases"
    expected = json.loads((cases / name / "expected.json").read_text())
    result = gpu_evaluator.evaluate(big_relu, (cases / name / "candidate.py").read_text())
    if name == "remember_address" and result.correct:
        # in fast mode no timed sample puts the same contents in the same buffer twice: the
        # cache never hits, so it did the work; it must not look faster than the honest kernel
        honest = gpu_evaluator.evaluate(big_relu, (OPS / "relu_triton.py").read_text())
        assert result.runtime_us >= 0.9 * honest.runtime_us, (result.runtime_us, honest.runtime_us)
        return
    assert result.status.value == expected["status"] and result.error.gate == expected["gate"], result.error


def test_a_channels_last_convolution_is_judged_by_what_the_flags_allow(gpu_evaluator):
    """At KernelBench level-2 problem 87's sizes, cuDNN under PyTorch's default flags takes TF32
    kernels for the convolution in channels_last and not in NCHW: torch.compile's own kernels and
    okgit's channels-last template were both `incorrect` by the NCHW reference's error alone
    (6.3M of 528M elements, max 3.9e-4). The reference's error is now measured in both layouts;
    an honest channels-last candidate passes and one 1% off still fails."""
    problem = load_problem(OPS / "conv_sub_mish.py", root=str(OPS))
    source = (OPS / "gpu" / "conv_channels_last.py").read_text()
    honest = gpu_evaluator.evaluate(problem, source)
    assert honest.status is Status.correct, honest.error
    off = gpu_evaluator.evaluate(problem, source.replace("SCALE: float = 1.0", "SCALE: float = 1.01"))
    assert off.status is Status.incorrect, off.status
