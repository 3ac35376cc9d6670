"""Triton's interpreter with okgit's patch of its language once per kernel run
(okgit.backends.triton.patch_language_once): a kernel whose @triton.jit helpers call helpers, as
Inductor's kernels call triton_helpers, computes what it computed before, and the
language is patched once per launch, not again at each helper call. In this process: the
interpreter is chosen when a function is decorated, so the kernels are a module of their own,
imported with TRITON_INTERPRET set (their helpers are their own: triton.language's, such as
tl.max, were decorated when this process imported Triton, maybe without it)."""

from __future__ import annotations

import importlib.util

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def biggest(a, b):
    return tl.where(a > b, a, b)


@triton.jit
def clamp_low(a):
    return biggest(a, a * 0.0)  # a helper calling a helper


@triton.jit
def relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, clamp_low(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)
'''


def test_helpers_compute_the_same_and_the_language_is_patched_once_per_launch(tmp_path, monkeypatch) -> None:
    import torch
    from triton.runtime import interpreter

    from okgit.backends.triton import patch_language_once

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    (tmp_path / "okgit_once_kernels.py").write_text(KERNELS)
    spec = importlib.util.spec_from_file_location("okgit_once_kernels", tmp_path / "okgit_once_kernels.py")
    assert spec is not None and spec.loader is not None
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    for owner, name in ((interpreter, "_patch_lang"), (interpreter.GridExecutor, "__call__")):
        now = getattr(owner, name)  # Triton's own, also where a test before this one installed okgit's
        monkeypatch.setattr(owner, name, getattr(now, "okgit_original", now))
    patches = []
    real = interpreter._patch_lang_core  # the part of a patch every _patch_lang does, looked up per call

    def counted(*args: object) -> object:
        patches.append(1)
        return real(*args)

    monkeypatch.setattr(interpreter, "_patch_lang_core", counted)

    x = torch.randn(100)
    want = x.clamp(min=0)

    def launch() -> torch.Tensor:
        out = torch.full((100,), float("nan"))
        kernels.relu[(4,)](x, out, 100, BLOCK=32)
        return out

    assert torch.equal(launch(), want) and len(patches) == 4 * 2 + 1  # Triton's own: again at each helper call
    patch_language_once()
    patch_language_once()  # once per process, however often asked
    patches.clear()
    assert torch.equal(launch(), want) and len(patches) == 1
    patches.clear()
    assert torch.equal(launch(), want) and len(patches) == 1  # and the next launch patches its own run
