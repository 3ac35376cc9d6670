"""The evaluator's data path at real sizes, checked on the CPU: shape knobs that other globals
derive from, expected outputs beyond the judge's cache recomputed case by case, and a problem
that does not fit the host refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from okgit.errors import OkgitError
from okgit.eval.parent.local import LocalEvaluator
from okgit.eval.types import Status
from okgit.problem import load_problem

OPS = Path(__file__).parents[1] / "ops"

# KernelBench's level-2 style: a global derived from a knob at import
DERIVED = '''
import torch
import torch.nn as nn

batch_size = 64
in_channels = 3
out_channels = 16
height = width = 32
kernel_size = 3
bias_shape = (out_channels, 1, 1)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''


@pytest.mark.slow  # the real evaluator
def test_globals_derived_from_knobs_follow_them(evaluator, tmp_path):
    """Scaled down for the CPU and varied for extra shapes, out_channels changes bias_shape with it
    (with the knob set after import the reference failed: size 8 against 16)."""
    op = tmp_path / "derived.py"
    op.write_text(DERIVED)
    problem = load_problem(op, root=str(tmp_path))
    ref = evaluator.reference(problem)
    channels = {shape["out_channels"] for shape in ref.shapes}
    assert len(ref.shapes) >= 2 and len(channels) >= 2, ref.shapes
    result = evaluator.evaluate(problem, DERIVED)  # the reference as its own candidate: every call runs
    assert result.status is Status.rejected and result.error.gate == "backend_kernel", result.error


@pytest.mark.slow  # an evaluator of its own (no judge cache), and the real one's cache
def test_cases_beyond_the_judges_cache_are_computed_again(evaluator):
    """With no room to keep expected outputs, every case is drawn and computed again when it is
    checked: the verdicts are the same, and a wrong candidate is still caught."""
    problem = load_problem(OPS / "softmax.py", root=str(OPS))
    honest = (OPS / "softmax_triton.py").read_text()
    ev = LocalEvaluator(device="cpu", prestart=False, judge_cache_bytes=0)
    try:
        assert ev.prepared(problem).cached == []
        assert ev.evaluate(problem, honest).status is Status.correct
        wrong = honest.replace("return y", "return y * 1.001", 1)
        assert wrong != honest
        result = ev.evaluate(problem, wrong)
        assert result.status is Status.incorrect and result.error.gate == "seeds", result.error
    finally:
        ev.close()
    assert "s0" in evaluator.prepared(problem).cached  # the default: room for them


@pytest.mark.slow  # `okgit eval` prepares the reference in a judge process before it refuses
def test_a_problem_that_does_not_fit_the_host_is_one_line(cli, tmp_path):
    done = cli("eval", str(OPS / "relu_triton.py"), "--ref", str(OPS / "relu.py"), "--device", "cpu", cwd=tmp_path,
               env={"OKGIT_HOST_MEMORY": "64M"})
    assert done.returncode == 1
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "does not fit in host memory" in lines[0] and "0.1 GiB available" in lines[0], lines
    assert "Traceback" not in done.stderr


# ReLU whose reference runs out of memory as many times as a count file says
RUNS_FULL = '''
import os
import torch
import torch.nn as nn

batch_size = 16
dim = 1024
COUNT = COUNT_PATH


class Model(nn.Module):
    def forward(self, x):
        left = int(open(COUNT).read()) if os.path.exists(COUNT) else 0
        if left > 0:
            open(COUNT, "w").write(str(left - 1))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB (a test's)")
        return torch.relu(x)


def get_inputs():
    return [torch.rand(batch_size, dim) - 0.5]


def get_init_inputs():
    return []
'''


@pytest.mark.slow  # an evaluator of its own, its judge preparing the reference
def test_a_preparation_that_does_not_fit_names_its_phase(tmp_path):
    """The reference's first case runs out of memory in float64 (then the native outputs stand
    alone) and again natively: one line names the phase, so a reader knows which case (or the
    timing) did not fit (KernelBench L1/96 on an 80 GB card: "this process held 64.61 GiB")."""
    count = tmp_path / "count"
    op = tmp_path / "runs_full.py"
    op.write_text(RUNS_FULL.replace("COUNT_PATH", repr(str(count))))
    count.write_text("2")
    ev = LocalEvaluator(device="cpu", prestart=False)
    try:
        with pytest.raises(OkgitError) as failed:
            ev.prepared(load_problem(op, root=str(tmp_path)))
    finally:
        ev.close()
    message = str(failed.value)
    assert count.read_text() == "0" and "\n" not in message
    assert "the reference does not run: the reference does not fit in memory in its phase 'reference: s0'" in message

@pytest.mark.slow  # an evaluator of its own (no judge cache: every check computes its case again)
def test_a_check_that_does_not_fit_is_judged_again_and_keeps_its_judge(tmp_path):
    """A check the judge could not fit is judged once more in a fresh worker; a second such failure
    is an `error` that says so in one line. Either way the judge stays (the failed check's memory
    went with it) and judges the next evaluation, without preparing the reference again."""
    count = tmp_path / "count"
    op = tmp_path / "runs_full.py"
    op.write_text(RUNS_FULL.replace("COUNT_PATH", repr(str(count))))
    problem = load_problem(op, root=str(tmp_path))
    honest = (OPS / "relu_triton.py").read_text()
    ev = LocalEvaluator(device="cpu", prestart=False, judge_cache_bytes=0)
    try:
        judge = ev.prepared(problem).judge
        count.write_text("1")
        once = ev.evaluate(problem, honest)
        assert count.read_text() == "0"  # the judge's check called the reference: it raised there
        assert once.status is Status.correct, once.error
        count.write_text("2")
        twice = ev.evaluate(problem, honest)
        assert count.read_text() == "0"
        assert twice.status is Status.error and twice.error.gate == "judge", twice.error
        assert "twice" in twice.error.message and "does not fit in memory" in twice.error.message, twice.error
        assert "\n" not in twice.error.message
        again = ev.evaluate(problem, honest)
        assert again.status is Status.correct, again.error
        assert ev.prepared(problem).judge is judge and judge.alive()
    finally:
        ev.close()


UNSEEDED = '''
import random
import torch
import torch.nn as nn

batch_size = 16
dim = 256


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(batch_size, dim) + random.random()]  # Python's generator: not torch.manual_seed's


def get_init_inputs():
    return []
'''


@pytest.mark.slow  # `okgit eval` prepares the reference in a judge process before it refuses
def test_inputs_that_the_seed_does_not_fix_are_refused_in_one_line(cli, tmp_path):
    """The judge and each worker draw a case's inputs apart: a get_inputs() whose values the seed
    does not fix would have every candidate judged against other inputs. The judge draws each
    case twice while it prepares, and refuses the op in one line."""
    op = tmp_path / "unseeded.py"
    op.write_text(UNSEEDED)
    done = cli("eval", str(OPS / "relu_triton.py"), "--ref", str(op), "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 1
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "drew different inputs twice under the same seed" in lines[0], lines
    assert "Traceback" not in done.stderr


def test_a_memory_limit_asked_for_is_each_workers_budget_exactly():
    """Unasked, a worker may hold torch and its device plus one case (at least the pool's floor);
    asked for (a machine shared with other work), the limit is the budget, also for large cases."""
    from okgit.eval.parent import memory

    gib = 2**30
    asked = LocalEvaluator(device="cpu", prestart=False, memory_limit_bytes=2 * gib)
    derived = LocalEvaluator(device="cpu", prestart=False)
    try:
        assert asked.worker_budget(2 * gib, 10 * gib) == 2 * gib
        assert derived.worker_budget(gib, 10 * gib) == memory.HOST_BASE + 10 * gib
        assert derived.worker_budget(64 * gib, 0) == 64 * gib
    finally:
        asked.close()
        derived.close()
