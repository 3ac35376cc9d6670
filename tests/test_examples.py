"""Every example op loads, runs, and gets correct template candidates at small, odd sizes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from oprun import run_ops, small_knobs

from okgit.eval.types import Reference
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


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


@pytest.fixture(scope="module")
def checked() -> dict[str, list[tuple[str, dict]]]:
    """Every template candidate of every example, judged in one interpreter process."""
    jobs, owners = [], []
    for path in EXAMPLES:
        problem = load_problem(path)
        ctx = Context(problem=problem, reference=Reference(device="cpu", timed=False), backend="triton", device="cpu")
        for proposal in plan(ctx):
            jobs.append((path, proposal.source, small_knobs(problem.knobs)))
            owners.append((path.stem, proposal.origin))
    out: dict[str, list[tuple[str, dict]]] = {p.stem: [] for p in EXAMPLES}
    for (stem, origin), result in zip(owners, run_ops(jobs, timeout=600)):
        out[stem].append((origin, result))
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_templates_cover_and_are_correct(path, checked):
    results = checked[path.stem]
    assert results, "no template candidate"
    for origin, result in results:
        assert result["ok"], f"{origin}: {result['why']}"
