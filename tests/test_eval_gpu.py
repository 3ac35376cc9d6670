"""GPU-only checks of the evaluator: timing is claimed, and cheats that only show when timed are
caught. Skipped without CUDA; run on the GPU machine (bench/eval.py holds the figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from okgit.eval.local import LocalEvaluator  # noqa: E402
from okgit.eval.types import Status  # noqa: E402
from okgit.problem import Problem, load_problem  # noqa: E402

OPS = Path(__file__).parent / "ops"


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator(device="cuda")
    yield ev
    ev.close()


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


def test_honest_kernel_is_timed(evaluator, big_relu):
    result = evaluator.evaluate(big_relu, (OPS / "relu_triton.py").read_text())
    assert result.status is Status.correct, result.error
    assert result.timed and result.runtime_us and result.ref_runtime_us and result.speedup
    assert result.profile and result.profile.roofline_position and result.profile.top_kernels
    assert any(k.custom for k in result.profile.top_kernels)


def test_reference_has_floor(evaluator, big_relu):
    ref = evaluator.reference(big_relu)
    assert ref.timed and ref.runtime_us and ref.profile.floor_us
    assert ref.runtime_us >= 0.9 * ref.profile.floor_us
    assert ref.hardware.get("copy_bandwidth", 0) > 1e11


@pytest.mark.parametrize("name,gates", [
    ("side_stream", {"side_stream", "timed_outputs"}),
    ("cache_when_timed", {"timed_outputs"}),
    ("skip_after_warmup", {"timed_outputs", "repeat"}),
])
def test_timed_cheats_rejected(evaluator, big_relu, name, gates):
    result = evaluator.evaluate(big_relu, (OPS / "gpu" / f"{name}.py").read_text())
    assert result.status in (Status.rejected, Status.incorrect), result
    assert result.error.gate in gates, result.error


def test_compare_honest_vs_reference(evaluator, big_relu):
    cmp = evaluator.compare(big_relu, (OPS / "relu_triton.py").read_text(), rounds=3)
    assert len(cmp.baseline_us) == 3 and cmp.noise < 0.2


def test_host_latency_before_launch_is_not_timed():
    """A loaded host that takes 150 us to launch a ~30 us kernel: the spin before the start
    event lets the launch queue first, so the events time the kernel, not the host."""
    import time

    from okgit.eval import timing

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
