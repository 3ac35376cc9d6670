"""The template proposer: graph capture, grouping, rendering, and correctness of what it writes."""

from __future__ import annotations

import ast
import math
import re
import textwrap

import pytest
from oprun import run_ops

from okgit.eval.types import Reference
from okgit.lower.capture import capture
from okgit.lower.fusion import Group, partition
from okgit.lower.graph import Bound, Unsupported
from okgit.lower.kinds import base as kinds_base
from okgit.lower.kinds.pointwise import Pointwise
from okgit.lower.opfile import FileLowering
from okgit.problem import load_problem, shape_knobs
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


def rewrites_right(tmp_path, ops: dict[str, tuple[str, dict[str, int]]], kind: str) -> None:
    """Each op's candidates that turn the rewrite-only `kind` on (their origin tags name it first),
    right against PyTorch under the interpreter at the op's sizes and at its other knobs."""
    jobs = []
    for name, (source, knobs) in ops.items():
        path = op(tmp_path, name, source)
        taken = [p for p in plan(ctx_for(path)) if p.origin.startswith(f"template:{kind}+")]
        assert taken, name
        jobs += [(path, p.source, k) for p in taken for k in ({}, knobs)]
    results = run_ops(jobs, timeout=900)
    bad = [(job[0], job[2], r["why"][-600:]) for job, r in zip(jobs, results) if not r["ok"]]
    assert not bad, bad


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


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_groups_follow_the_graph(tmp_path):
    kinds = {}
    for name, body in (("chain", CHANNEL_CHAIN), ("rows", ROW_OPS), ("losses", LOSSES), ("modelnew", MODELNEW)):
        graph = capture(load_problem(op(tmp_path, name, body)))
        items = partition(graph)
        low = FileLowering(graph, items)  # the kinds every candidate has
        kinds[name] = [next(k.name for k in low.kinds if k.claims(it, low)) if isinstance(it, Group) else "torch" for it in items]
    assert kinds["chain"] == ["scalar"]  # y.mean() in two stages, then the elementwise output
    assert set(kinds["rows"]) == {"rows"}
    assert kinds["losses"][0] == "scalar"
    assert kinds["modelnew"] == ["torch", "pointwise"]  # vendor GEMM, fused epilogue


def test_a_new_kind_joins_through_the_registry_alone(tmp_path, monkeypatch):
    """Adding a kind is its module: registered with the decorator, it gets its candidate, in
    registry order, without an edit to the lowering or the proposer."""
    monkeypatch.setattr(kinds_base.KINDS, "_entries", dict(kinds_base.KINDS._entries))

    @kinds_base.template_kind(order=25)
    class Wide(Pointwise):
        name = "wide"
        optional = True
        label = "wide blocks"

        def tunables(self, NAME: str, numel: int) -> dict[str, int]:
            return {f"{NAME}_BLOCK": 4096, f"{NAME}_NUM_WARPS": 8}

    path = op(tmp_path, "chain", CHANNEL_CHAIN.replace("y.mean()", "y.abs()"))
    proposals = plan(ctx_for(path))
    assert [p.origin for p in proposals] == ["template:pointwise", "template:wide"]
    assert "FUSED_WIDE_0_BLOCK: int = 4096" in proposals[1].source
    assert "fused_pointwise_0" not in proposals[1].source


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
    assert [p.origin for p in proposals] == ["template:gemm", "template:vendor_gemm+pointwise"]
    for p in proposals:
        assert "class ModelNew(Model):" in p.source


@pytest.mark.slow  # candidates under the interpreter (oprun)
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


def uncovered(tmp_path, forward: str) -> str:
    """An op file whose forward is `forward` over x, [2, 4, 8, 8], beside a 3x3 weight of 4 channels."""
    return op(tmp_path, "uncovered", f"""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4, 3, 3))

    def forward(self, x):
        return {forward}

batch = 2
size = 8

def get_inputs():
    return [torch.randn(batch, 4, size, size)]

def get_init_inputs():
    return []
""")


