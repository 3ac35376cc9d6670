"""The vendor calls Inductor leaves to PyTorch, as the standalone seed makes them
(okgit.inductor.externs): a public torch function by its name, Inductor's own function by its
source where it reads no global but torch (max-autotune's bias_addmm: on the H200's sweep on
9d7c409 L2/75's max-autotune seed was refused for it after 53 s of Inductor's benchmarks)."""

from __future__ import annotations

import pytest
import torch

from okgit.inductor.externs import note_externs
from okgit.inductor.gemm import split_gemm_seed
from okgit.inductor.standalone import _externs

BODY = """
    buf0 = empty_strided(args_device, (8, 4), (4, 1), torch.float32)
    extern_kernels.bias_addmm(reinterpret_tensor(arg1_1, (8, 4), (0, 1), 0), arg2_1, reinterpret_tensor(arg0_1, (6, 4), (1, 6), 0), alpha=1, beta=1, out=buf0)
    extern_kernels.mm(buf0, arg3_1, out=buf1)
"""


def test_a_public_function_by_name_and_inductors_own_by_its_source():
    externs: dict[str, str] = {}
    helpers: dict[str, str] = {}
    note_externs(BODY, externs, helpers)
    assert externs == {"bias_addmm": "_extern_bias_addmm", "mm": "torch.mm"}
    assert list(helpers) == ["bias_addmm"] and helpers["bias_addmm"].startswith("def _extern_bias_addmm(")
    # the standalone file's block defines it and points the namespace at it; it runs as Inductor's
    scope: dict = {"torch": torch}
    exec(_externs(externs, helpers), scope)
    bias, a, b = torch.randn(4), torch.randn(8, 6), torch.randn(6, 4)
    out = torch.empty(8, 4)
    scope["extern_kernels"].bias_addmm(bias.expand(8, 4), a, b, alpha=1, beta=1, out=out)
    torch.testing.assert_close(out, torch.addmm(bias, a, b))
    assert scope["extern_kernels"].mm is torch.mm


def test_an_extern_that_is_no_function_of_inductors_own_is_refused_by_name():
    with pytest.raises(ValueError, match="extern kernel not_an_extern has no public torch function"):
        note_externs("extern_kernels.not_an_extern(x)", {}, {})


def test_the_split_precision_seed_takes_bias_addmm_too():
    externs: dict[str, str] = {}
    helpers: dict[str, str] = {}
    note_externs(BODY, externs, helpers)
    seed = "import torch\n\n" + _externs(externs, helpers) + "\n"
    split = split_gemm_seed(seed)
    assert split is not None and "SimpleNamespace(bias_addmm=_split_addmm, mm=_split_mm)" in split
