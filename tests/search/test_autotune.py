"""The autotune proposer: launch settings found in the source, varied one at a time, kept correct."""

from __future__ import annotations

from pathlib import Path

import pytest
from oprun import run_ops

from okgit.eval.types import EvalResult, ProfileData, Reference, Status
from okgit.problem import load_problem
from okgit.search.proposers.autotune import AutotuneProposer, variants
from okgit.search.proposers.sites import apply, find_sites
from okgit.search.proposers.templates import plan
from okgit.search.types import Attempt, Context, Proposal

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

OWN_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


class Model(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 256),)
        double_kernel[grid](x, y, n, BLOCK=256)
        return y


size = 1000


def get_inputs():
    return [torch.randn(size)]


def get_init_inputs():
    return []
'''


def ctx_for(path, best: Proposal | None = None, profile: ProfileData | None = None, timed: bool = True) -> Context:
    """A context as on a GPU (a timed reference): the only place autotune proposes anything."""
    device = "cuda" if timed else "cpu"
    ctx = Context(problem=load_problem(path), reference=Reference(device=device, timed=timed), backend="triton", device=device)
    if best is not None:
        result = EvalResult(status=Status.correct, correct=True, profile=profile)
        ctx.best = Attempt(cand="c001", proposal=best, result=result)
    return ctx


def test_sites_of_a_user_kernel_move_the_grid_with_the_block(tmp_path):
    sites = {s.name: s for s in find_sites(OWN_KERNEL)}
    assert set(sites) == {"double_kernel.BLOCK", "double_kernel.num_warps"}  # no loop: no stages
    block = sites["double_kernel.BLOCK"]
    assert block.value == 256 and len(block.spans) == 2  # the launch keyword and the grid's cdiv
    blocks = [v for s, v in variants(OWN_KERNEL, cap_numel=1000, cap_dim=1000) if s.name == block.name]
    assert blocks == [512, 128, 1024, 64]  # nearest first; 2048 exceeds the padded size (1024)


# Inductor's 2D-tiled transpose, as the seed's standalone file launches it: each grid dim sized by
# its own block, both 32, and the kernel unmasked (its sizes divide its blocks)
TILED = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(in_ptr0, out_ptr0, ynumel, xnumel, YBLOCK: tl.constexpr, XBLOCK: tl.constexpr):
    yindex = tl.program_id(1) * YBLOCK + tl.arange(0, YBLOCK)[:, None]
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    tl.store(out_ptr0 + (yindex + 64 * xindex), tl.load(in_ptr0 + (xindex + 128 * yindex)))


def launch_transpose(in_ptr0, out_ptr0, ynumel, xnumel):
    transpose_kernel[(-((xnumel) // -(32)), -((ynumel) // -(32)), 1)](in_ptr0, out_ptr0, ynumel, xnumel, XBLOCK=32, YBLOCK=32, num_warps=4, num_stages=1)


class Model(nn.Module):
    def forward(self, x):
        out = torch.empty(128, 64)
        launch_transpose(x, out, 64, 128)
        return out


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
'''
TILED_REFERENCE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow  # the variants run under the interpreter (oprun)
def test_a_block_moves_its_own_grid_dim_only(tmp_path):
    """On the H200's sweep on 9d7c409 YBLOCK=16 moved both grid dims of an Inductor launcher whose
    XBLOCK was also 32's: half of L2/87's output was never written."""
    sites = {s.name: s for s in find_sites(TILED)}
    x_block, y_block = sites["transpose_kernel.XBLOCK"], sites["transpose_kernel.YBLOCK"]
    assert len(x_block.spans) == len(y_block.spans) == 2  # the keyword and its own dim's literal
    x_wider = apply(TILED, x_block, 64)
    assert "[(-((xnumel) // -(64)), -((ynumel) // -(32)), 1)]" in x_wider and "XBLOCK=64, YBLOCK=32" in x_wider
    y_after = apply(x_wider, next(s for s in find_sites(x_wider) if s.name == "transpose_kernel.YBLOCK"), 16)
    assert "[(-((xnumel) // -(64)), -((ynumel) // -(16)), 1)]" in y_after and "XBLOCK=64, YBLOCK=16" in y_after
    reference = tmp_path / "transpose.py"
    reference.write_text(TILED_REFERENCE)
    results = run_ops([(reference, source, {}) for source in (TILED, x_wider, y_after)])
    assert all(r["ok"] for r in results), results


GROUP_NORM_REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, num_groups):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, features)

    def forward(self, x):
        return self.norm(x)


features = 64
num_groups = 8


def get_inputs():
    return [torch.randn(4, features)]


def get_init_inputs():
    return [features, num_groups]