@pytest.mark.parametrize(("forward", "why"), [
    ("torch.cummax(x, dim=1).values", "no template covers aten.cummax (scan)"),
    ("F.adaptive_avg_pool2d(x, 2)", "no template covers aten.adaptive_avg_pool2d (pooling)"),
    ("F.relu(torch.cummax(x, dim=1).values).sum(dim=(2, 3)).sort(dim=1).values", None),  # the sum is a group
    ("F.conv2d(x, self.weight)", "nothing for a Triton kernel beside aten.conv2d (convolution)"),
    # Triton has no complex dtype: the abs of an FFT stays with the vendor call, not a pointwise kernel
    ("torch.abs(torch.fft.fft(x))", "no template covers aten.fft_fft, aten.abs"),
])
def test_a_note_names_the_op_no_template_covers(tmp_path, forward, why):
    path = uncovered(tmp_path, forward)
    notes: list = []
    proposals = plan(ctx_for(path, notes))
    if why is None:
        assert proposals and not any("no template covers" in n for n in notes)
    else:  # a lone convolution has okgit's own kernels (kinds/conv_direct.py, conv.py) beside the note on the plain candidate
        assert [p.origin for p in proposals] == (["template:conv_direct", "template:conv"] if "conv2d" in forward else [])
        assert f"templates: {why}" in notes


def test_candidates_planned_at_the_searchs_begin_are_the_same_and_their_notes_come_on_its_thread(tmp_path):
    """`begin` plans in a thread while the search profiles the reference; the search's first
    `propose` takes those candidates, and the notes are written then, from the search's own thread
    (the journal has one writer)."""
    import threading

    path = uncovered(tmp_path, "F.conv2d(x, self.weight)")
    written: list = []
    ctx = ctx_for(path)
    ctx.log = lambda type, **f: written.append((threading.current_thread().name, type, f.get("message")))
    proposer = TemplatesProposer()
    proposer.begin(ctx)
    taken = []
    while (p := proposer.propose(ctx)) is not None:
        taken.append(p.source)
        assert p.screen  # alternatives of one computation: after the first, checked only if faster
    notes: list = []
    assert taken == [p.source for p in plan(ctx_for(path, notes))] and taken
    assert written and [m for _, _, m in written] == notes
    assert {name for name, _, _ in written} == {threading.current_thread().name}


def test_proposer_yields_each_candidate_once(tmp_path):
    path = op(tmp_path, "modelnew", MODELNEW)
    proposer, ctx = TemplatesProposer(), ctx_for(path)
    origins = []
    while (p := proposer.propose(ctx)) is not None:
        origins.append(p.origin)
    assert origins == ["template:gemm", "template:vendor_gemm+pointwise"]


ATTRIBUTES = """
class Model(nn.Module):
    def __init__(self, hidden, temperature, eps, slope, beta, scale):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.temperature = temperature
        self.slope = slope
        self.beta = beta
        self.scale = scale

    def forward(self, x, y):
        z = F.leaky_relu(self.norm(x), self.slope) * (1 - self.slope) * self.scale
        p = torch.log_softmax(z / self.temperature, dim=-1) - math.log(self.temperature)
        return p, F.smooth_l1_loss(x, y, beta=self.beta), F.softplus(y, beta=self.beta * self.beta)

rows = 256
hidden = 512

def get_inputs():
    return [torch.randn(rows, hidden) * 3, torch.randn(rows, hidden)]

def get_init_inputs():
    return [hidden, 0.7, 1e-3, 0.1, 0.3, 1.0 / math.sqrt(hidden)]
"""


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_float_attributes_are_read_at_run_time(tmp_path):
    """Constants from the module's float attributes reach the kernels as scalar arguments,
    recomputed in the forward from self (also through log, 1 - a, a * a and a submodule)."""
    path = op(tmp_path, "attributes", ATTRIBUTES)
    graph = capture(load_problem(path))
    exprs = {a.expr for n in graph.nodes for a in n.args if isinstance(a, Bound)}
    assert {"self.temperature", "self.norm.eps", "self.slope", "self.beta", "self.scale"} <= {
        e for x in exprs for e in re.findall(r"self\.[\w.]+", x)
    }
    proposals = plan(ctx_for(path))
    assert proposals
    for p in proposals:
        kernels = p.source.split("class Model")[0]
        for value in ("0.7", "0.001", "0.1", "0.3", "0.15", repr(0.3 * 0.3), repr(0.9 * 1.0 / math.sqrt(512)), repr(math.log(0.7))):
            assert not re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.])", kernels), value
        for attr in ("self.temperature", "self.norm.eps", "self.slope", "self.beta", "self.scale"):
            assert attr in p.source.split("def forward")[1]
    jobs = []
    for p in proposals:
        jobs += [(path, p.source, {"rows": 9, "hidden": 37}), (path, tiny(p.source), {"rows": 9, "hidden": 37})]
    results = run_ops(jobs)  # also with every float of get_init_inputs x1.5
    bad = [r["why"] for r in results if not r["ok"]]
    assert not bad, bad


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_the_harness_rejects_a_baked_attribute(tmp_path):
    """A candidate that bakes self.temperature passes at the default argument only."""
    path = op(tmp_path, "temperature", """
class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return torch.log_softmax(x / self.temperature, dim=1)

batch = 64
vocab = 128

def get_inputs():
    return [torch.randn(batch, vocab) * 4]

def get_init_inputs():
    return [0.7]
""")
    (proposal,) = plan(ctx_for(path))
    assert "float(self.temperature)" in proposal.source
    baked = proposal.source.replace("float(self.temperature)", "0.7")
    good, bad = run_ops([(path, proposal.source, {"batch": 5, "vocab": 33}), (path, baked, {"batch": 5, "vocab": 33})])
    assert good["ok"], good["why"]
    assert not bad["ok"] and "x1.5" in bad["why"]


