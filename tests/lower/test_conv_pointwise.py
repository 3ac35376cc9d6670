"""The conv kinds' pointwise path (conv_plan.py.tmpl's _ConvPointwise, conv_pointwise.py.tmpl): a
convolution whose kernel is all ones, stride 1, no padding, one group, runs as a GEMM per sample
on x where it is, with no copy of the input, and against float64 under Triton's interpreter over
1D, 2D and 3D, with and without bias and epilogue, odd sizes (positions and channels not whole
tiles), batches of 1 and 3, and an input in channels-last; other convolutions keep the
implicit-GEMM plan."""

from __future__ import annotations

import re

import pytest
import torch
from oprun import run_ops
from test_conv_kind import ctx_for, form, setting
from test_conv_packed import SM90_COMPILE, compiled_for_sm90, module
from test_conv_tma import candidate, run_jobs

from okgit.lower.capture import capture
from okgit.lower.kinds.conv import conv_spec, pointwise
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan

SMALL = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}
# name: (op file text, tile settings): every one a pointwise convolution
FORMS = {
    # 35 positions in tiles of 16, 67 channels in K steps of 16, 20 output channels in two tiles
    "2d, bias, epilogue, odd sizes, batch 3": (
        form("nn.Conv2d(cin, cout, 1)", "torch.relu(y) * self.p", "torch.randn(batch, cin, 5, 7)", 67, 20, 2)
        .replace("batch = 2", "batch = 3"), SMALL),
    "2d, no bias, 3 channels, batch 1": (
        form("nn.Conv2d(cin, cout, 1, bias=False)", "y", "torch.randn(batch, cin, 6, 5)", 3, 8, 2)
        .replace("batch = 2", "batch = 1"), SMALL),
    "2d, the kind's default tiles": (
        form("nn.Conv2d(cin, cout, 1)", "F.leaky_relu(y, 0.1)", "torch.rand(batch, cin, 6, 7)", 16, 24, 2), {}),
    "1d, dilated (irrelevant at 1)": (
        form("nn.Conv1d(cin, cout, 1, dilation=2)", "F.gelu(y)", "torch.randn(batch, cin, 23)", 6, 10, 1), SMALL),
    "3d": (form("nn.Conv3d(cin, cout, 1)", "torch.sigmoid(y) - self.p", "torch.randn(batch, cin, 3, 4, 5)", 5, 18, 3),
           SMALL),
    # positions strided, channels contiguous: read in place all the same
    "2d, channels-last input": (
        form("nn.Conv2d(cin, cout, 1)", "y + self.p", "torch.randn(batch, cin, 4, 5).contiguous(memory_format=torch."
             "channels_last)", 20, 12, 2), SMALL),
    # every other column: positions at one stride of 2, read in place
    "2d, an input strided along w": (
        form("nn.Conv2d(cin, cout, 1)", "y", "torch.randn(batch, cin, 4, 10)[..., ::2]", 9, 12, 2), SMALL),
    # half of each row: positions that do not merge into one stride, the one input the plan copies (x.reshape)
    "2d, rows of an input cut short": (
        form("nn.Conv2d(cin, cout, 1)", "y", "torch.randn(batch, cin, 4, 10)[..., :5]", 9, 12, 2), SMALL),
}
# not pointwise: the implicit-GEMM plan
OTHERS = {
    "3x3": ("nn.Conv2d(8, 16, 3)", "torch.rand(2, 8, 9, 9)"),
    "1x1, stride 2": ("nn.Conv2d(8, 16, 1, stride=2)", "torch.rand(2, 8, 9, 9)"),
    "1x1, padded": ("nn.Conv2d(8, 16, 1, padding=1)", "torch.rand(2, 8, 9, 9)"),
    "1x1, grouped": ("nn.Conv2d(36, 36, 1, groups=2)", "torch.rand(2, 36, 9, 9)"),
    "1x1, transposed": ("nn.ConvTranspose2d(8, 16, 1)", "torch.rand(2, 8, 9, 9)"),
}


def _spec(tmp_path, conv: str, inputs: str):
    path = tmp_path / "g.py"
    path.write_text(form(conv, "y", inputs, 0, 0, 1).replace("self.p = ", "self.q = "))
    graph = capture(load_problem(path))
    return conv_spec(next(n for n in graph.nodes if n.kind == "extern"))