'''


def test_what_the_problem_is_made_of_and_a_file_without_kernels_are_never_settings(tmp_path):
    # the sweep on 9d7c409 (L2/75): `num_groups` varied in the pure-PyTorch reference
    assert find_sites(GROUP_NORM_REFERENCE) == []
    launch_only = OWN_KERNEL.replace("size = 1000\n", "size = 1000\nNUM_GROUPS = 8\n")
    assert "NUM_GROUPS" in {s.name for s in find_sites(launch_only)}  # read by no get_*: a setting
    # read by get_init_inputs, directly or through a derived global: the problem's, never varied
    own = OWN_KERNEL.replace("size = 1000\n", "size = 1000\nnum_groups = 8\nshape = (num_groups, 2)\n").replace(
        "return []", "return [shape]")
    assert {s.name for s in find_sites(own)} == {"double_kernel.BLOCK", "double_kernel.num_warps"}
    path = tmp_path / "own.py"
    path.write_text(own)
    proposer, settings = AutotuneProposer(), set()
    ctx = ctx_for(path, profile=ProfileData(bottleneck_type="compute"))
    while (p := proposer.propose(ctx)) is not None:
        settings.add(p.meta["setting"])
    assert settings == {"double_kernel.BLOCK", "double_kernel.num_warps"}
    reference = tmp_path / "group_norm.py"
    reference.write_text(GROUP_NORM_REFERENCE)
    assert AutotuneProposer().propose(ctx_for(reference)) is None


@pytest.mark.slow  # candidates run under the interpreter (oprun)
def test_variants_of_a_user_kernel_are_correct(tmp_path):
    path = tmp_path / "own.py"
    path.write_text(OWN_KERNEL)
    proposer, ctx = AutotuneProposer(), ctx_for(path)
    proposals = []
    while (p := proposer.propose(ctx)) is not None:
        proposals.append(p)
    assert proposals and all(p.origin == "autotune:reference" for p in proposals)
    assert len({p.source for p in proposals}) == len(proposals)
    assert {p.meta["setting"] for p in proposals} == {"double_kernel.BLOCK", "double_kernel.num_warps"}
    assert "num_warps=" in next(p.source for p in proposals if p.meta["setting"].endswith("num_warps"))
    results = run_ops([(path, p.source, {"size": 1001}) for p in proposals[:4]])
    assert all(r["ok"] for r in results), results


def test_nothing_is_proposed_where_nothing_is_timed(tmp_path):
    path = tmp_path / "own.py"
    path.write_text(OWN_KERNEL)
    notes = []
    ctx = ctx_for(path, timed=False)
    ctx.log = lambda type, **fields: notes.append((type, fields.get("message", "")))
    proposer = AutotuneProposer()
    assert proposer.propose(ctx) is None and proposer.propose(ctx) is None
    assert len(notes) == 1 and notes[0][0] == "note" and "autotune: skipped on cpu" in notes[0][1], notes


def test_template_constants_are_tuned_around_the_best():
    path = EXAMPLES / "04_softmax.py"
    (template,) = plan(ctx_for(path))
    proposer, ctx = AutotuneProposer(), ctx_for(path, template)
    first = proposer.propose(ctx)
    assert first.origin == "autotune:c001" and first.parent == "c001"
    assert first.meta["setting"].startswith("FUSED_ROWS_0_")
    # the new best's neighbourhood comes next
    ctx.best = Attempt(cand="c002", proposal=first, result=EvalResult(status=Status.correct, correct=True))
    second = proposer.propose(ctx)
    assert second.parent == "c002"
    setting, value = first.meta["setting"], first.meta["value"]
    if second.meta["setting"] == setting:
        assert second.meta["previous"] == value
    else:
        assert {s.name: s.value for s in find_sites(second.source)}[setting] == value


def test_gemm_tiles_that_cannot_fit_are_pruned():
    path = EXAMPLES / "14_linear_gelu.py"
    gemm = next(p for p in plan(ctx_for(path)) if p.origin == "template:gemm")
    for site, value in variants(gemm.source, 1 << 24, 4096):
        assert not (site.name.endswith("BLOCK_K") and value > 128)
    settings = {s.name for s, _ in variants(gemm.source, 1 << 24, 4096)}
    assert {"FUSED_GEMM_0_NUM_STAGES", "FUSED_GEMM_0_NUM_WARPS", "FUSED_GEMM_0_BLOCK_M"} <= settings


def test_a_best_at_its_roofline_is_left_alone_unless_the_reference_is_nearer():
    path = EXAMPLES / "01_relu_bias_scale.py"
    (template,) = plan(ctx_for(path))
    ctx = ctx_for(path, template, ProfileData(roofline_position=0.95))
    assert AutotuneProposer().propose(ctx) is None
    ctx.reference = ctx.reference.model_copy(update={"profile": ProfileData(roofline_position=0.93)})
    assert AutotuneProposer().propose(ctx) is None  # the best is the nearer: nothing left to tune
    ctx.reference = ctx.reference.model_copy(update={"profile": ProfileData(roofline_position=1.0)})
    assert AutotuneProposer().propose(ctx) is not None  # still slower than the reference: tuned


@pytest.mark.slow  # candidates run under the interpreter (oprun)
def test_template_variants_stay_correct():
    path = EXAMPLES / "13_cross_entropy.py"
    (template,) = plan(ctx_for(path))
    proposer, ctx = AutotuneProposer(), ctx_for(path, template)
    proposals = [proposer.propose(ctx) for _ in range(4)]
    knobs = {"batch_size": 7, "num_classes": 45}
    results = run_ops([(path, p.source, knobs) for p in proposals])
    assert all(r["ok"] for r in results), results


@pytest.mark.slow  # candidates run under the interpreter (oprun)
def test_column_layout_blocks_are_tuned_within_the_dims():
    """The column layout's BLOCK_J, BLOCK_R and NUM_WARPS are module constants the autotune
    varies; BLOCK_J and BLOCK_R, each along one dim, stay within the largest dim. Its path comes
    first: an argmax reads its columns once, streamed, and the other path keeps them whole."""
    path = EXAMPLES / "11_argmax_dim.py"
    columns = next(p for p in plan(ctx_for(path)) if p.origin == "template:columns")
    found = variants(columns.source, 1 << 25, 64)
    settings = {s.name for s, _ in found}
    assert {"FUSED_COLUMNS_0_BLOCK_J", "FUSED_COLUMNS_0_BLOCK_R", "FUSED_COLUMNS_0_NUM_WARPS"} <= settings
    assert all(v <= 64 for s, v in found if s.name.endswith(("BLOCK_J", "BLOCK_R")))
    proposer, ctx = AutotuneProposer(), ctx_for(path, columns)
    proposals = [proposer.propose(ctx) for _ in range(3)]
    assert [p.meta["setting"] for p in proposals] == ["FUSED_COLUMNS_0_RESIDENT_TILE", "FUSED_COLUMNS_0_BLOCK_J",
                                                     "FUSED_COLUMNS_0_BLOCK_R"]
    assert "FUSED_COLUMNS_0_RESIDENT_TILE: int = 4096" in proposals[0].source  # whole columns, from streamed
    results = run_ops([(path, p.source, {"batch_size": 5, "dim1": 37, "dim2": 19}) for p in proposals])
    assert all(r["ok"] for r in results), results


TWO_KERNELS = OWN_KERNEL.replace('''class Model(nn.Module):''', '''@triton.jit
def other_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def elsewhere(x, y, n):  # launched at other shapes only, as a seed's dynamic-shape kernel is
    other_kernel[(triton.cdiv(n, 128),)](x, y, n, BLOCK=128)


