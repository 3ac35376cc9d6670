"""Causal attention as GEMMs (okgit/lower/kinds/attention_gemms.py, the gemm kind's TRIANGLES): the
scores GEMM's grid takes the tiles that hold a kept element (column <= row) first, the masked
tiles after them (`_kept_first`, `KEPT_FIRST`). The order is checked tile by tile against the
element-wise rule at tile shapes square and not, with M not a multiple of the tile; the kernels
under Triton's interpreter against PyTorch in float64 (every output element written: oprun
poisons allocations) at sequence lengths not a multiple of the tile, queries and keys of
different lengths, K in ranges and the operands split ahead."""

from __future__ import annotations

import importlib.util
import os
import re

import pytest
from oprun import run_ops
from scriptrun import run_script
from test_attention_gemms import gemms_candidate, small_tiles
from test_attention_kind import OPS
from test_templates import op

from okgit.lower.kinds.gemm import Gemm
from okgit.lower.template import fill

# causal across lengths: L queries, S keys (SDPA's causal is top-left: key j <= query i)
CROSS = """
class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

heads = 2
seq_q = 37
seq_k = 21
dim = 24

def get_inputs():
    return [torch.randn(1, heads, seq_q, dim), torch.randn(1, heads, seq_k, dim), torch.randn(1, heads, seq_k, 20)]

def get_init_inputs():
    return []
"""