def test_which_convolutions_are_pointwise(tmp_path):
    assert pointwise(_spec(tmp_path, "nn.Conv2d(8, 16, 1, dilation=3)", "torch.rand(2, 8, 9, 9)"))
    assert pointwise(_spec(tmp_path, "nn.Conv3d(8, 16, 1)", "torch.rand(2, 8, 3, 4, 5)"))
    for name, (conv, inputs) in OTHERS.items():
        assert not pointwise(_spec(tmp_path, conv, inputs)), name


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_every_form_matches_float64(tmp_path):
    """Both kinds' pointwise candidates on a GPU's rendering, run here (the interpreter computes
    in fp32: the TF32 one's rounding is checked below), against float64 in fp32's tolerance."""
    jobs = []
    for name, (text, tiles) in FORMS.items():
        path = tmp_path / (re.sub(r"\W+", "_", name) + ".py")
        path.write_text(text)
        source = next(p.source for p in plan(ctx_for(path, "cuda")) if p.origin == "template:conv")
        assert "_ConvPointwise(" in source and "_ConvPlan(x" not in source, name
        for key, value in tiles.items():
            source = setting(source, key, value)
        jobs.append((path, source, {}))
    results = run_ops(jobs, timeout=900)
    bad = [(n, r["why"]) for n, r in zip(FORMS, results, strict=True) if not r["ok"]]
    assert not bad, bad


@pytest.mark.slow  # candidates under the interpreter, in a subprocess
def test_one_tf32_pass_rounds_both_operands_to_nearest(tmp_path):
    """The TF32 kind's pointwise path computes the convolution of both operands rounded to TF32
    (the packed weight ahead, x in the kernel, where it is read), and not the exact one."""
    jobs = [(*candidate(tmp_path, name, text, tiles, origin="template:conv_tf32"), True, False)
            for name, (text, tiles) in FORMS.items() if name.startswith(("2d, bias", "3d"))]
    run_jobs(tmp_path, jobs)


def test_the_input_is_read_where_it_is(tmp_path, monkeypatch):
    """The plan's x is a view of the input (NCHW or channels-last): no copy; a 3x3 convolution's
    launcher keeps the implicit-GEMM plan, which copies its input padded."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for name, step in (("2d, bias, epilogue, odd sizes, batch 3", 1), ("2d, channels-last input", 20),
                       ("2d, an input strided along w", 2)):
        text, tiles = FORMS[name]
        _, source = candidate(tmp_path, name, text, tiles)
        mod, ref = module(source, monkeypatch), module(text, monkeypatch)
        x = ref.get_inputs()[0]
        p = mod._ConvPointwise(x, ref.Model(*ref.get_init_inputs()).conv.weight, 16, 16, 16, "tf32x3")
        assert p.x.data_ptr() == x.data_ptr() and p.x.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert p.x.stride()[2] == step, name
    path = tmp_path / "three.py"
    path.write_text(form("nn.Conv2d(cin, cout, 3)", "y", "torch.rand(batch, cin, 9, 9)", 8, 16, 2))
    source = next(p.source for p in plan(ctx_for(path, "cuda")) if p.origin == "template:conv")
    assert "_ConvPlan(x" in source and "_ConvPointwise(x" not in source


def test_the_weight_is_packed_rounded_and_never_written(tmp_path, monkeypatch):
    """The packed weight is a zero-padded copy (K contiguous), rounded to TF32 for one TF32 pass:
    the module's own weight is left as it is."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    text, tiles = FORMS["2d, bias, epilogue, odd sizes, batch 3"]
    _, source = candidate(tmp_path, "pw", text, tiles)
    mod, ref = module(source, monkeypatch), module(text, monkeypatch)
    w = ref.Model(*ref.get_init_inputs()).conv.weight.detach()
    kept = w.clone()
    p = mod._ConvPointwise(ref.get_inputs()[0], w, 16, 16, 16, "tf32")
    assert p.w.shape == (32, 80) and p.w.is_contiguous()
    assert torch.equal(w, kept)
    rounded = ((w.view(torch.int32) + 0x1000) & -8192).view(torch.float32).reshape(20, 67)
    assert torch.equal(p.w[:20, :67], rounded) and not p.w[20:].any() and not p.w[:, 67:].any()


