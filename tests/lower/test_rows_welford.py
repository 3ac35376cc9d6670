"""A variance's sum of squares folded into its mean's streamed pass by Welford's updates
(Group.online_mean, streamed.fold_passes): a normalisation's long row is read twice (its
statistics, then its outputs), not three times, and the kernels match torch under the Triton
interpreter over several chunks with a ragged last one: rows far from zero (a naive sum of squares
would cancel), a constant row, a row holding a NaN and one holding +inf, in the row layout and in
the column one. Groups that only look like a variance keep their passes."""

from __future__ import annotations

import pytest
from oprun import run_ops
from test_rows_online import row_op as rows_op
from test_rows_online import rows_candidate, streamed_passes, the_group
from test_templates import ctx_for, op, tiny

from okgit.search.proposers.templates import plan

# 7 rows of 37 at the tiny settings: chunks of 16 (the last holding 5). Row 1 sits at 1e4 with a
# spread of 1 (fp32's sum of squares about zero would lose it), row 2 is constant, row 3 holds a
# NaN and row 4 a +inf: torch gives NaN statistics for both.
INPUTS = """
def get_inputs():
    x = torch.randn(rows, dim)
    x[1] += 1e4
    x[2] = 3.0
    x[3, dim // 2] = float("nan")
    x[4, dim - 1] = float("inf")
    return [x]
"""

WELFORD = {
    # (expression, streamed passes over a row)
    "layer_norm": ("torch.nn.functional.layer_norm(x, (dim,))", 2),
    "var_explicit": ("((x - x.mean(dim=1, keepdim=True)) ** 2).mean(dim=1)", 1),
    "var_unbiased": ("torch.var(x, dim=1)", 1),
    "std_and_mean": ("torch.std(x, dim=1, keepdim=True) + x.mean(dim=1, keepdim=True) * 0.5", 1),
    "squared_by_mul": ("(lambda d: (d * d).sum(dim=1))(x - x.mean(dim=1, keepdim=True))", 1),
}
OTHERS = {
    "absolute": ("(x - x.mean(dim=1, keepdim=True)).abs().sum(dim=1)", 2),
    "other_value": ("((x * 2.0 - x.mean(dim=1, keepdim=True)) ** 2).sum(dim=1)", 2),
    "about_the_max": ("((x - x.amax(dim=1, keepdim=True)) ** 2).sum(dim=1)", 2),
    "cubed": ("((x - x.mean(dim=1, keepdim=True)) ** 3).sum(dim=1)", 2),
}


def row_op(tmp_path, name: str, expr: str) -> str:
    return rows_op(tmp_path, name, expr, INPUTS)


@pytest.mark.parametrize("name", sorted(WELFORD))
def test_the_squares_fold_beside_their_mean(tmp_path, name):
    expr, passes = WELFORD[name]
    path = row_op(tmp_path, name, expr)
    g = the_group(path)
    squares = [r for r in g.nodes if r.kind == "reduce" and g.online_mean(r) is not None]
    assert len(squares) == 1
    total, mean = g.online_mean(squares[0])
    assert total.op == "sum" and mean.op == "div"
    source = rows_candidate(path)
    assert streamed_passes(source) == passes and "_welford_combine" in source


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_sums_that_are_not_a_variance_keep_their_passes(tmp_path, name):
    expr, passes = OTHERS[name]
    path = row_op(tmp_path, name, expr)
    g = the_group(path)
    assert not any(g.online_mean(r) for r in g.nodes if r.kind == "reduce")
    assert streamed_passes(rows_candidate(path)) == passes


def test_a_short_row_keeps_its_passes(tmp_path):
    """Below WELFORD_MIN elements a row (a layer norm over 64 positions) is read again from the
    cache: the variance keeps its own pass."""
    path = op(tmp_path, "short", """
class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.layer_norm(x, (dim,))

rows = 7
dim = 64
""" + INPUTS + """
def get_init_inputs():
    return []
""")
    source = rows_candidate(path)
    assert streamed_passes(source) == 3 and "_welford_combine" not in source
    g = the_group(path)
    assert any(g.online_mean(r) for r in g.nodes if r.kind == "reduce")  # the pattern is there: the length decides


# a normalisation over the middle dim: the column layout streams its rows along axis 0 of its tiles
# (a sample at 300: its normalised outputs keep fp32's accuracy; at 1e4 the inputs' own rounding
# exceeds the tolerance in either pass structure)
STRIDED = """
class Model(nn.Module):
    def forward(self, x):
        d = x - x.mean(dim=1, keepdim=True)
        return d * torch.rsqrt((d * d).mean(dim=1, keepdim=True) + 1e-5)

a = 4
b = 9000
c = 20

def get_inputs():
    x = torch.randn(a, b, c)
    x[0] += 300.0
    x[1, :, 3] = 2.0
    x[2, 7, 5] = float("nan")
    x[3, b - 1, 9] = float("inf")
    return [x]

def get_init_inputs():
    return []
"""


@pytest.mark.slow  # reason: one interpreter subprocess, seven kernels over several chunks
def test_welford_kernels_match_pytorch_far_from_zero_on_constants_infinities_and_nan(tmp_path):
    jobs = [(path, tiny(rows_candidate(path)), {"rows": 7, "dim": 37})
            for path in (row_op(tmp_path, name, expr) for name, (expr, _) in WELFORD.items())]
    for source in (j[1] for j in jobs):
        assert "BLOCK_N_MAX: int = 16" in source  # 37 > 16: streamed
    strided = op(tmp_path, "strided", STRIDED)
    layouts = {p.origin: p.source for p in plan(ctx_for(strided))}
    assert set(layouts) == {"template:columns", "template:rows"}
    assert all("_welford_combine" in s for s in layouts.values())
    jobs += [(strided, tiny(source), {"b": 75}) for source in layouts.values()]  # rendered at columns of 9000
    bad = [(path, r["why"]) for (path, _, _), r in zip(jobs, run_ops(jobs), strict=True) if not r["ok"]]
    assert not bad, bad
