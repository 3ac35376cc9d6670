"""A matmul whose one reader keeps its lower triangle (`torch.tril(a @ b)`): the GEMM kind's
rewrite marks it triangular (okgit/lower/kinds/gemm.py, `Gemm.rewrite`) and its kernel skips the
tiles wholly above the diagonal. Which matmuls are marked, and the kernels against float64 under
the interpreter with tiles small enough that whole tiles are skipped."""

from __future__ import annotations

import re
import textwrap

import pytest
from oprun import run_ops

from okgit.eval.types import Reference
from okgit.lower.capture import capture
from okgit.lower.kinds import kinds
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

GEMM = next(k for k in kinds() if k.name == "gemm")
SKIPS = "# the epilogue masks such a tile whole"


def op(tmp_path, forward: str, inputs: str) -> str:
    path = tmp_path / "tri.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n" + textwrap.dedent(f"""
        class Model(nn.Module):
            def forward(self, a, b):
                return {forward}

        def get_inputs():
            return [{inputs}]

        def get_init_inputs():
            return []
        """))
    return str(path)


SQUARE = "torch.rand(45, 45), torch.rand(45, 45)"


@pytest.mark.parametrize(("forward", "inputs", "marked"), [
    ("torch.tril(torch.matmul(a, b))", SQUARE, True),
    ("torch.tril(a @ b, diagonal=-1)", SQUARE, True),
    ("torch.tril(torch.bmm(a, b))", "torch.rand(3, 20, 9), torch.rand(3, 9, 20)", True),
    ("torch.tril(a @ b, diagonal=1)", SQUARE, False),  # keeps elements above the diagonal
    ("torch.triu(a @ b)", SQUARE, False),
    ("torch.tril(torch.relu(a @ b))", SQUARE, False),  # the reader is the relu
    ("(lambda y: (torch.tril(y), y))(a @ b)", SQUARE, False),  # the product is returned too
])
def test_which_matmuls_are_marked_triangular(tmp_path, forward, inputs, marked):
    graph = GEMM.rewrite(capture(load_problem(op(tmp_path, forward, inputs))))
    calls = [n for n in graph.nodes if GEMM.seeds(n)]
    assert calls and any(n.kwargs.get("triangle") == "output" for n in calls) is marked


def _source(path: str) -> str:
    ctx = Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                  device="cpu", log=lambda type, **f: None)
    first = plan(ctx)[0]
    assert first.origin.startswith("template:gemm") and SKIPS in first.source, first.origin
    return first.source


def _setting(source: str, name: str, value: int) -> str:
    out, n = re.subn(rf"^(FUSED_GEMM_\d+_{name}: \w+) = .*$", lambda m: f"{m.group(1)} = {value}", source,
                     flags=re.MULTILINE)
    assert n == 1, name
    return out


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_a_triangular_product_matches_float64_with_tiles_skipped(tmp_path):
    jobs, names = [], []
    for forward, inputs in (("torch.tril(torch.matmul(a, b))", "torch.randn(45, 37), torch.randn(37, 50)"),
                            ("torch.tril(torch.bmm(a, b), diagonal=-2) * 2.0", "torch.randn(2, 40, 21), torch.randn(2, 21, 33)")):
        (tmp_path / str(len(jobs))).mkdir()
        path = op(tmp_path / str(len(jobs)), forward, inputs)
        source = _source(path)
        small = _setting(_setting(_setting(source, "BLOCK_M", 16), "BLOCK_N", 16), "BLOCK_K", 16)
        for label, variant in (("defaults", source), ("small tiles", small),
                               ("small tiles, persistent", _setting(small, "PERSISTENT", 1))):
            jobs.append((path, variant, {}))
            names.append(f"{forward}: {label}")
    results = run_ops(jobs, timeout=900)
    bad = [(n, r["why"]) for n, r in zip(names, results, strict=True) if not r["ok"]]
    assert not bad, bad
