"""The column layout of row reductions over a dim that is not the innermost: proposed beside
the row layout, and every candidate judged correct by the real evaluator under the Triton
interpreter (ties and NaN included, where torch's rules are exact)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from okgit.eval.parent.local import LocalEvaluator
from okgit.eval.types import Reference, Status
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
COLUMN_INTENT = "column layout: contiguous inner axis per program"
HEADER = "import torch\nimport torch.nn as nn\n\n"


def op_file(tmp_path: Path, name: str, init: str, forward: str, inputs: str, init_inputs: str = "[]",
            knobs: str = "a = 6\nb = 75\nc = 100") -> Path:
    """An op file; the default sizes give the column kernel several chunks along the folded dim
    and several programs along the inner one, each with a masked tail."""
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(f"""
        class Model(nn.Module):
            def __init__(self{init}):
                super().__init__()
                {"self.scale = scale" if init else "pass"}

            def forward(self, x):
                return {forward}

        {knobs.replace(chr(10), chr(10) + "        ")}

        def get_inputs():
            {inputs}

        def get_init_inputs():
            return {init_inputs}
        """))
    return path


def op_files(tmp_path: Path) -> dict[str, Path]:
    return {
        "sum_dim0_2d": op_file(tmp_path, "sum_dim0_2d", "", "x.sum(dim=0)", "return [torch.randn(b, c)]",
                               knobs="b = 150\nc = 100"),
        "max_keepdim": op_file(tmp_path, "max_keepdim", "", "torch.max(x, dim=1, keepdim=True)",
                               "return [torch.randn(a, b, c)]"),
        # values 0..2 tie everywhere; about one column in five holds no NaN
        "argmin_ties_nan": op_file(tmp_path, "argmin_ties_nan", "", "torch.argmin(x, dim=1), x.amax(dim=1)", (
            "x = torch.randint(0, 3, (a, b, c)).float()\n"
            "            x[torch.rand(a, b, c) < 0.02] = float('nan')\n"
            "            return [x]")),
        "mean_prologue": op_file(tmp_path, "mean_prologue", ", scale", "(x * self.scale + 1).mean(dim=1)",
                                 "return [torch.randn(a, b, c)]", init_inputs="[0.7]"),
        # a normalisation: one pass for the max, one for the sum, one to store
        "softmax_dim1": op_file(tmp_path, "softmax_dim1", "", "torch.softmax(x, dim=1)", "return [torch.randn(a, b, c)]"),
    }


def ctx_for(path: Path) -> Context:
    return Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton", device="cpu")


def judge(evaluator: LocalEvaluator, path: Path) -> list[tuple[str, str]]:
    """(origin, why) of each template candidate of `path` the evaluator does not call correct.
    Asserts both layouts are offered, the column layout first."""
    problem = load_problem(path)
    proposals = plan(ctx_for(path))
    assert [p.origin for p in proposals] == ["template:columns", "template:rows"]
    assert COLUMN_INTENT in proposals[0].intent and COLUMN_INTENT not in proposals[1].intent
    bad = []
    for p in proposals:
        result = evaluator.evaluate(problem, p.source)
        if result.status is not Status.correct:
            bad.append((p.origin, f"{result.status.value}: {result.error}"))
    return bad


@pytest.mark.slow
@pytest.mark.parametrize("name", ["09_mean_middle_dim", "11_argmax_dim"])
def test_examples_get_a_correct_column_layout(evaluator, name):
    assert not judge(evaluator, EXAMPLES / f"{name}.py")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sum_dim0_2d", "max_keepdim", "argmin_ties_nan", "mean_prologue", "softmax_dim1"])
def test_strided_reductions_get_a_correct_column_layout(evaluator, tmp_path, name):
    assert not judge(evaluator, op_files(tmp_path)[name])


@pytest.mark.slow
def test_the_column_kernel_reads_tiles_along_the_contiguous_axis(tmp_path):
    source = plan(ctx_for(op_files(tmp_path)["mean_prologue"]))[0].source
    kernel = source.split("def fused_columns_0_kernel")[1].split("\ndef ")[0]
    assert "j = (tl.program_id(0) % blocks) * BLOCK_J + tl.arange(0, BLOCK_J)[None, :]" in kernel
    assert "col = start + tl.arange(0, BLOCK_R)[:, None]" in kernel
    assert "base = outer * s0 + j" in kernel  # unit stride along j: each tile row is contiguous
    assert "tl.sum(acc0, axis=0, keep_dims=True)" in kernel
    assert "c0" in kernel and "float(self.scale)" in source  # the prologue's constant is read at run time
    for name in ("BLOCK_J", "BLOCK_R", "NUM_WARPS"):
        assert re.search(rf"^FUSED_COLUMNS_0_{name}: int = \d+$", source, flags=re.MULTILINE)


@pytest.mark.parametrize("shape, dim", [("(a, b)", "-1"), ("(a, b, c)", "2"), ("(a, b, 1)", "1")])
def test_an_innermost_reduction_gets_no_column_layout(tmp_path, shape, dim):
    """Reduced dims followed by nothing but size-1 dims are already contiguous: one layout."""
    path = op_file(tmp_path, "inner", "", f"x.sum(dim={dim}) + torch.argmax(x, dim={dim})",
                   f"return [torch.randn{shape}]", knobs="a = 6\nb = 75\nc = 10")
    proposals = plan(ctx_for(path))
    assert [p.origin for p in proposals] == ["template:rows"]
    assert "fused_columns" not in proposals[0].source and COLUMN_INTENT not in proposals[0].intent
