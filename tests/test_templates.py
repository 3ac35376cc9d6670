"""The template proposer: graph capture, grouping, rendering, and correctness of what it writes."""

from __future__ import annotations

import ast
import re
import textwrap

import pytest
from oprun import run_ops

from okgit.eval.types import Reference
from okgit.problem import load_problem, shape_knobs
from okgit.search.graph import Unsupported, capture, partition
from okgit.search.proposers.templates import TemplatesProposer, plan
from okgit.search.types import Context

HEADER = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def op(tmp_path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return str(path)


def ctx_for(path: str, notes: list | None = None) -> Context:
    log = (lambda type, **f: notes.append(f.get("message"))) if notes is not None else (lambda type, **f: None)
    return Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton", device="cpu", log=log)


# Tiny launch settings force the streamed (multi-pass) rows path and several split programs.
TINY = {"BLOCK_N_MAX": 16, "CHUNK": 16, "TILE": 32, "BLOCK": 64, "PROGRAMS": 3, "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}


def tiny(source: str) -> str:
    return re.sub(r"^(FUSED_\w+?_\d+_)(\w+): int = \d+", lambda m: f"{m.group(1)}{m.group(2)}: int = {TINY.get(m.group(2), 4)}", source, flags=re.MULTILINE)


CHANNEL_CHAIN = """
class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels))
        self.gain = nn.Parameter(torch.rand(channels, 1, 1) + 0.5)

    def forward(self, x, y):
        z = torch.sigmoid(x + self.bias.view(1, -1, 1, 1)) * (self.gain * 2.0)
        return F.hardswish(z - y.mean()) + torch.where(x > 0, x, 0.1 * x)

batch = 64
channels = 48
size = 32

def get_inputs():
    return [torch.randn(batch, channels, size, size), torch.randn(batch, channels, size, size)]

def get_init_inputs():
    return [channels]
"""

ROW_OPS = """
class Model(nn.Module):
    def __init__(self, hidden, temperature):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.temperature = temperature

    def forward(self, x):
        p = torch.softmax(self.norm(x) / self.temperature, dim=-1)
        return p, x.var(dim=-1), torch.argmin(x, dim=-1), torch.logsumexp(x, dim=1)

rows = 512
hidden = 1024

def get_inputs():
    return [torch.randn(rows, hidden) * 3]

def get_init_inputs():
    return [hidden, 0.5]
"""

LOSSES = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        centred = a - a.mean()
        return F.huber_loss(a, b, delta=0.5) + F.binary_cross_entropy_with_logits(a, torch.sigmoid(b)), centred / centred.std()

n = 256
m = 1024

def get_inputs():
    return [torch.randn(n, m), torch.randn(n, m)]

def get_init_inputs():
    return []
"""

MODELNEW = """
class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.scale = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return torch.tanh(self.fc(x)) * self.scale

class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.scale = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return torch.tanh(self.fc(x)) * self.scale

batch = 256
features = 512

def get_inputs():
    return [torch.randn(batch, features)]

def get_init_inputs():
    return [features]
"""


def test_groups_follow_the_graph(tmp_path):
    kinds = {}
    for name, body in (("chain", CHANNEL_CHAIN), ("rows", ROW_OPS), ("losses", LOSSES), ("modelnew", MODELNEW)):
        graph = capture(load_problem(op(tmp_path, name, body)))
        kinds[name] = [it.kind if hasattr(it, "kind") and it.kind != "extern" else "torch" for it in partition(graph)]
    assert kinds["chain"] == ["scalar"]  # y.mean() in two stages, then the elementwise output
    assert set(kinds["rows"]) == {"rows"}
    assert kinds["losses"][0] == "scalar"
    assert kinds["modelnew"] == ["torch", "pointwise"]  # vendor GEMM, fused epilogue


def test_proposals_are_complete_reviewable_files(tmp_path):
    path = op(tmp_path, "chain", CHANNEL_CHAIN)
    (proposal,) = plan(ctx_for(path))
    src = proposal.source
    assert proposal.origin == "template:scalar" and proposal.intent
    assert shape_knobs(src) == shape_knobs(load_problem(path).source)  # launch settings are not knobs
    tree = ast.parse(src)
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert {"Model", "get_inputs", "get_init_inputs"} <= set(names)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    init = next(f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    assert "self.bias = nn.Parameter(torch.randn(channels))" in ast.get_source_segment(src, init)
    assert "@triton.jit" in src and "import triton.language as tl" in src


def test_modelnew_reference_becomes_a_subclass(tmp_path):
    path = op(tmp_path, "modelnew", MODELNEW)
    proposals = plan(ctx_for(path))
    assert [p.origin for p in proposals] == ["template:vendor_gemm+pointwise", "template:gemm"]
    for p in proposals:
        assert "class ModelNew(Model):" in p.source


def test_candidates_are_correct_at_odd_sizes_and_with_streamed_rows(tmp_path):
    jobs = []
    for name, body, knobs in (
        ("chain", CHANNEL_CHAIN, {"batch": 3, "channels": 5, "size": 7}),
        ("rows", ROW_OPS, {"rows": 9, "hidden": 37}),
        ("losses", LOSSES, {"n": 7, "m": 45}),
        ("modelnew", MODELNEW, {"batch": 19, "features": 23}),
    ):
        path = op(tmp_path, name, body)
        for p in plan(ctx_for(path)):
            jobs += [(path, p.source, knobs), (path, tiny(p.source), knobs)]
    results = run_ops(jobs)
    bad = [(j[0], r["why"]) for j, r in zip(jobs, results) if not r["ok"]]
    assert not bad, bad


def test_knob_dependent_constants_are_refused(tmp_path):
    path = op(tmp_path, "scaled", """
class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x / math.sqrt(dim), dim=-1)

batch = 64
dim = 128

def get_inputs():
    return [torch.randn(batch, dim)]

def get_init_inputs():
    return []
""")
    with pytest.raises(Unsupported, match="knobs"):
        capture(load_problem(path))
    notes: list = []
    assert TemplatesProposer().propose(ctx_for(path, notes)) is None
    assert any("knobs" in n for n in notes)


def test_nothing_to_fuse_gives_none(tmp_path):
    path = op(tmp_path, "sort", """
class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sort(x, dim=-1).values

batch = 16
dim = 32

def get_inputs():
    return [torch.randn(batch, dim)]

def get_init_inputs():
    return []
""")
    proposer = TemplatesProposer()
    assert proposer.propose(ctx_for(path)) is None


def test_proposer_yields_each_candidate_once(tmp_path):
    path = op(tmp_path, "modelnew", MODELNEW)
    proposer, ctx = TemplatesProposer(), ctx_for(path)
    origins = []
    while (p := proposer.propose(ctx)) is not None:
        origins.append(p.origin)
    assert origins == ["template:vendor_gemm+pointwise", "template:gemm"]
