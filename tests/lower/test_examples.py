"""Every example op loads, runs, and gets correct template candidates at small, odd sizes
(and, through oprun, with every float constructor argument x1.5 as well)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from oprun import run_ops, small_knobs

from okgit.eval.types import Reference
from okgit.lower.trace import instantiate
from okgit.problem import Problem, load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))


def test_there_are_about_twenty_examples():
    assert len(EXAMPLES) >= 20


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_reference_runs_at_small_knobs(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    knobs = small_knobs(load_problem(path).knobs)
    vars(module).update(knobs)
    model = module.Model(*module.get_init_inputs())
    with torch.no_grad():
        out = model(*module.get_inputs())
    outs = out if isinstance(out, (tuple, list)) else [out]
    assert all(isinstance(o, torch.Tensor) for o in outs)


def interpreter_knobs(problem: Problem) -> dict[str, int]:
    """small_knobs, or, where the inputs there still hold over 100k elements (the 4-D ones, whose
    convolutions take the interpreter 10-25 s each), knobs >= 8 scaled smaller still: odd sizes
    at which each kernel runs the same lines, and every loop that runs twice at small_knobs twice;
    their batch at 3 (samples only add programs, the interpreter's time: several still, tiles of
    positions across them; at 15 or 17 these four examples took 13 of the fixture's 18 s)."""
    knobs = small_knobs(problem.knobs)
    _, _, inputs = instantiate(problem.source, {**problem.knobs, **knobs})
    if sum(x.numel() for x in inputs if isinstance(x, torch.Tensor)) <= 100_000:
        return knobs
    smaller = {k: min(v, (1 + 2 * v.bit_length()) | 1) for k, v in problem.knobs.items() if v >= 8}
    return {**smaller, "batch_size": 3} if "batch_size" in smaller else smaller


@pytest.fixture(scope="module")
def checked() -> dict[str, list[tuple[str, dict, str]]]:
    """Every template candidate of every example, judged in one interpreter process."""
    jobs, owners = [], []
    for path in EXAMPLES:
        problem = load_problem(path)
        ctx = Context(problem=problem, reference=Reference(device="cpu", timed=False), backend="triton", device="cpu")
        knobs = interpreter_knobs(problem)
        for proposal in plan(ctx):
            jobs.append((path, proposal.source, knobs))
            owners.append((path.stem, proposal.origin, proposal.source))
    out: dict[str, list[tuple[str, dict, str]]] = {p.stem: [] for p in EXAMPLES}
    for (stem, origin, source), result in zip(owners, run_ops(jobs, timeout=600)):
        out[stem].append((origin, result, source))
    return out


@pytest.mark.slow  # every example's candidates under the interpreter (one process)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_templates_cover_and_are_correct(path, checked):
    results = checked[path.stem]
    assert results, "no template candidate"
    for origin, result, _ in results:
        assert result["ok"], f"{origin}: {result['why']}"


# examples whose constructor takes a float the forward uses: the candidates read it from self
FLOAT_ATTRIBUTES = {
    "03_channel_bias_leaky_clamp": ["self.negative_slope", "self.scale"],
    "05_log_softmax_temperature": ["self.temperature"],
    "07_rms_norm_ops": ["self.eps"],
    "16_matmul_scale_residual": ["self.scale"],
    "19_own_triton_kernel": ["self.alpha", "self.beta"],
    "20_conv_instance_norm": ["self.eps"],
    "21_smooth_l1_loss": ["self.beta"],
}


@pytest.mark.slow  # shares the module's interpreter run
@pytest.mark.parametrize("stem", sorted(FLOAT_ATTRIBUTES))
def test_float_constructor_arguments_are_read_at_run_time(stem, checked):
    assert checked[stem]
    for origin, _, source in checked[stem]:
        forward = source.split("def forward")[-1]
        for attr in FLOAT_ATTRIBUTES[stem]:
            assert f"float({attr})" in forward, f"{origin}: {attr} is not read at run time"
