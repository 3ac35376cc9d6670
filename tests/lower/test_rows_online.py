"""A softmax's sum folded into its max's streamed pass (Group.online_max, streamed.fold_passes):
the long row is read twice, not three times, and the kernels match torch under the Triton
interpreter over several chunks with a ragged last one, with -inf entries, a row of -inf, a row
holding a NaN and one holding +inf, in the row layout and in the column one. Groups that only
look like it keep their passes."""

from __future__ import annotations

import re

import pytest
from oprun import run_ops
from test_templates import ctx_for, op, tiny

from okgit.lower.capture import capture
from okgit.lower.fusion import Group, partition
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan

# 7 rows of 37 at the tiny settings: chunks of 16 (the last holding 5), blocks of 2 rows (the last
# holding 1). Row 1 holds -inf entries, row 2 is all -inf, row 3 holds a NaN, row 4 a +inf, row 5
# is large (exp(x) alone would overflow fp32); torch gives NaN rows for 2, 3 and 4.
INPUTS = """
def get_inputs():
    x = torch.randn(rows, dim) * 3
    x[1, ::3] = float("-inf")
    x[2] = float("-inf")
    x[3, dim // 2] = float("nan")
    x[4, dim - 1] = float("inf")
    x[5] += 200.0
    return [x]
"""

ONLINE = {
    "softmax": "torch.softmax(x * 1.5, dim=1)",
    "log_softmax": "torch.log_softmax(x, dim=1)",
    # the max without keepdim, broadcast back through a view; only the per-row sum written
    "sum_exp": "torch.exp(x - x.max(dim=1)[0][:, None]).sum(dim=1)",
    "sum_exp2": "torch.exp2(x - x.amax(dim=1, keepdim=True)).sum(dim=1, keepdim=True)",
    # a softmax and a mean: the sum folds with the max, the mean is in the same first pass
    "softmax_and_mean": "torch.softmax(x, dim=1) + x.mean(dim=1, keepdim=True)",
}
# (expression, passes over the row): a max and a sum that are not a softmax's keep their passes
OTHERS = {
    "shifted_other_value": ("torch.exp(x * 2.0 - x.amax(dim=1, keepdim=True)).sum(dim=1)", 2),
    "shifted_by_min": ("torch.exp(x - x.amin(dim=1, keepdim=True)).sum(dim=1)", 2),
    "no_exp": ("(x - x.amax(dim=1, keepdim=True)).sum(dim=1)", 2),
    "reversed": ("torch.exp(x.amax(dim=1, keepdim=True) - x).sum(dim=1)", 2),
    "no_max": ("torch.exp(x).sum(dim=1) + x.amax(dim=1)", 1),
}


def row_op(tmp_path, name: str, expr: str, inputs: str = INPUTS) -> str:
    # rendered at a long row (the capture runs on the meta device), run at small knobs
    return op(tmp_path, name, f"""
class Model(nn.Module):
    def forward(self, x):
        return {expr}

rows = 7
dim = 40000
{inputs}
def get_init_inputs():
    return []
""")


def rows_candidate(path: str) -> str:
    (cand,) = [p.source for p in plan(ctx_for(path)) if p.origin == "template:rows"]
    return cand


def streamed_passes(source: str) -> int:
    """The loops over a row's chunks in the rows kernel's streamed branch."""
    streamed = source.split("if ONE_PASS:", 1)[1].split("\n        else:\n", 1)[1].split("\ndef ", 1)[0]
    return len(re.findall(r"^ +for start in ", streamed, flags=re.MULTILINE))


def the_group(path: str) -> Group:
    (g,) = [it for it in partition(capture(load_problem(path))) if isinstance(it, Group) and it.red]
    return g


def test_a_softmax_reads_its_row_twice(tmp_path):
    softmax = rows_candidate(row_op(tmp_path, "softmax", ONLINE["softmax"]))
    assert streamed_passes(softmax) == 2  # the max with the sum, then the stores
    assert "L2_SHARE: int = 0" in softmax  # still read twice: the grid setting stays
    once = rows_candidate(row_op(tmp_path, "sum_exp", ONLINE["sum_exp"]))
    assert streamed_passes(once) == 1  # one read, nothing elementwise to write: no grid to size
    assert "L2_SHARE" not in once and "CHUNK: int = 2048" in once


@pytest.mark.parametrize("name", sorted(ONLINE))
def test_the_sum_is_found_beside_its_max(tmp_path, name):
    g = the_group(row_op(tmp_path, name, ONLINE[name]))
    sums = [r for r in g.nodes if r.kind == "reduce" and g.online_max(r) is not None]
    assert len(sums) == 1
    top, f = g.online_max(sums[0])
    assert top.op == "max" and f == ("exp2" if name == "sum_exp2" else "exp")


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_a_max_and_a_sum_that_are_not_a_softmax_keep_their_passes(tmp_path, name):
    expr, want = OTHERS[name]
    path = row_op(tmp_path, name, expr)
    g = the_group(path)
    assert not any(g.online_max(r) for r in g.nodes if r.kind == "reduce")
    assert streamed_passes(rows_candidate(path)) == want


# softmaxes over the middle dim: the column layout streams its rows along axis 0 of its tiles
STRIDED = """
class Model(nn.Module):
    def forward(self, x):
        return torch.log_softmax(x, dim=1), torch.softmax(x * 0.5, dim=1)

a = 4
b = 75
c = 20

def get_inputs():
    x = torch.randn(a, b, c) * 3
    x[0, ::3, :] = float("-inf")
    x[1, :, 3] = float("-inf")
    x[2, 7, 5] = float("nan")
    x[3, b - 1, 9] = float("inf")
    x[3, :, 11] += 200.0
    return [x]

def get_init_inputs():
    return []
"""


@pytest.mark.slow  # reason: one interpreter subprocess, nine kernels over several chunks
def test_streamed_kernels_match_pytorch_on_infinities_and_nan(tmp_path):
    jobs = [(path, tiny(rows_candidate(path)), {"rows": 7, "dim": 37})
            for path in (row_op(tmp_path, name, expr) for name, expr in ONLINE.items())]
    for source in (j[1] for j in jobs):
        assert "ONE_PASS=one_pass" in source and "BLOCK_N_MAX: int = 16" in source  # 37 > 16: streamed
    strided = op(tmp_path, "strided", STRIDED)
    layouts = {p.origin: p.source for p in plan(ctx_for(strided))}
    assert streamed_passes(layouts["template:rows"]) == 2
    jobs += [(strided, tiny(source), {}) for source in layouts.values()]
    # its own defaults: the softmaxes' columns of 75 whole in registers (the tiny settings stream them)
    assert "FUSED_COLUMNS_0_RESIDENT_TILE: int = 4096" in layouts["template:columns"]
    jobs += [(strided, layouts["template:columns"], {})]
    bad = [(path, r["why"]) for (path, _, _), r in zip(jobs, run_ops(jobs), strict=True) if not r["ok"]]
    assert not bad, bad
