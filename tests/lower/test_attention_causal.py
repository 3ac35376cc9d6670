"""Causal attention as GEMMs (okgit/lower/kinds/attention_gemms.py, the gemm kind's TRIANGLES): the
scores GEMM's grid takes the tiles that hold a kept element (column <= row) first, the masked
tiles after them (`_kept_first`, `KEPT_FIRST`). The order is checked tile by tile against the
element-wise rule at tile shapes square and not, with M not a multiple of the tile; the kernels
under Triton's interpreter against PyTorch in float64 (every output element written: oprun
poisons allocations) at sequence lengths not a multiple of the tile, queries and keys of
different lengths, K in ranges and the operands split ahead."""

from __future__ import annotations

import importlib.util
import re

import pytest
from oprun import run_ops
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
    assert re.findall(r"_GROUP_M, (True|False)\)", source) == ["True", "False"]
    plain = gemms_candidate(op(tmp_path, "sdpa_additive_wide", OPS["sdpa_additive_wide"]))
    assert re.findall(r"_GROUP_M, (True|False)\)", plain) == ["False", "False"]


@pytest.mark.slow  # candidates under the interpreter (oprun)
@pytest.mark.timeout(600)
def test_causal_attention_on_the_kept_first_grid_matches_pytorch(tmp_path) -> None:
    """Sequence lengths not a multiple of the tile (45 at 16: a last row tile of 13 rows), tiles
    square and not (16 x 32, 32 x 16), bands of 2 row tiles, K in 2 ranges with the operands split
    ahead, and queries and keys of different lengths (more queries, then more keys)."""
    causal = op(tmp_path, "sdpa_causal", OPS["sdpa_causal"])
    cross = op(tmp_path, "cross", CROSS)
    long = {"seq_len": 45, "head_dim": 40}
    jobs = []
    for path, knobs in ((causal, long), (cross, {}), (cross, {"seq_q": 13, "seq_k": 40})):
        source = gemms_candidate(path)
        for more in ({}, {"BLOCK_N": 32, "GROUP_M": 2}, {"BLOCK_M": 32}, {"SPLIT_K": 2, "GEMM_SPLIT_AHEAD_MIN": 0}):
            jobs.append((path, small_tiles(source, **more), knobs))
    results = run_ops(jobs, timeout=580)
    bad = [(job[0], job[2], r["why"][-800:]) for job, r in zip(jobs, results) if not r["ok"]]
    assert not bad, bad
