"""The column layout of row reductions over a dim that is not the innermost: proposed beside
the row layout, every candidate right against its reference under the Triton interpreter (ties
and NaN included, where torch's rules are exact), and judged correct by the real evaluator on
the hardest of them."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import torch
from oprun import run_ops, small_knobs

from okgit.eval.types import Reference, Status
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
COLUMN_INTENT = "column layout: contiguous inner axis per program"
HEADER = "import torch\nimport torch.nn as nn\n\n"


def op_file(tmp_path: Path, name: str, init: str, forward: str, inputs: str, init_inputs: str = "[]",
            knobs: str = "a = 3\nb = 75\nc = 20", params: str = "pass") -> Path:
    """An op file; the default sizes give the column kernel several chunks along the folded dim
    and several programs along the inner one, each with a masked tail: 75 folded elements in
    chunks of 16, 20 inner ones in tiles of 16 (at 100 inner and 6 outer the interpreter ran 7
    times the programs for the same cases). `params`: one line of the constructor's (parameters
    the forward reads)."""
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(f"""
        class Model(nn.Module):
            def __init__(self{init}):
                super().__init__()
                {"self.scale = scale" if init else "pass"}
                {params}

            def forward(self, x):
                return {forward}

        {knobs.replace(chr(10), chr(10) + "        ")}

        def get_inputs():
            {inputs}

        def get_init_inputs():
            return {init_inputs}
        """))
    return path


def op_files(tmp_path: Path, knobs: str = "a = 3\nb = 75\nc = 20") -> dict[str, Path]:
    """The ops; `knobs` sizes the three-dimensional ones."""
    return {
        "sum_dim0_2d": op_file(tmp_path, "sum_dim0_2d", "", "x.sum(dim=0)", "return [torch.randn(b, c)]",
                               knobs="b = 150\nc = 20"),
        "max_keepdim": op_file(tmp_path, "max_keepdim", "", "torch.max(x, dim=1, keepdim=True)",
                               "return [torch.randn(a, b, c)]", knobs=knobs),
        # values 0..2 tie everywhere; about one column in five holds no NaN
        "argmin_ties_nan": op_file(tmp_path, "argmin_ties_nan", "", "torch.argmin(x, dim=1), x.amax(dim=1)", (
            "x = torch.randint(0, 3, (a, b, c)).float()\n"
            "            x[torch.rand(a, b, c) < 0.02] = float('nan')\n"
            "            return [x]"), knobs=knobs),
        "mean_prologue": op_file(tmp_path, "mean_prologue", ", scale", "(x * self.scale + 1).mean(dim=1)",
                                 "return [torch.randn(a, b, c)]", init_inputs="[0.7]", knobs=knobs),
        # a normalisation: one pass for the max, one for the sum, one to store
        "softmax_dim1": op_file(tmp_path, "softmax_dim1", "", "torch.softmax(x, dim=1)", "return [torch.randn(a, b, c)]", knobs=knobs),
        # parameters varying along one part of the domain each: the folded dim, the inner, the outer
        "softmax_by_parts": op_file(
            tmp_path, "softmax_by_parts", "", "torch.softmax(x, dim=1) * self.w_red + self.w_inner + self.w_outer",
            "return [torch.randn(a, b, c)]", knobs=knobs,
            params="self.w_red, self.w_inner, self.w_outer = (nn.Parameter(torch.randn(*s)) for s in ((b, 1), (c,), (a, 1, 1)))"),
    }


def ctx_for(path: Path) -> Context:
    return Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton", device="cpu")


EXAMPLE_NAMES = ["09_mean_middle_dim", "11_argmax_dim"]
OP_NAMES = ["sum_dim0_2d", "max_keepdim", "argmin_ties_nan", "mean_prologue", "softmax_dim1", "softmax_by_parts"]
LAYOUTS = ["template:columns", "template:rows"]
RESIDENT = re.compile(r"^(FUSED_COLUMNS_0_RESIDENT_TILE: int = )(\d+)$", re.MULTILINE)
OTHER_PATH = "template:columns, its other path"  # whole columns in registers where it streamed, or back


def other_path(source: str) -> str:
    """The column candidate with its other path: streamed (0) where it kept whole columns in
    registers, whole columns where it streamed."""
    return RESIDENT.sub(lambda m: m[1] + ("0" if int(m[2]) else "4096"), source)


def paths(tmp_path: Path) -> dict[str, Path]:
    return {**{n: EXAMPLES / f"{n}.py" for n in EXAMPLE_NAMES}, **op_files(tmp_path)}


@pytest.mark.parametrize("name", EXAMPLE_NAMES + OP_NAMES)
def test_both_layouts_are_offered_the_column_layout_first(tmp_path, name):
    proposals = plan(ctx_for(paths(tmp_path)[name]))
    assert [p.origin for p in proposals] == LAYOUTS
    assert COLUMN_INTENT in proposals[0].intent and COLUMN_INTENT not in proposals[1].intent


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """Each layout of each op, run against its reference in one interpreter process (oprun):
    the tolerance, every output element written, two calls alike, inputs unchanged, and the
    constructor's floats scaled. The ops run at their own sizes, the examples at small, odd ones:
    there only the column candidate's other path, both layouts as proposed being
    tests/lower/test_examples.py's jobs already (every example's candidates at small_knobs)."""
    jobs, keys = [], []
    for name, path in paths(tmp_path_factory.mktemp("columns")).items():
        example = name in EXAMPLE_NAMES
        knobs = small_knobs(load_problem(path).knobs) if example else {}
        for proposal in plan(ctx_for(path)):
            if not example:
                jobs.append((path, proposal.source, knobs))
                keys.append((name, proposal.origin))
            if proposal.origin == "template:columns":
                jobs.append((path, other_path(proposal.source), knobs))
                keys.append((name, OTHER_PATH))
    return dict(zip(keys, run_ops(jobs, timeout=900)))


@pytest.mark.slow  # one interpreter process runs all of the module's candidates
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_examples_get_a_correct_column_layout(checked, name):
    """The column candidate's other path (both layouts as proposed: test_examples's
    test_templates_cover_and_are_correct, the same jobs)."""
    result = checked[name, OTHER_PATH]
    assert result["ok"], result["why"]


@pytest.mark.slow  # one interpreter process runs all of the module's candidates
@pytest.mark.parametrize("layout", [*LAYOUTS, OTHER_PATH])
@pytest.mark.parametrize("name", OP_NAMES)
def test_strided_reductions_get_a_correct_column_layout(checked, name, layout):
    result = checked[name, layout]
    assert result["ok"], result["why"]


@pytest.mark.slow  # the real evaluator's gates, on the op where torch's rules are exact (ties, NaN)
def test_the_evaluator_judges_both_layouts_of_an_argmin_with_ties_and_nan_correct(evaluator, tmp_path):
    # still two chunks along the folded dim and two programs along the inner one, masked tails
    path = op_files(tmp_path, knobs="a = 2\nb = 37\nc = 20")["argmin_ties_nan"]
    problem = load_problem(path)
    proposals = plan(ctx_for(path))
    assert [p.origin for p in proposals] == LAYOUTS
    for p in proposals:
        result = evaluator.evaluate(problem, p.source)
        assert result.status is Status.correct, (p.origin, result.status.value, result.error)


def test_the_column_kernel_reads_tiles_along_the_contiguous_axis(tmp_path):
    source = plan(ctx_for(op_files(tmp_path)["mean_prologue"]))[0].source
    kernel = source.split("def fused_columns_0_kernel")[1].split("\ndef ")[0]
    assert "j = (tl.program_id(0) % blocks) * BLOCK_J + tl.arange(0, BLOCK_J)[None, :]" in kernel
    assert "col = start + tl.arange(0, BLOCK_R)[:, None]" in kernel
    assert "base = outer * s0 + j" in kernel  # unit stride along j: each tile row is contiguous
    assert re.search(r"tl\.sum\(acc\d+, axis=0, keep_dims=True\)", kernel)  # the streamed path's lanes folded once
    assert "c0" in kernel and "float(self.scale)" in source  # the prologue's constant is read at run time
    for name in ("BLOCK_J", "BLOCK_R", "NUM_WARPS"):
        assert re.search(rf"^FUSED_COLUMNS_0_{name}: int = \d+$", source, flags=re.MULTILINE)


def test_an_operand_varying_along_one_part_is_read_at_that_parts_position(tmp_path):
    """A parameter over the folded dim is read at `col`, one over the inner dims at `j`, one over
    the outer dims at `outer`: no division of the flat offset by runtime sizes per element (its
    values: test_strided_reductions_get_a_correct_column_layout)."""
    source = plan(ctx_for(op_files(tmp_path)["softmax_by_parts"]))[0].source
    kernel = source.split("def fused_columns_0_kernel")[1].split("\ndef ")[0]
    loads = re.findall(r"tl\.load\((in\d+_ptr) \+ ([^,)]+)(?:, mask=(\w+))?", kernel)
    offsets = {ptr: (offset, mask) for ptr, offset, mask in loads if ptr != "in0_ptr"}
    assert sorted(offsets.values()) == [("col", "mask"), ("j", "row_mask"), ("outer", "")], loads
    assert "//" not in "".join(offset for _, offset, _ in loads)


def test_columns_read_more_than_once_are_kept_whole_in_registers(tmp_path):
    """A softmax reads its column twice streamed (max and sum, then the outputs): by default its
    candidate keeps whole columns in registers (one read); a mean reads its columns once and keeps
    streaming. The launcher takes whole columns only where a tile of them, 16 inner positions
    wide, fits the setting."""
    ops = op_files(tmp_path)
    soft, mean = (plan(ctx_for(ops[n]))[0].source for n in ("softmax_dim1", "mean_prologue"))
    assert RESIDENT.search(soft)[2] == "4096" and RESIDENT.search(mean)[2] == "0"
    kernel = soft.split("def fused_columns_0_kernel")[1].split("\ndef ")[0]
    one_pass = kernel.split("if ONE_PASS:")[1].split("else:")[0]
    assert one_pass.count("tl.load(") == 1 and "for start" not in one_pass
    assert "one_pass = triton.next_power_of_2(n_red) * 16 <= FUSED_COLUMNS_0_RESIDENT_TILE" in soft
    assert "block_j = min(block_j, FUSED_COLUMNS_0_RESIDENT_TILE // block_r)" in soft


@pytest.mark.parametrize("shape, dim", [("(a, b)", "-1"), ("(a, b, c)", "2"), ("(a, b, 1)", "1")])
def test_an_innermost_reduction_gets_no_column_layout(tmp_path, shape, dim):
    """Reduced dims followed by nothing but size-1 dims are already contiguous: one layout."""
    path = op_file(tmp_path, "inner", "", f"x.sum(dim={dim}) + torch.argmax(x, dim={dim})",
                   f"return [torch.randn{shape}]", knobs="a = 6\nb = 75\nc = 10")
    proposals = plan(ctx_for(path))
    assert [p.origin for p in proposals] == ["template:rows"]
    assert "fused_columns" not in proposals[0].source and COLUMN_INTENT not in proposals[0].intent


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("resident", [4096, 0], ids=["whole_columns", "streamed"])
def test_on_a_gpu_a_channel_softmax_is_correct_and_timed_on_both_paths(tmp_path, gpu_evaluator, resident):
    """A softmax over 128 channels with an elementwise tail (L2/91's epilogue) at tens of MB,
    compiled by the GPU's own Triton and judged there, its columns whole in registers (the
    default) and streamed."""
    path = op_file(tmp_path, "channel_softmax", "", "torch.sigmoid((torch.softmax(x, dim=1) + 0.5) * 2.0)",
                   "return [torch.randn(a, b, c, c)]", knobs="a = 8\nb = 128\nc = 96")
    problem = load_problem(path)
    ctx = Context(problem=problem, reference=Reference(device="cuda", timed=True), backend="triton", device="cuda")
    source = next(p.source for p in plan(ctx) if p.origin == "template:columns")
    source = RESIDENT.sub(lambda m: m[1] + str(resident), source)
    result = gpu_evaluator.evaluate(problem, source)
    assert result.status is Status.correct, result.error
    assert result.timed and result.runtime_us and result.speedup, result
