"""libdevice's math under Triton's interpreter (okgit.backends.libdevice_cpu): a kernel calling
the portable module and the CUDA one, unary, binary and the int-valued tests, against torch on
the same values; the worker installs it (tests/cases/honest_libdevice judges a candidate so)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

KERNEL = textwrap.dedent("""
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    from okgit.backends.libdevice_cpu import install
    install()
    from triton.language.extra import libdevice
    from triton.language.extra.cuda import libdevice as cuda_libdevice

    @triton.jit
    def kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = o < n
        x = tl.load(x_ptr + o, mask=m)
        y = libdevice.tanh(x) + cuda_libdevice.log1p(x * x) + libdevice.pow(tl.abs(x), 1.5) + libdevice.erf(x)
        y += libdevice.expm1(x) + libdevice.atan2(x, 2.0) + libdevice.trunc(3.0 * x) + libdevice.lgamma(tl.abs(x) + 1.0)
        tl.store(y_ptr + o, y, mask=m)
        flags = libdevice.isinf(x / 0.0) + 2 * libdevice.isnan(x - x) + 4 * libdevice.signbit(x)
        tl.store(z_ptr + o, flags, mask=m)

    torch.manual_seed(0)
    x = torch.randn(1000)
    x[0] = 0.0  # 0 / 0: nan, not inf; signbit of +0: 0
    y, z = torch.empty_like(x), torch.empty(1000, dtype=torch.int32)
    kernel[(8,)](x, y, z, 1000, BLOCK=128)
    ref = (torch.tanh(x) + torch.log1p(x * x) + x.abs() ** 1.5 + torch.erf(x) + torch.expm1(x)
           + torch.atan2(x, torch.tensor(2.0)) + torch.trunc(3.0 * x) + torch.lgamma(x.abs() + 1.0))
    flags = torch.isinf(x / 0.0).int() + 2 * torch.isnan(x - x).int() + 4 * torch.signbit(x).int()
    print(float((y - ref).abs().max()), bool(torch.equal(z, flags)), y.dtype)
""")


@pytest.mark.slow  # a process of its own: torch, Triton and the interpreter
def test_libdevice_runs_under_the_interpreter_as_torch_computes_it():
    proc = subprocess.run([sys.executable, "-c", KERNEL], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    error, flags_equal, dtype = proc.stdout.split()
    assert float(error) < 1e-5 and flags_equal == "True" and dtype == "torch.float32"
