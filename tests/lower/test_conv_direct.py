"""The direct convolution for few input channels (okgit/lower/kinds/conv_direct.py): which
convolutions it takes and the note where it takes none, and its kernel against float64 under
the Triton interpreter (1D-3D, stride, padding, dilation, bias, per-channel epilogues, output
channels that fill no whole tile, several position and channel tiles, an input that is not
contiguous, 64-bit indices)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from conv_forms import form, narrow_indices
from oprun import run_ops

from okgit.eval.types import Reference, Status
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

FORMS = {
    "conv1d, strided, dilated, padded": form("nn.Conv1d(cin, cout, 3, stride=2, padding=2, dilation=2)", "F.gelu(y)",
                                             "torch.randn(batch, cin, 23)", 3, 10, 1),
    "conv2d, unpadded, mish": form("nn.Conv2d(cin, cout, 3)", "F.mish(y - 0.5) * self.p",
                                   "torch.randn(batch, cin, 11, 9)", 4, 20, 2),
    "conv2d, asymmetric, no bias": form("nn.Conv2d(cin, cout, (2, 3), stride=(1, 2), padding=(1, 0), bias=False)", "y",
                                        "torch.randn(batch, cin, 7, 10)", 2, 16, 2),
    "conv3d, padded, strided": form("nn.Conv3d(cin, cout, 4, stride=2, padding=1)", "torch.sigmoid(y) - self.p",
                                    "torch.randn(batch, cin, 6, 7, 9)", 3, 16, 3),
    "conv3d, 3 channels": form("nn.Conv3d(cin, cout, 3)", "F.hardswish(y)", "torch.randn(batch, cin, 5, 6, 7)", 3, 24, 3),
    "transposed 2d, strided, output padding": form(
        "nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1, output_padding=1)", "y + self.p",
        "torch.randn(batch, cin, 5, 6)", 4, 8, 2),
    "transposed 3d, stride 2 (as L2/15)": form("nn.ConvTranspose3d(cin, cout, 3, stride=2, padding=1, bias=False)",
                                               "y * self.p", "torch.randn(batch, cin, 3, 4, 5)", 4, 20, 3),
    # stride 5, dilation 2: each phase has at most one tap along a dim, some none (only the bias);
    # 9 channels, one partial channel tile (a program per phase, tile and sample: 25 phases make
    # this form the interpreter's slowest, so it runs at one sample, ONE_SAMPLE; several channel
    # tiles of a transposed convolution are the 3D one's, 20 channels in tiles of 16)
    "transposed 2d, stride 5, dilation 2 (as L1/81)": form(
        "nn.ConvTranspose2d(cin, cout, 3, stride=5, padding=1, dilation=2)", "torch.tanh(y)",
        "torch.randn(batch, cin, 4, 6)", 3, 9, 2),
    "transposed 1d, stride 3, asymmetric": form("nn.ConvTranspose1d(cin, cout, 4, stride=3, padding=2, output_padding=2)",
                                                "F.gelu(y)", "torch.randn(batch, cin, 7)", 1, 9, 1),
    # channels-last: read through a contiguous copy
    "conv2d, channels-last input": form("nn.Conv2d(cin, cout, 3, padding=1)", "torch.relu(y)",
                                        "torch.randn(batch, cin, 8, 9).to(memory_format=torch.channels_last)", 4, 8, 2),
}


def ctx_for(path, notes: list | None = None) -> Context:
    log = (lambda type, **f: notes.append(f.get("message", ""))) if notes is not None else (lambda type, **f: None)
    return Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                   device="cpu", log=log)


def direct_source(tmp_path, name: str) -> tuple[str, str]:
    path = tmp_path / (re.sub(r"\W+", "_", name) + ".py")
    path.write_text(FORMS[name])
    found = [p for p in plan(ctx_for(path)) if p.origin == "template:conv_direct"]
    assert found, name
    return str(path), found[0].source


def setting(source: str, name: str, value: int) -> str:
    out, n = re.subn(rf"^(FUSED_CONV_DIRECT_\d+_{name}: \w+) = .*$", lambda m: f"{m.group(1)} = {value}", source,
                     flags=re.MULTILINE)
    assert n == 1, name
    return out


@pytest.mark.parametrize(("conv", "why"), [
    ("nn.Conv2d(4, 16, 3)", None),
    ("nn.Conv3d(3, 16, 3, padding=1)", None),
    ("nn.ConvTranspose2d(4, 16, 3, stride=2)", None),  # 4 channels x 4 taps a phase
    ("nn.ConvTranspose2d(32, 16, 3, stride=5, padding=1, dilation=2)", None),  # a tap a phase: a K of 32 (L1/81)
    ("nn.Conv2d(8, 16, 3)", "8 input channels (more than 4"),
    ("nn.ConvTranspose2d(16, 16, 3, stride=2)", "16 input channels (more than 4"),
    ("nn.Conv3d(4, 16, (5, 5, 3))", "a K of 300 (4 input channels x 75 taps; more than 256"),
    ("nn.ConvTranspose3d(3, 16, (5, 5, 4))", "a K of 300"),  # stride 1: every tap reaches every output
    ("nn.Conv2d(3, 16, 1)", "a pointwise convolution"),
    ("nn.Conv2d(4, 16, 3, groups=2)", "grouped_conv's"),  # 2 channels a group: the direct grouped kernel's
])
def test_which_convolutions_it_takes_and_the_note_where_not(tmp_path, conv, why):
    cin = int(re.search(r"\((\d+),", conv).group(1))
    path = tmp_path / "c.py"
    path.write_text(form(conv, "y", f"torch.rand(batch, {cin}, {'5, ' if '3d' in conv else ''}9, 9)", cin, 16, 1))
    notes: list[str] = []
    origins = [p.origin for p in plan(ctx_for(path, notes))]
    if why is None:
        assert "template:conv_direct" in origins and origins.index("template:conv_direct") < origins.index("template:conv")
    else:
        assert "template:conv_direct" not in origins
        if "grouped_conv" not in why:
            assert any(n.startswith("templates (direct convolution (fp32)): ") and why in n for n in notes), notes


# The transposed 3D form runs in small tiles alone: as lowered (a 128 x 16 tile, every form's
# defaults) its 60 positions a phase sit in one masked tile, the interpreter's costliest run here
# (39 of the test's 95 CPU s), while the small-tile run has the same kernel, its 3D phases and
# a masked position tail too; the defaults as lowered run with the transposed 2D and 1D forms'
# kernels, and compile for sm_90 in test_the_kernel_compiles_for_hopper_as_outer_products_without_spills.
SMALL_TILES_ONLY = "transposed 3d, stride 2 (as L2/15)"
# Run at one sample: a sample's offset is the same lines for every form, a transposed one's
# checked at 2 samples by the other transposed 2D form
ONE_SAMPLE = "transposed 2d, stride 5, dilation 2 (as L1/81)"


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_every_form_matches_float64(tmp_path):
    jobs, names = [], []
    for name in FORMS:
        if name == SMALL_TILES_ONLY:
            continue
        path, source = direct_source(tmp_path, name)
        jobs.append((path, source, {"batch": 1} if name == ONE_SAMPLE else {}))
        names.append(name)
    # small tiles: several position tiles (across samples) and channel tiles, the last ones partial;
    # the transposed 3D form's 60 positions a phase in two tiles of 32, of one sample (the fewest
    # programs with those: 2 position tiles x 2 channel tiles x 8 phases; tiles of 16 made 128
    # programs, 2 samples twice the 32 here, and its run longer than the rest of the test together;
    # a sample's offset is the same lines for every form, the transposed 2D ones' at 2 samples).
    # The 3D form's small tiles run with 32-bit indices, as a GPU takes them (`narrow_indices`;
    # the interpreter's default is 64-bit): one run for both (it was two). The 64-bit lines (WIDE:
    # three casts) stay checked in small 3D tiles by the transposed 3D form's run and in 3D by
    # the 3D forms' runs as lowered.
    # The 3D forms' small tiles at 2 input channels (3 and 4 in the op files): a program loops
    # over channels x taps (64 and 27 taps), so a channel fewer is a third to a half of its time;
    # at 2 the loop still steps from channel to channel (C_IN is a run-time argument: the same
    # kernel), and the conv3d form runs at its 3 as lowered.
    for name, block_m, knobs, narrow in (("conv2d, unpadded, mish", 16, {}, False),
                                         ("conv3d, padded, strided", 16, {"cin": 2}, True),
                                         ("transposed 3d, stride 2 (as L2/15)", 32, {"batch": 1, "cin": 2}, False)):
        path, source = direct_source(tmp_path, name)
        small = setting(setting(source, "BLOCK_M", block_m), "BLOCK_N", 16)
        jobs.append((path, narrow_indices(small) if narrow else small, knobs))
        names.append(f"{name}, small tiles" + (", 32-bit indices" if narrow else ""))
    results = run_ops(jobs, timeout=900)
    bad = [(n, r["why"]) for n, r in zip(names, results, strict=True) if not r["ok"]]
    assert not bad, bad


@pytest.mark.slow  # the real evaluator
def test_the_direct_candidate_is_judged_correct_by_the_evaluator(tmp_path, evaluator):
    """Through the template proposer and the real evaluator (CPU, interpreter): correct at every
    checked shape and seed, and more accurate than TF32 would allow (fp32 products)."""
    path = tmp_path / "conv3d_hardswish.py"
    path.write_text(FORMS["conv3d, 3 channels"])
    found = [p for p in plan(ctx_for(path)) if p.origin == "template:conv_direct"]
    result = evaluator.evaluate(load_problem(path), found[0].source)
    assert result.status is Status.correct, result.error
    assert result.max_abs_error is not None and result.max_abs_error < 1e-5


SM90_SCRIPT = r"""
import glob, inspect, json, os, re, subprocess, sys, tempfile, types
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
kernel, prefix, jobs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tool = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump"))
for path, window in jobs:  # one process, one import of torch and Triton for every candidate
    mod = types.ModuleType("cand")
    mod.__file__ = path
    exec(compile(open(path).read(), path, "exec"), mod.__dict__)
    fn = getattr(mod, kernel)
    setting = lambda key: getattr(mod, f"{prefix}_{key}")
    values = {"PADDED": False, "TRANSPOSED": False, **window, "BLOCK_M": setting("BLOCK_M"), "BLOCK_N": setting("BLOCK_N"),
              "WIDE": False}
    params = list(inspect.signature(fn.fn).parameters.values())
    signature = {p.name: "constexpr" if "constexpr" in str(p.annotation) else "*fp32" if p.name.endswith("_ptr") else "i32"
                 for p in params}
    constants = {p.name: values[p.name] for p in params if signature[p.name] == "constexpr"}
    compiled = triton.compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": setting("NUM_WARPS"), "num_stages": setting("NUM_STAGES")})
    out = {"fma": len(re.findall(r"fma\.rn\.f32", compiled.asm["ptx"])), "threads": 32 * setting("NUM_WARPS"),
           "tile": setting("BLOCK_M") * setting("BLOCK_N")}
    if tool:  # the register file's use: spills show as stack
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(compiled.asm["cubin"])
        usage = subprocess.run([tool[0], "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
        out["stack"] = int(re.search(r"STACK:(\d+)", usage).group(1))
        out["registers"] = int(re.search(r"REG:(\d+)", usage).group(1))
    print(json.dumps(out))
"""
# (form, its window at the development set's sizes, whether its epilogue adds multiply-adds)
HOPPER = [
    ("conv3d, 3 channels", {"KD": 3, "KH": 3, "KW": 3, "SD": 1, "SH": 1, "SW": 1, "PD": 0, "PH": 0, "PW": 0,
                            "DD": 1, "DH": 1, "DW": 1}, False),
    ("conv2d, unpadded, mish", {"KD": 1, "KH": 3, "KW": 3, "SD": 1, "SH": 1, "SW": 1, "PD": 0, "PH": 0, "PW": 0,
                                "DD": 1, "DH": 1, "DW": 1}, True),
    # every tap's products compiled, each behind its phase's branch
    ("transposed 3d, stride 2 (as L2/15)", {"KD": 3, "KH": 3, "KW": 3, "SD": 2, "SH": 2, "SW": 2, "PD": 1, "PH": 1,
                                            "PW": 1, "DD": 1, "DH": 1, "DW": 1, "PADDED": True, "TRANSPOSED": True},
     False),
]


@pytest.fixture(scope="module")
def on_hopper(tmp_path_factory) -> dict[str, dict]:
    """SM90_SCRIPT's findings for each form of HOPPER as lowered, by name, all compiled in one
    process (a process a form imported torch and Triton each time)."""
    pytest.importorskip("triton.backends.nvidia")
    tmp = tmp_path_factory.mktemp("hopper")
    jobs = []
    for name, window, _ in HOPPER:
        _, source = direct_source(tmp, name)
        cand = tmp / (re.sub(r"\W+", "_", name) + "_cand.py")
        cand.write_text(source)
        jobs.append([str(cand), window])
    proc = subprocess.run([sys.executable, "-c", SM90_SCRIPT, "fused_conv_direct_0_kernel", "FUSED_CONV_DIRECT_0",
                           json.dumps(jobs)], capture_output=True, text=True, timeout=600, check=False,
                          env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("no ptxas in this Triton")
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return dict(zip([name for name, _, _ in HOPPER], found, strict=True))


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas), in the module's one process for them
@pytest.mark.parametrize(("name", "window", "epilogue_fmas"), HOPPER)
def test_the_kernel_compiles_for_hopper_as_outer_products_without_spills(on_hopper, name, window, epilogue_fmas):
    """Compiled for sm_90 here, without a GPU, at the defaults and the development set's windows:
    a tap is one multiply-add per accumulator a thread holds (an outer product, nothing
    recomputed) in each path of the taps, and where Triton's cuobjdump is there, nothing spills."""
    got = on_hopper[name]
    taps = window["KD"] * window["KH"] * window["KW"]
    # once per path of the taps: a padded convolution's tile inside the input and at its edges
    products = taps * got["tile"] // got["threads"] * (2 if window.get("PADDED") else 1)
    assert got["fma"] == products or (epilogue_fmas and products < got["fma"] < 2 * products), got
    assert got.get("stack", 0) == 0, got


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["conv3d, 3 channels", "conv2d, unpadded, mish", "transposed 3d, stride 2 (as L2/15)"])
def test_on_a_gpu_the_direct_candidate_is_correct_and_timed(tmp_path, gpu_evaluator, name):
    """The kernel compiled by the GPU's own Triton and judged there at a size of tens of MB (its
    figures against the other candidates come from bench/conv.py at the development set's sizes)."""
    sizes = {"conv3d, 3 channels": ("batch, cin, 5, 6, 7", "batch, cin, 16, 64, 64"),
             "conv2d, unpadded, mish": ("batch, cin, 11, 9", "batch, cin, 256, 256"),
             "transposed 3d, stride 2 (as L2/15)": ("batch, cin, 3, 4, 5", "batch, cin, 16, 32, 32")}[name]
    path = tmp_path / (re.sub(r"\W+", "_", name) + ".py")
    path.write_text(FORMS[name].replace(sizes[0], sizes[1]).replace("batch = 2", "batch = 16"))
    ctx = Context(problem=load_problem(path), reference=Reference(device="cuda", timed=True), backend="triton",
                  device="cuda", log=lambda type, **f: None)
    found = [p for p in plan(ctx) if p.origin == "template:conv_direct"]
    result = gpu_evaluator.evaluate(load_problem(path), found[0].source)
    assert result.status is Status.correct, result.error
    assert result.timed and result.runtime_us and result.speedup, result