SM90_SCRIPT = SM90_COMPILE + r"""
ptx = compiled.asm["ptx"]
copies = re.findall(r"cp\.async\.c[ag]\.shared\.global [^;]*, (0x[0-9a-f]+),", ptx)
print(json.dumps({"wgmma": ptx.count("wgmma.mma_async"), "copies": sorted(set(copies)),
                  "stores": sorted(set(re.findall(r"st\.global(?:\.\w+)*?\.(v\d)?\.?[bf]32", ptx)))}))
"""


def sm90_job(tmp_path, monkeypatch, origin: str, wide: bool) -> tuple[str, str, dict]:
    """The candidate of `origin` for a 1x1 convolution at the kind's default tiles, its kernel's
    name and the compile job of a launch on an NCHW input (ints and pointers divisible by 16
    marked so, positions' stride 1 a constant, as Triton specializes them); `wide`: 64-bit indices."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    text = form("nn.Conv2d(cin, cout, 1, bias=False)", "torch.relu(y)", "torch.rand(batch, cin, 32, 32)", 64, 128, 2)
    path, source = candidate(tmp_path, "sm90", text, {}, origin)
    for key in ("BLOCK_M", "BLOCK_K"):  # candidate() sets the tests' small tiles: back to the kind's defaults
        source = setting(source, key, {"BLOCK_M": 128, "BLOCK_K": 32}[key])
    mod, ref = module(source, monkeypatch), module(text, monkeypatch)
    prefix = next(k[:-len("_BLOCK_M")] for k in vars(mod) if k.endswith("_BLOCK_M"))
    get = lambda key: getattr(mod, f"{prefix}_{key}")  # noqa: E731
    p = mod._ConvPointwise(ref.get_inputs()[0], ref.Model(*ref.get_init_inputs()).conv.weight.detach(), get("BLOCK_M"),
                           get("BLOCK_N"), get("BLOCK_K"), get("PRECISION"))
    kernel = prefix.lower() + "_kernel"
    params = list(__import__("inspect").signature(getattr(mod, kernel).fn).parameters.values())
    constants = {**{k: get(k) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "PRECISION")},
                 "ROUND": p.switches["ROUND"], "WIDE": wide}
    values = dict(zip([q.name for q in params if "constexpr" not in str(q.annotation) and not q.name.endswith("_ptr")],
                      p.sizes, strict=True))
    signature, aligned = {}, []
    for i, q in enumerate(params):
        if q.name in constants:
            signature[q.name] = "constexpr"
        elif q.name.endswith("_ptr"):
            signature[q.name] = "*fp32"
            aligned.append(i)
        else:
            signature[q.name], spec = native_specialize_impl(BaseBackend, values[q.name], False, True, True)
            if signature[q.name] == "constexpr":
                constants[q.name] = values[q.name]
            elif spec == "D":
                aligned.append(i)
    assert constants.get("XP") == 1  # positions contiguous: Triton knows it from the launch
    job = {"signature": signature, "constants": constants, "aligned": aligned, "warps": get("NUM_WARPS"),
           "stages": get("NUM_STAGES")}
    return source, kernel, job


HOPPER = [(origin, wide) for wide in (False, True) for origin in ("template:conv", "template:conv_tf32")]


@pytest.fixture(scope="module")
def on_hopper(tmp_path_factory) -> dict[tuple[str, bool], dict]:
    """SM90_SCRIPT's findings for each (origin, wide) of HOPPER, all compiled in one process."""
    return compiled_for_sm90(tmp_path_factory, HOPPER, lambda tmp, mp, case: sm90_job(tmp, mp, *case), SM90_SCRIPT)


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas), in the module's one process for every case
@pytest.mark.parametrize("origin", ["template:conv", "template:conv_tf32"])
@pytest.mark.parametrize("wide", [False, True])
def test_the_kernel_compiles_for_hopper_with_vectors(on_hopper, origin, wide):
    """Compiled for sm_90 here, without a GPU, at the kind's default tiles as a launch on an NCHW
    input specializes it (ints and pointers divisible by 16 marked so, positions' stride 1 a
    constant, as Triton does): the products on wgmma, both operands' tiles copied to shared
    memory in 16-byte vectors (x's along its contiguous positions) and the output stored in
    16-byte vectors along them, not element by element; with 64-bit indices too (an output past
    2**31 elements, as KernelBench L1/87's)."""
    got = on_hopper[origin, wide]
    assert got["wgmma"] > 0 and got["copies"] == ["0x10"] and got["stores"] == ["v4"], got
