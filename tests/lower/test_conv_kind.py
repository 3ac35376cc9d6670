"""The implicit-GEMM convolution kinds (okgit/lower/kinds/conv.py and its templates): which calls
they take, and their kernels run under Triton's interpreter against float64 over the forms a
convolution takes (1D, 2D, 3D; stride, padding, dilation, groups; transposed with stride,
dilation, output padding and groups, phases without taps included; with and without bias; a
lone call and an epilogue with parameters) and over tile settings. The interpreter computes a
dot in fp32 whatever its precision; the TF32 kind's rounding of both operands is its own code
and is checked against a float64 convolution of rounded operands."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from conv_forms import HEADER, form, narrow_indices
from oprun import run_ops
from scriptrun import run_script

from okgit.eval.types import Reference, Status
from okgit.lower.capture import capture
from okgit.lower.kinds import kinds
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

CONV = next(k for k in kinds() if k.name == "conv")
FORMS = {
    "conv1d, strided, dilated": form("nn.Conv1d(cin, cout, 3, stride=2, padding=1, dilation=2)", "F.gelu(y)",
                                     "torch.rand(batch, cin, 23)", 6, 10, 1),
    "conv2d, grouped, asymmetric": form(
        "nn.Conv2d(cin, cout, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)", "y * self.p",
        "torch.randn(batch, cin, 9, 8)", 20, 12, 2),
    "conv3d, padded": form("nn.Conv3d(cin, cout, (2, 3, 1), padding=1)", "torch.sigmoid(y) - self.p",
                           "torch.rand(batch, cin, 4, 5, 6)", 3, 16, 3),
    "conv2d, lone, no bias": form("nn.Conv2d(cin, cout, 3, bias=False)", "y", "torch.rand(batch, cin, 9, 10)", 7, 20, 2),
    # a pointwise convolution: a GEMM per sample on x in place (tests/lower/test_conv_pointwise.py)
    "conv2d, 1x1": form("nn.Conv2d(cin, cout, 1)", "F.leaky_relu(y, 0.1)", "torch.rand(batch, cin, 6, 7)", 16, 24, 2),
    "conv2d, 1x1, strided": form("nn.Conv2d(cin, cout, 1, stride=(2, 1))", "y * self.p", "torch.rand(batch, cin, 6, 7)",
                                 16, 24, 2),
    "transposed 2d, strided, output padding": form(
        "nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1, output_padding=1)", "y + self.p",
        "torch.rand(batch, cin, 5, 6)", 6, 8, 2),
    "transposed 3d, grouped": form(
        "nn.ConvTranspose3d(cin, cout, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 0), "
        "groups=2)", "torch.tanh(y)", "torch.rand(batch, cin, 3, 4, 3)", 8, 8, 3),
    "transposed 2d, stride 3, dilation 2": form("nn.ConvTranspose2d(cin, cout, 3, stride=3, padding=2, dilation=2)",
                                                "torch.relu(y)", "torch.randn(batch, cin, 5, 4)", 5, 6, 2),
    # stride and dilation share a factor: the odd output positions have no tap, only the bias
    "transposed 1d, phases without taps": form("nn.ConvTranspose1d(cin, cout, 3, stride=2, dilation=2, padding=1)",
                                               "y * 2.0", "torch.rand(batch, cin, 7)", 4, 5, 1),
}


def ctx_for(path, device: str = "cpu") -> Context:
    """A proposer's context on `device` (a GPU's candidates rendered, run here under the interpreter)."""
    return Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                   device=device, log=lambda type, **f: None)


def conv_source(tmp_path, name: str, origin: str = "template:conv") -> tuple[str, str]:
    path = tmp_path / (re.sub(r"\W+", "_", name) + ".py")
    path.write_text(FORMS[name])
    found = [p for p in plan(ctx_for(path, "cuda")) if p.origin == origin]
    assert found, name
    return str(path), found[0].source


def setting(source: str, name: str, value) -> str:
    out, n = re.subn(rf"^(FUSED_CONV(?:_TF32)?_\d+_{name}: \w+) = .*$",
                     lambda m: f"{m.group(1)} = {json.dumps(value)}", source, flags=re.MULTILINE)
    assert n == 1, name
    return out


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_every_form_matches_float64(tmp_path):
    jobs, names = [], []
    for name in FORMS:
        path, source = conv_source(tmp_path, name)
        jobs.append((path, source, {}))
        names.append(name)
    # small tiles: several row and channel tiles, banded by GROUP_M, K in several steps
    for name in ("conv2d, grouped, asymmetric", "transposed 3d, grouped"):
        path, source = conv_source(tmp_path, name)
        for key, value in (("BLOCK_M", 16), ("BLOCK_N", 16), ("BLOCK_K", 16), ("GROUP_M", 2)):
            source = setting(source, key, value)
        jobs.append((path, source, {}))
        names.append(f"{name}, small tiles")
    # an input that needs no padding read in its own layout (NCHW, strided channels), no copy
    for name in ("conv2d, lone, no bias", "conv2d, 1x1, strided"):
        path, source = conv_source(tmp_path, name)
        jobs.append((path, setting(source, "INPUT_COPY", 0), {}))
        names.append(f"{name}, read in place")
    path, source = conv_source(tmp_path, "transposed 2d, strided, output padding")
    jobs.append((path, narrow_indices(source), {}))
    names.append("transposed 2d, 32-bit indices")
    results = run_ops(jobs, timeout=900)
    bad = [(n, r["why"]) for n, r in zip(names, results, strict=True) if not r["ok"]]
    assert not bad, bad


TF32_SCRIPT = r"""
import json, sys, types, torch
def load(path):
    mod = types.ModuleType("op")
    mod.__file__ = path
    exec(compile(open(path).read(), path, "exec"), mod.__dict__)
    return mod