@pytest.fixture(scope="module")
def plan_module(tmp_path_factory):
    """The gemm kind's plan helper as a module (Triton's JIT reads its kernels from a real file)."""
    path = tmp_path_factory.mktemp("plan") / "gemm_plan.py"
    path.write_text("import torch\nimport triton\nimport triton.language as tl\n\n" + fill(Gemm.helpers["_gemm_plan"]))
    spec = importlib.util.spec_from_file_location("gemm_plan_causal", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiles_of(order, num_n: int) -> list[tuple[int, int]]:
    return [(r // num_n, r % num_n) for r in order.tolist()]


def holds_kept(i: int, j: int, m: int, n: int, bm: int, bn: int) -> bool:
    """Whether tile (i, j) holds an element with column <= row, element by element."""
    return any(c <= r for r in range(i * bm, min(m, (i + 1) * bm)) for c in range(j * bn, min(n, (j + 1) * bn)))


def test_a_causal_grid_takes_the_kept_tiles_first_in_the_plain_order(plan_module) -> None:
    """512 x 512 at 128 x 128: 10 of 16 tiles hold a kept element (the diagonal's 4 among them),
    column by column as _gemm_tile numbers them; the 6 wholly above the diagonal last. In bands of
    2 row tiles (GROUP_M), band by band."""
    order, kept = plan_module._kept_first(4, 4, 512, 128, 128, 8, "cpu")
    assert kept == 10
    assert tiles_of(order, 4) == [(0, 0), (1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (3, 1), (2, 2), (3, 2), (3, 3),
                                  (0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]
    order, kept = plan_module._kept_first(4, 4, 512, 128, 128, 2, "cpu")
    assert tiles_of(order, 4)[:kept] == [(0, 0), (1, 0), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1), (2, 2), (3, 2), (3, 3)]


@pytest.mark.parametrize(("m", "n", "bm", "bn"), [(45, 45, 16, 16), (45, 45, 16, 32), (45, 45, 32, 16), (37, 21, 16, 16),
                                                  (13, 40, 16, 16), (20, 20, 16, 8), (1, 1, 16, 16)])
def test_the_kept_tiles_are_exactly_those_holding_a_kept_element(plan_module, m, n, bm, bn) -> None:
    num_m, num_n = -(-m // bm), -(-n // bn)
    order, kept = plan_module._kept_first(num_m, num_n, m, bm, bn, 2, "cpu")
    tiles = tiles_of(order, num_n)
    assert sorted(tiles) == [(i, j) for i in range(num_m) for j in range(num_n)]  # each tile once
    assert [holds_kept(i, j, m, n, bm, bn) for i, j in tiles] == [True] * kept + [False] * (len(tiles) - kept)


def test_only_the_causal_scores_gemm_takes_its_kept_tiles_first(tmp_path) -> None:
    """The scores GEMM (its epilogue masks the elements above the diagonal) orders its grid; the
    P @ V GEMM's tiles all hold work (P is zero past the diagonal: K stops there) and keep the
    plain order; a call that is not causal keeps it in both."""
    source = gemms_candidate(op(tmp_path, "sdpa_causal", OPS["sdpa_causal"]))
    assert re.findall(r"_GROUP_M, (True|False),", source) == ["True", "False"]
    plain = gemms_candidate(op(tmp_path, "sdpa_additive_wide", OPS["sdpa_additive_wide"]))
    assert re.findall(r"_GROUP_M, (True|False),", plain) == ["False", "False"]


def test_the_softmax_writes_p_split_for_the_gemm_after_it(tmp_path) -> None:
    """The rows kernel hands P over as its TF32 highs and remainders; the P @ V GEMM reads both."""
    source = gemms_candidate(op(tmp_path, "sdpa_causal", OPS["sdpa_causal"]))
    forward = source.split("class Model")[1]
    hi, rest = re.search(r"^ +(t\d+), (t\d+) = fused_rows_\d+\(", forward, re.M).groups()  # type: ignore[union-attr]
    assert re.search(rf"= fused_attention_gemms_\d+\({hi}, V, {rest}\)", forward)
    assert "def fused_attention_gemms_3(a, b, a_rest):" in source


SPLIT_P = r"""
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
torch.manual_seed(0)
q, k = torch.randn(1, 2, 20, 24), torch.randn(1, 2, 20, 24)
scores = module.fused_attention_gemms_1(q, k.transpose(-2, -1), 24**-0.5)
hi, rest = module.fused_rows_2(scores)
want = torch.softmax(scores.double(), -1)  # P of the kernel's own scores, exactly
for part in (hi, rest):
    assert not (part.view(torch.int32) & 0x1FFF).any(), "not TF32"
assert ((hi.double() - want).abs() <= want * 2.0**-11 + 1e-12).all(), "highs not P rounded to nearest"
assert ((hi.double() + rest.double() - want).abs() <= want * 2.0**-20 + 1e-12).all(), "highs + remainders not P"
assert (hi[..., 0, 1:] == 0).all() and (hi[..., 0, 0] == 1).all(), "causal: the first query sees one key"
"""


@pytest.mark.slow  # a candidate's kernels under the interpreter, in a process
def test_the_split_p_is_tf32_highs_and_remainders_of_the_softmax(tmp_path) -> None:
    """The softmax kernel's two outputs: each TF32 (its low 13 bits zero), the highs P rounded to
    nearest at TF32 (within half an ulp at 10 mantissa bits), the two summing to P within a few
    fp32 ulps (2^-20 of it: the kernel's own exp and sum, and the remainder rounded at TF32)."""
    path = tmp_path / "candidate.py"
    path.write_text(gemms_candidate(op(tmp_path, "sdpa_causal", OPS["sdpa_causal"])))
    proc = run_script(SPLIT_P, [str(path)], {**os.environ, "TRITON_INTERPRET": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


SPLIT_A = r"""
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("gemm_plan", sys.argv[1])
plan_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plan_module)
plan_module._tma_device = lambda device: True  # as on a Hopper GPU
a, rest, b = torch.randn(2, 20, 36), torch.randn(2, 20, 36), torch.randn(2, 36, 24)
plan = plan_module._GemmPlan(a, b, 16, 16, 16, "bf16x3", 0, 0, 0, 8, False, rest)
assert plan.switches["SPLIT"] and plan.switches["TMA"] and plan.switches["PRECISION"] == "tf32", plan.switches
assert plan.sizes[2] == 36 and plan.sizes[6:8] == (0, 2 * 24), plan.sizes  # K as it is; B's remainders 48 rows in
a, rest, b = torch.randn(2, 20, 35), torch.randn(2, 20, 35), torch.randn(2, 35, 24)
odd = plan_module._GemmPlan(a, b, 16, 16, 16, "tf32x3-split", 0, 0, 0, 8, False, rest)
assert odd.switches["SPLIT"] and not odd.switches["TMA"], odd.switches  # rows of 35 floats: no 16-byte rows for TMA
"""


@pytest.mark.slow  # the plan's split pass under the interpreter, in a process
def test_a_gemm_whose_a_came_split_splits_b_alone(tmp_path) -> None:
    """Whatever the precision and the work per element: B split K-major and padded to whole K
    blocks, A's highs and remainders read as they are (K not padded: TMA fills past it with
    zeros, pointers mask it), through TMA where both fit it (on a Hopper GPU, stood in for)."""
    helper = tmp_path / "gemm_plan.py"
    helper.write_text("import torch\nimport triton\nimport triton.language as tl\n\n" + fill(Gemm.helpers["_gemm_plan"]))
    proc = run_script(SPLIT_A, [str(helper)], {**os.environ, "TRITON_INTERPRET": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow  # candidates under the interpreter (oprun)
@pytest.mark.timeout(600)
def test_causal_attention_on_the_kept_first_grid_matches_pytorch(tmp_path) -> None:
    """Sequence lengths not a multiple of the tile (45 at 16: a last row tile of 13 rows), tiles
    square and not (16 x 32, 32 x 16), bands of 2 row tiles, K in 2 ranges with the operands split
    ahead, a persistent grid (4 programs on a CPU striding over the tiles, a masked tile's one K
    block kept), and queries and keys of different lengths (more queries, then more keys)."""
    causal = op(tmp_path, "sdpa_causal", OPS["sdpa_causal"])
    cross = op(tmp_path, "cross", CROSS)
    # one head of one sample (the op's 2 samples of 3 heads cost the interpreter 6 times the time,
    # 2 samples of one head twice): a batch of causal matrices is the cross op's 2 heads, at every
    # setting here, and heads beside samples run at the op's own size in
    # test_attention_gemms.test_the_written_out_form_matches_pytorch
    long = {"seq_len": 45, "head_dim": 40, "num_heads": 1, "batch_size": 1}
    jobs = []
    for path, knobs in ((causal, long), (cross, {}), (cross, {"seq_q": 13, "seq_k": 40})):
        source = gemms_candidate(path)
        for more in ({}, {"BLOCK_N": 32, "GROUP_M": 2}, {"BLOCK_M": 32}, {"SPLIT_K": 2, "GEMM_SPLIT_AHEAD_MIN": 0},
                     {"PERSISTENT": 1}):
            jobs.append((path, small_tiles(source, **more), knobs))
    results = run_ops(jobs, timeout=580)
    bad = [(job[0], job[2], r["why"][-800:]) for job, r in zip(jobs, results) if not r["ok"]]
    assert not bad, bad
