"""Mish as one helper (okgit/lower/helper_mish.py.tmpl): x * n / (n + 2) with n = e * (e + 2),
e = exp(x), where the composition tanh(softplus(x)) took two exps, a log and two divisions. Its
values against float64 over fp32's range under the interpreter, its special values as PyTorch's,
its cost compiled for sm_90 against the composition's, and the lowering that picks it."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conv_forms import HEADER
from scriptrun import run_script

from okgit.eval.types import Reference
from okgit.lower.kernelcode import HELPERS
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

# the helpers' sources, and a kernel applying `expr` of x elementwise
KERNEL = """
import triton
import triton.language as tl

{helpers}

@triton.jit
def apply(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n, other=0.0)
    tl.store(y_ptr + i, {expr}, mask=i < n)
"""
# the composition the lowering used before: x * tanh(softplus(x)), softplus's threshold 20
COMPOSED = "x * _tanh(tl.where(x > 20.0, x, _log1p(tl.exp(x))))"


def kernel_source(expr: str) -> str:
    helpers = "\n\n".join(HELPERS[h].read_text() for h in ("_tanh", "_log1p", "_mish"))
    return KERNEL.format(helpers=helpers, expr=expr)


RUN = r"""
import json, os, sys, types
os.environ["TRITON_INTERPRET"] = "1"
import numpy as np, torch
mod = types.ModuleType("k")
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), mod.__dict__)
x = torch.from_numpy(np.load(sys.argv[2]))
y = torch.empty_like(x)
mod.apply[(x.numel() + 1023) // 1024,](x, y, x.numel(), BLOCK=1024)
np.save(sys.argv[3], y.numpy())
"""


@pytest.mark.slow  # the interpreter over 200,000 values
def test_mish_matches_float64_within_a_few_ulps_and_pytorch_at_special_values(tmp_path):
    finite = np.concatenate([np.linspace(-120, 120, 200001), [0.0, -0.0, 19.999998, 20.0, 20.000002, 44.0, 89.0,
                                                              1e30, -1e30, 1e-30, -1e-30]]).astype(np.float32)
    special = np.array([np.inf, -np.inf, np.nan], dtype=np.float32)
    x = np.concatenate([finite, special])
    (tmp_path / "k.py").write_text(kernel_source("_mish(x)"))
    np.save(tmp_path / "x.npy", x)
    proc = run_script(RUN, [str(tmp_path / "k.py"), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                      {**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    y = np.load(tmp_path / "y.npy")
    x64 = finite.astype(np.float64)
    with np.errstate(over="ignore"):
        exact = x64 * np.tanh(np.log1p(np.exp(x64)))
    # in units of the fp32 spacing at each value of mish above 1e-30 in magnitude (x above about
    # -69); below, where exp(x) nears fp32's smallest normal and a GPU flushes it to zero, within
    # 1e-36 (numpy keeps the subnormals, which hold few bits)
    err = np.abs(y[: finite.size] - exact)
    normal = np.abs(exact) >= 1e-30
    # (4.3 at most here, near x = -10, where mish is about x * exp(x): the roundings of exp, the
    # product, the division and x's multiply add up; a GPU's exp adds a few more, as in the composition)
    assert float(np.max(err[normal] / np.spacing(np.abs(exact[normal]).astype(np.float32)))) <= 6
    assert float(np.max(err[~normal])) <= 1e-36
    want = torch.nn.functional.mish(torch.from_numpy(special)).numpy()
    np.testing.assert_array_equal(y[finite.size:], want)  # inf, NaN (-inf * 0), NaN


SASS = r"""
import json, os, re, subprocess, sys, tempfile, types
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
mod = types.ModuleType("k")
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), mod.__dict__)
compiled = triton.compile(ASTSource(mod.apply, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                                    {"BLOCK": 128}), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
    f.write(compiled.asm["cubin"])
sass = subprocess.run([sys.argv[2], "-sass", f.name], capture_output=True, text=True, check=True).stdout
print(json.dumps(len(re.findall(r"/\*[0-9a-f]{4,}\*/\s+[A-Z@]", sass))))
"""


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas)
def test_mish_compiles_to_a_fraction_of_its_compositions_instructions():
    """Compiled for sm_90 here, one element a thread: the helper's kernel against the same kernel
    applying the composition; the difference is the activation's cost (on KernelBench L2/87's
    convolution tile, 73 instructions an element before, 21 after)."""
    pytest.importorskip("triton.backends.nvidia")
    import triton

    tool = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump"))
    if not tool:
        pytest.skip("no cuobjdump in this Triton")
    counts = {}
    for name, expr in (("none", "x"), ("mish", "_mish(x)"), ("composed", COMPOSED)):
        path = f"{os.environ.get('TMPDIR', '/tmp')}/okgit_mish_{os.getpid()}_{name}.py"
        with open(path, "w") as f:
            f.write(kernel_source(expr))
        proc = subprocess.run([sys.executable, "-c", SASS, path, tool[0]], capture_output=True, text=True, timeout=600,
                              check=False, env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
        os.unlink(path)
        if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr:
            pytest.skip("no ptxas in this Triton")
        assert proc.returncode == 0, proc.stderr[-3000:]
        counts[name] = json.loads(proc.stdout.splitlines()[-1])
    mish, composed = counts["mish"] - counts["none"], counts["composed"] - counts["none"]
    assert 0 < mish * 2 < composed, counts  # 24 against 72 with Triton 3.9


def test_mish_lowers_to_the_helper(tmp_path):
    path = tmp_path / "mish.py"
    path.write_text(HEADER + textwrap.dedent("""
        class Model(nn.Module):
            def forward(self, x):
                return F.mish(x - 0.5) * 2.0

        def get_inputs():
            return [torch.randn(4, 33)]

        def get_init_inputs():
            return []
        """))
    ctx = Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                  device="cpu", log=lambda type, **f: None)
    source = next(p.source for p in plan(ctx) if p.origin.startswith("template:pointwise"))
    assert re.search(r"_mish\(", source) and "_log1p" not in source and "_tanh" not in source, source