def tf32(t):
    return ((t.view(torch.int32) + 0x1000) & -8192).view(torch.float32)
ref = load(sys.argv[1])
out = {}
for label, path in (("tf32", sys.argv[2]), ("tf32x3", sys.argv[3])):
    cand = load(path)
    torch.manual_seed(0)
    model = cand.Model(*ref.get_init_inputs())
    torch.manual_seed(1)
    x = ref.get_inputs()[0]
    w = model.conv.weight.detach()
    with torch.no_grad():
        got = model(x).double()
        exact = torch.nn.functional.conv2d(x.double(), w.double())
        rounded = torch.nn.functional.conv2d(tf32(x).double(), tf32(w).double())
    out[label] = {"to_exact": float((got - exact).abs().max()), "to_rounded": float((got - rounded).abs().max()),
                  "scale": float(exact.abs().max())}
print(json.dumps(out))
"""


@pytest.mark.slow  # candidates under the interpreter, in a process
def test_tf32_rounds_both_operands_to_nearest(tmp_path):
    """The TF32 kind computes the convolution of its operands rounded to TF32 (to nearest), as a
    TF32 cuDNN kernel does, and nothing coarser; the 3xTF32 kind's is the fp32 one."""
    name = "conv2d, lone, no bias"
    path, tf32 = conv_source(tmp_path, name, "template:conv_tf32")
    _, split = conv_source(tmp_path, name)
    (tmp_path / "tf32.py").write_text(tf32)
    (tmp_path / "split.py").write_text(split)
    proc = run_script(TF32_SCRIPT, [path, str(tmp_path / "tf32.py"), str(tmp_path / "split.py")],
                      {**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    ulp = got["tf32"]["scale"] * 2.0**-23
    assert got["tf32"]["to_rounded"] < 64 * ulp < got["tf32"]["to_exact"], got
    assert got["tf32x3"]["to_exact"] < 64 * ulp, got


def _graph(tmp_path, conv: str, inputs: str):
    path = tmp_path / "g.py"
    path.write_text(HEADER + textwrap.dedent(f"""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = {conv}

            def forward(self, x):
                return self.conv(x)

        def get_inputs():
            return [{inputs}]

        def get_init_inputs():
            return []
        """))
    return path, capture(load_problem(path))


@pytest.mark.parametrize(("conv", "inputs", "why"), [
    ("nn.Conv2d(8, 16, 3, groups=8)", "torch.rand(2, 8, 9, 9)", "1 input channel per group (depthwise"),
    ("nn.Conv2d(8, 16, 3, padding='same')", "torch.rand(2, 8, 9, 9)", "padding given as 'same'"),
    ("nn.Conv2d(8, 16, 3).half()", "torch.rand(2, 8, 9, 9).half()", "float16"),
    ("nn.Conv2d(16, 16, 3, groups=2)", "torch.rand(2, 16, 9, 9)", "8 input channels per group"),
    ("nn.Conv2d(18, 16, 3, groups=2)", "torch.rand(2, 18, 9, 9)", None),
    ("nn.ConvTranspose2d(8, 16, 3, groups=2)", "torch.rand(2, 8, 9, 9)", None),
])
def test_which_convolutions_it_takes_and_the_note_where_not(tmp_path, conv, inputs, why):
    path, graph = _graph(tmp_path, conv, inputs)
    call = next(n for n in graph.nodes if n.kind == "extern")
    assert CONV.seeds(call) is (why is None)
    notes: list[str] = []
    ctx = Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                  device="cuda", log=lambda type, **f: notes.append(f.get("message", "")))
    # the conv kinds' candidates (another kind's, e.g. a direct grouped convolution, may stand beside them)
    ours = [p.origin for p in plan(ctx) if {"conv", "conv_tf32"} & set(p.origin.removeprefix("template:").split("+"))]
    if why is None:
        assert ours == ["template:conv", "template:conv_tf32"], ours
    else:
        assert ours == [] and any("Triton convolution (3xTF32)): " in n and why in n for n in notes), notes


@pytest.mark.slow  # the real evaluator
def test_the_proposers_conv_candidate_is_judged_correct_by_the_evaluator(tmp_path, evaluator):
    """Through the template proposer and the real evaluator (CPU, interpreter): the 3xTF32
    convolution with its epilogue is correct at every checked shape and seed. The TF32 one, which
    a CPU run does not offer, is incorrect there: no layout of the CPU reference runs in TF32 (its
    own error is fp32's), and the precision rule holds it to that."""
    path = tmp_path / "conv_relu.py"
    path.write_text(form("nn.Conv2d(cin, cout, 3, padding=1)", "torch.relu(y) * self.p",
                         "torch.rand(batch, cin, 12, 10)", 8, 16, 2))
    problem = load_problem(path)
    proposals = {p.origin: p for p in plan(ctx_for(path))}
    assert list(proposals) == ["template:vendor_conv+pointwise", "template:conv",
                               "template:vendor_conv_cl+pointwise"]  # 8 input channels: not the direct kernel's
    split = evaluator.evaluate(problem, proposals["template:conv"].source)
    assert split.status is Status.correct, split.error
    assert split.max_abs_error is not None and split.kernel_shapes
    gpu = {p.origin: p for p in plan(ctx_for(path, "cuda"))}
    tf32 = evaluator.evaluate(problem, gpu["template:conv_tf32"].source)
    assert tf32.status is Status.incorrect and tf32.error is not None, tf32.status


SM90_SCRIPT = r"""
import inspect, json, sys, types
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
path, kernel, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
mod = types.ModuleType("cand")
mod.__file__ = path
exec(compile(open(path).read(), path, "exec"), mod.__dict__)
fn = getattr(mod, kernel)
params = list(inspect.signature(fn.fn).parameters.values())
setting = lambda key: getattr(mod, f"{prefix}_{key}")
out = {}
for wide in (False, True):
    values = {"BLOCK_M": setting("BLOCK_M"), "BLOCK_N": setting("BLOCK_N"), "BLOCK_K": setting("BLOCK_K"),
              "GROUP_M": setting("GROUP_M"), "PRECISION": setting("PRECISION"),
              "ROUND": setting("PRECISION") == "tf32", "WIDE": wide, "CHUNKS": wide, "VEC": 1,
              "RUN": setting("BLOCK_K") if wide else 1, "ROWS": wide,  # the plan's layouts with the 64-bit indices
              "TMA_A": False, "TMA_B": False}  # pointers (tests/lower/test_conv_tma.py compiles the TMA path)
    signature = {p.name: "constexpr" if "constexpr" in str(p.annotation) else "*i32" if p.name == "t_ptr"
                 else "*fp32" if p.name.endswith("_ptr") else "i32" for p in params}
    constants = {p.name: values[p.name] for p in params if signature[p.name] == "constexpr"}
    compiled = triton.compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": setting("NUM_WARPS"), "num_stages": setting("NUM_STAGES")})
    ptx = compiled.asm["ptx"]
    out[str(wide)] = {"wgmma": ptx.count("wgmma.mma_async"), "cp_async": ptx.count("cp.async."),
                      "shared": compiled.metadata.shared}
print(json.dumps(out))
"""


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas)
@pytest.mark.parametrize("origin", ["template:conv", "template:conv_tf32"])
def test_the_kernel_compiles_for_hopper_on_tensor_cores(tmp_path, origin):
    """Compiled for sm_90 here, without a GPU (Triton's bundled ptxas), at the defaults and with
    64-bit indices: the products run as wgmma (Hopper's tensor-core instruction) and the tile
    loads are pipelined (cp.async); a kernel that only ran under the interpreter would not show it."""
    pytest.importorskip("triton.backends.nvidia")
    path, source = conv_source(tmp_path, "transposed 3d, grouped", origin)
    cand = tmp_path / "cand.py"
    cand.write_text(source)
    name = "fused_conv_0" if origin == "template:conv" else "fused_conv_tf32_0"
    proc = subprocess.run([sys.executable, "-c", SM90_SCRIPT, str(cand), f"{name}_kernel", name.upper()],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("no ptxas in this Triton")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for wide, got in json.loads(proc.stdout.splitlines()[-1]).items():
        assert got["wgmma"] > 0 and got["cp_async"] > 0, (wide, got)