REFUSED = {
    # a constant of two attributes
    "two": ("def __init__(self, a, b):", "self.a = a\n        self.b = b", "x * (self.a * self.b)", "[0.7, 0.3]"),
    # a function of one attribute no template form recomputes
    "odd": ("def __init__(self, a):", "self.a = a", "x * (self.a ** 3 + self.a)", "[0.7]"),
    # the structure follows the attribute
    "branch": ("def __init__(self, a):", "self.a = a", "(x * 2.0 if self.a > 0.8 else x - 1.0) * self.a", "[0.7]"),
    # a constructor float kept outside the module's float attributes
    "closure": ("def __init__(self, a):", "self.f = lambda t: t * a", "self.f(x)", "[0.7]"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_attribute_constants_that_cannot_be_recomputed_are_refused(tmp_path, case):
    init, body, expr, args = REFUSED[case]
    path = op(tmp_path, case, f"""
class Model(nn.Module):
    {init}
        super().__init__()
        {body}

    def forward(self, x):
        return torch.relu({expr})

batch = 64
dim = 128

def get_inputs():
    return [torch.randn(batch, dim)]

def get_init_inputs():
    return {args}
""")
    with pytest.raises(Unsupported):
        capture(load_problem(path))
    assert plan(ctx_for(path)) == []


def test_a_zero_attribute_is_bound_when_it_can_be(tmp_path):
    path = op(tmp_path, "shift", """
class Model(nn.Module):
    def __init__(self, shift, p):
        super().__init__()
        self.shift = shift
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return torch.sigmoid(self.drop(x) + self.shift)

batch = 64
dim = 128

def get_inputs():
    return [torch.randn(batch, dim)]

def get_init_inputs():
    return [0.0, 0.0]
""")
    graph = capture(load_problem(path))
    assert [a.expr for n in graph.nodes for a in n.args if isinstance(a, Bound)] == ["self.shift"]


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_attributes_the_constructor_floats_do_not_set_may_stay_baked(tmp_path):
    """nn.Softplus()'s beta of 1 and a zero dropout change the structure when moved, but no
    constructor float sets them: they stay as they are, the constructor's float is bound."""
    path = op(tmp_path, "fixed", """
class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.act = nn.Softplus()
        self.drop = nn.Dropout(0.0)
        self.scale = scale

    def forward(self, x):
        return self.drop(self.act(x)) * self.scale

batch = 64
dim = 128

def get_inputs():
    return [torch.randn(batch, dim)]

def get_init_inputs():
    return [0.7]
""")
    graph = capture(load_problem(path))
    exprs = [a.expr for n in graph.nodes for a in n.args if isinstance(a, Bound)]
    assert "self.scale" in exprs and "self.act.beta" not in exprs
    (proposal,) = plan(ctx_for(path))
    (result,) = run_ops([(path, proposal.source, {"batch": 5, "dim": 33})])
    assert result["ok"], result["why"]


NAN_SCALARS = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.amax() - x.amin(), x - x.max()

n = 64
m = 96

def get_inputs():
    x = torch.randn(n, m)
    x[torch.rand(n, m) < {share}] = float("nan")
    return [x]

def get_init_inputs():
    return []
"""


@pytest.mark.slow  # candidates under the interpreter (oprun)
@pytest.mark.parametrize("share", [0.0, 0.001, 1.0])
def test_scalar_max_and_min_are_nan_when_torch_says_so(tmp_path, share):
    """torch's max and min over everything are NaN when any element is: a single NaN (about 6
    of 6144 elements, in one of several split programs), all NaN, and none."""
    path = op(tmp_path, "nan_scalars", NAN_SCALARS.replace("{share}", str(share)))
    proposals = plan(ctx_for(path))
    assert [p.origin for p in proposals] == ["template:scalar"]
    jobs = [(path, p.source, {}) for p in proposals] + [(path, tiny(p.source), {}) for p in proposals]
    results = run_ops(jobs)
    assert all(r["ok"] for r in results), [r["why"] for r in results]