class Model(nn.Module):''')


def test_only_the_kernels_that_ran_at_the_timed_shape_are_tuned(tmp_path):
    from okgit.eval.types import TOP_KERNELS, KernelTime

    def profile(*names: str) -> ProfileData:
        return ProfileData(top_kernels=[KernelTime(name=n, time_us=10.0, custom=True) for n in names])

    def kernels(launched) -> set[str]:
        sites = ran_only(find_sites(TWO_KERNELS), launched)
        return {s.kernel for s, _ in variants(TWO_KERNELS, cap_numel=1000, cap_dim=1000, sites=sites)}

    from okgit.search.proposers.autotune import launched_kernels, ran_only

    assert kernels(None) == {"double_kernel", "other_kernel"}
    assert kernels(launched_kernels(profile("double_kernel"))) == {"double_kernel"}
    assert kernels(launched_kernels(profile("a_library_kernel"))) == {"double_kernel", "other_kernel"}  # names not the file's
    assert launched_kernels(profile(*[f"k{i}" for i in range(TOP_KERNELS)])) is None  # a list cut short says nothing
    path = tmp_path / "op.py"
    path.write_text(TWO_KERNELS)
    events: list[dict] = []
    ctx = ctx_for(path, Proposal(source=TWO_KERNELS, origin="test"), profile("double_kernel"))
    ctx.log = lambda type, **fields: events.append({"type": type, **fields})
    proposer = AutotuneProposer()
    made = []
    while (p := proposer.propose(ctx)) is not None:
        made.append(p)
    assert made and all(p.meta["kernel"] == "double_kernel" for p in made), [p.meta for p in made]
    assert any("left out the settings of other_kernel" in e.get("message", "") for e in events), events
