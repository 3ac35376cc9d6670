"""The Inductor seed's vendor GEMMs on the split-precision GEMM (okgit.inductor.gemm): the text
rewrite on the captured fixture of tests/inductor, the stand-ins for torch.mm / addmm / bmm
against torch under Triton's interpreter (bias broadcast, alpha and beta, `out=` with strides,
K split into ranges, operands split ahead), and the rewritten seed run through its compiled
path."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from okgit.eval.parent.gates.static import static_findings
from okgit.inductor.gemm import split_gemm_seed
from okgit.inductor.standalone import standalone_file
from okgit.lower.kinds.gemm import vendor_stand_ins

HERE = Path(__file__).parent
OP = HERE / "bn_min_softmax.py"
IMPORTS = "import torch\nimport triton\nimport triton.language as tl\n\n"


def _seed() -> str:
    return standalone_file(OP.read_text(), json.loads((HERE / "bn_min_softmax.capture.json").read_text()), "cpu")


def _run(script: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_seed_calls_the_stand_ins_and_passes_the_static_gate():
    seed = _seed()
    split = split_gemm_seed(seed)
    assert split is not None and "extern_kernels = SimpleNamespace(addmm=torch.addmm)" in seed
    assert "extern_kernels = SimpleNamespace(addmm=_split_addmm)" in split
    tree = ast.parse(split)
    defined = {f.name for f in tree.body if isinstance(f, (ast.FunctionDef, ast.ClassDef))}
    assert {"_split_mm", "_split_addmm", "_split_bmm", "_split_gemm", "_GemmPlan"} <= defined
    assert static_findings(tree) == []
    # Inductor's own kernels and the dispatch are the seed's, unchanged
    assert split.replace(split[split.index("# the vendor GEMMs on tensor cores"):split.index("extern_kernels = ")], "") == \
        seed.replace("addmm=torch.addmm", "addmm=_split_addmm")


def test_a_seed_without_vendor_gemms_has_no_second():
    assert split_gemm_seed(_seed().replace("SimpleNamespace(addmm=torch.addmm)", "SimpleNamespace(convolution=torch.convolution)")) is None
    assert split_gemm_seed("import torch\n") is None


STAND_INS = r"""
import importlib.util, json, sys, torch
spec = importlib.util.spec_from_file_location("stand_ins", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
torch.manual_seed(0)
worst = {}
def check(name, got, want):
    err = float((got.double() - want).abs().max() / want.abs().max())
    worst[name] = err
a, b = torch.randn(19, 70), torch.randn(70, 33)
bias = torch.randn(33)
check("mm", m._split_mm(a, b), a.double() @ b.double())
check("addmm", m._split_addmm(bias, a, b, beta=0.5, alpha=2.0), 0.5 * bias.double() + 2.0 * (a.double() @ b.double()))
out = torch.empty(33, 19).t()  # out= with other strides
m._split_addmm(bias, a, b, out=out)
check("addmm out=", out, bias.double() + a.double() @ b.double())
x, y = torch.rand(3, 21, 40), torch.rand(3, 40, 18)
check("bmm", m._split_bmm(x, y), x.double() @ y.double())
p, q = torch.rand(21, 1024), torch.rand(1024, 18)  # one tile: K split into ranges (4 on a CPU)
assert m._GemmPlan(p, q, 128, 128, 32, "tf32x3-split", 0, 0, 0).split_k == 4
check("mm split-K", m._split_mm(p, q), p.double() @ q.double())
m.GEMM_SPLIT_AHEAD_MIN = 0
w = torch.randn(33, 70)
check("mm split ahead", m._split_mm(a, w.t()), a.double() @ w.double().t())
h = torch.randn(19, 70).half()
fallback = m._split_mm(h, h.t())
worst["half falls back"] = float((fallback.float() - torch.mm(h, h.t()).float()).abs().max())
print(json.dumps(worst))
"""


@pytest.mark.slow  # the stand-ins under the interpreter, in a process
def test_stand_ins_match_torch(tmp_path):
    path = tmp_path / "stand_ins.py"
    path.write_text(IMPORTS + vendor_stand_ins())
    worst = _run(STAND_INS, str(path))
    assert all(err < 1e-5 for err in worst.values()), worst


SEED_RUN = r"""
import importlib.util, json, sys, torch
spec = importlib.util.spec_from_file_location("seed", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
calls = []
stand_in = m.extern_kernels.addmm
def counted(*a, **k):
    calls.append(1)
    return stand_in(*a, **k)
m.extern_kernels.addmm = counted
torch.manual_seed(0)
model = m.Model(*m.get_init_inputs())
x, = m.get_inputs()
with torch.no_grad():
    assert m.fits_train(model, x)  # the compiled path, not the reference's forward
    got = model(x)
    want = model.double().forward_reference(x.double())
print(json.dumps({"calls": len(calls), "err": float((got.double() - want).abs().max())}))
"""


@pytest.mark.slow  # the seed under the interpreter, in a process
def test_the_rewritten_seed_runs_its_compiled_path_with_the_stand_in(tmp_path):
    path = tmp_path / "seed.py"
    path.write_text(split_gemm_seed(_seed()))
    got = _run(SEED_RUN, str(path))
    assert got["calls"] == 1 and got["err"] < 1e-4, got


def test_the_proposer_offers_the_split_seed_right_after_the_default(monkeypatch, tmp_path):
    """On a GPU: the default seed, then the same with its vendor GEMMs split, then max-autotune's
    (both modes made by one okgit.inductor child process: here the fixture's file stands in for
    it, one file per mode). The compile begins with the search (`begin`, which the driver calls
    before the first proposal), once per problem, and its process is let go once its modes are done."""
    from okgit.eval.types import Reference
    from okgit.problem import load_problem
    from okgit.search.proposers import inductor
    from okgit.search.types import Context

    made, closed = [], []

    class Child:
        def __init__(self, reference, root, device, modes, knobs, sizes):
            made.append(list(modes))
            self.modes = list(modes)

        def next(self):
            if not self.modes:
                return None, [], ""
            mode = self.modes.pop(0)
            return mode, [(_seed(), f"seed ({mode})")], ""

        def close(self):
            closed.append(1)

    monkeypatch.setattr(inductor, "SeedProcess", Child)
    ctx = Context(problem=load_problem(OP), reference=Reference(device="cuda", timed=True), backend="triton",
                  device="cuda", log=lambda _t, **f: None)
    proposer = inductor.InductorProposer()
    proposer.begin(ctx)
    assert made == [["default", "max-autotune-no-cudagraphs"]]  # before any proposal was asked for
    proposer.begin(ctx)  # the same problem: the same compile, not a second
    origins, screened = [], []
    while (p := proposer.propose(ctx)) is not None:
        origins.append(p.origin)
        screened.append(p.screen)
    assert origins == ["inductor", "inductor:split_gemm", "inductor:max-autotune-no-cudagraphs"]
    assert all(screened)  # each judged by its speed first where the search has a timed best
    assert made == [["default", "max-autotune-no-cudagraphs"]] and closed == [1]
