"""The scan kind: cumulative sums and products (reversed, masked, along any dim) captured as
`scan` nodes, flips absorbed, and the kernels checked under the Triton interpreter."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from oprun import run_ops
from scriptrun import run_script
from test_templates import ctx_for, op, tiny

from okgit.lower.capture import capture
from okgit.lower.fusion import Group, partition
from okgit.lower.opfile import lowered_file
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan

SCAN_OP = """
class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, mask):
        return {expr}

rows = 5
length = 37
dim = {dim}

def get_inputs():
    x = {values}
    return [x, torch.rand(x.shape) > 0.5]

def get_init_inputs():
    return [dim]
"""

CASES = {  # name: (forward expression, scanned dim, inputs)
    "masked_cumsum": ("torch.cumsum(x * mask, dim=self.dim)", 1, "torch.randn(rows, length)"),
    "cumprod_epilogue": ("torch.tanh(torch.cumprod(x, dim=self.dim)) + x", 1, "1 + 0.1 * torch.randn(rows, length)"),
    "reverse_masked": ("torch.cumsum((x * mask).flip(self.dim), self.dim).flip(self.dim) * 2.0", 1, "torch.randn(rows, length)"),
    "reverse_flipped_operands": ("torch.cumsum(x.flip(self.dim) * mask.flip(self.dim), self.dim).flip(self.dim)", 1,
                                 "torch.randn(rows, length)"),
    "down_columns": ("torch.cumprod(x.relu() + 0.5, dim=self.dim)", 0, "torch.rand(length, rows, 3)"),
    "middle_dim_reverse": ("torch.cumsum(x.flip(self.dim), self.dim).flip(self.dim) - x", 1, "torch.randn(3, length, rows)"),
    "both_ways": ("torch.cumsum(x, self.dim) + torch.cumsum(x.flip(self.dim), self.dim).flip(self.dim)", 1,
                  "torch.randn(rows, length)"),
    "scan_of_scan": ("torch.cumsum(torch.cumsum(x, self.dim) * mask, self.dim)", 1, "torch.randn(rows, length)"),
}


def scan_op(tmp_path, name: str) -> str:
    expr, dim, values = CASES[name]
    return op(tmp_path, name, SCAN_OP.format(expr=expr, dim=dim, values=values))


def candidate(path: str) -> tuple[str, list]:
    problem = load_problem(path)
    graph = capture(problem)
    items = partition(graph)
    source, _ = lowered_file(problem.source, graph, items)
    return source, items


def test_a_masked_cumsum_is_one_scan_kernel_with_its_mask_fused(tmp_path):
    source, items = candidate(scan_op(tmp_path, "masked_cumsum"))
    assert len(items) == 1 and isinstance(items[0], Group) and items[0].scan == (1,)
    assert "tl.cumsum(" in source and "aten.cumsum" not in source


def test_a_reversed_cumsum_spelled_with_flips_moves_no_data(tmp_path):
    for name in ("reverse_masked", "reverse_flipped_operands"):
        graph = capture(load_problem(scan_op(tmp_path, name)))
        assert not [n for n in graph.nodes if n.kind == "extern"], name  # both flips absorbed
        (scan,) = [n for n in graph.nodes if n.kind == "scan"]
        assert scan.kwargs == {"reverse": True} and scan.dims == (1,)
    source, _ = candidate(scan_op(tmp_path, "reverse_masked"))
    assert "col = n_scan - 1 - step" in source


def test_a_flip_no_scan_undoes_stays_a_pytorch_call(tmp_path):
    path = op(tmp_path, "flip_only", """
class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1).flip(0) * 2.0

def get_inputs():
    return [torch.randn(4, 9)]

def get_init_inputs():
    return []
""")
    source, items = candidate(path)
    assert [n.op for n in items if not isinstance(n, Group)] == ["aten.flip.default"]
    assert "torch.ops.aten.flip.default(" in source


def test_scans_both_ways_take_a_kernel_each_and_a_scan_over_one_element_is_none(tmp_path):
    _, items = candidate(scan_op(tmp_path, "both_ways"))
    assert sorted(bool(n.kwargs.get("reverse")) for g in items for n in g.nodes if n.kind == "scan") == [False, True]
    assert len([g for g in items if isinstance(g, Group) and g.scan]) == 2
    path = op(tmp_path, "unit", """
class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1) + 1.0

def get_inputs():
    return [torch.randn(8, 1)]

def get_init_inputs():
    return []
""")
    graph = capture(load_problem(path))
    assert not [n for n in graph.nodes if n.kind == "scan"]


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_scan_kernels_match_pytorch_under_the_interpreter(tmp_path):
    """Every case, with tiny chunks (several per row, a partial last one) and as proposed, at
    the op's sizes and at others (the last one odd, wider than one chunk)."""
    jobs = []
    for name in CASES:
        path = scan_op(tmp_path, name)
        source, _ = candidate(path)
        jobs += [(path, tiny(source), {}), (path, source, {"length": 301, "rows": 3})]
    results = run_ops(jobs)
    bad = [(job[0], r["why"]) for job, r in zip(jobs, results) if not r["ok"]]
    assert not bad, bad


NUMERICS = r'''
import json, sys, torch, types
from okgit.eval.judge.tolerance import check_leaf, leaf_tolerance, reference_error
path, length = sys.argv[1], int(sys.argv[2])
mod = types.ModuleType("cand"); mod.__file__ = path
exec(compile(open(path).read(), path, "exec"), mod.__dict__)
torch.manual_seed(0)
x = 1 + 0.05 * torch.randn(4, length)  # products stay near 1: the error grows with every step
native = torch.cumprod(x, 1)
f64 = torch.cumprod(x.double(), 1)
ref_err = reference_error(native, f64)
# a GPU's cumprod accumulates in fp32 (the CPU's in float64): the rule there uses that error
acc, seq = x[:, 0].clone(), [x[:, 0].clone()]
for j in range(1, length):
    acc = acc * x[:, j]
    seq.append(acc)
fp32_err = reference_error(torch.stack(seq, 1), f64)
got = mod.Model(1)(x, x > 0)
check = check_leaf(got, {"exact": True}, native, f64, leaf_tolerance(native, f64, ref_err), "correctness")
print(json.dumps({"ok": check.ok, "message": check.message, "max_abs": check.max_abs, "fp32_error": fp32_err}))
'''


@pytest.mark.slow  # a 4096-long scan under the interpreter, in a process
def test_a_long_cumprod_is_within_the_evaluators_tolerance_against_float64(tmp_path):
    """The evaluator allows max(1e-4 * max|ref|, 4x the reference's own error against float64):
    a chunked tree scan of 4096 factors stays within it, and within 4x the error of a
    sequential fp32 product (a GPU reference's own)."""
    path = op(tmp_path, "long_cumprod", SCAN_OP.format(expr="torch.cumprod(x, dim=self.dim)", dim=1, values="torch.rand(rows, length)"))
    source, _ = candidate(path)
    cand = tmp_path / "cand.py"
    cand.write_text(source)
    proc = run_script(NUMERICS, [str(cand), "4096"], {**os.environ, "TRITON_INTERPRET": "1"}, timeout=300)
    result = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"ok": False, "message": proc.stderr[-2000:]}
    assert result["ok"], result["message"]
    assert result["max_abs"] <= 4 * result["fp32_error"], result


@pytest.mark.slow  # the real evaluator
def test_the_proposer_and_evaluator_take_a_reversed_masked_cumsum_end_to_end(tmp_path, evaluator):
    path = op(tmp_path, "reverse_e2e", textwrap.dedent(SCAN_OP.format(
        expr="torch.cumsum((x * mask).flip(self.dim), self.dim).flip(self.dim)", dim=1, values="torch.randn(rows, length)")))
    ctx = ctx_for(path)
    proposals = plan(ctx)
    assert proposals and proposals[0].origin == "template:scan"
    result = evaluator.evaluate(ctx.problem, proposals[0].source, mode="fast", backend="triton")
    assert result.correct, result.error
