"""The implicit-GEMM convolution's TMA path (conv_plan.py.tmpl's _conv_tma_input, conv.py.tmpl's
TMA_A and TMA_B): the packed weight read through a TMA descriptor wherever the device has TMA,
the input where a tile's rows at a K step are consecutive rows of its 2D view [positions,
channels] and a step is one tap's block of one group's channels.

This machine has no TMA: the tests force the path through the plan's one seam, `_tma_device`
(the GEMM helpers' "does the device have TMA"), replaced in the candidate's module; Triton's
interpreter runs the descriptor loads, bounds (zero fill) included. The kernel is checked
against float64 on each form the path takes (the plan's choice asserted, so that a change of
its rules cannot leave one untested), and the plan is checked to keep the pointer path where a
descriptor would read the wrong elements."""

from __future__ import annotations

import copy
import json
import os
import re
import traceback
import types
from pathlib import Path

import pytest
import torch
from scriptrun import run_script
from test_conv_kind import ctx_for, form, setting
from test_conv_packed import compiled_for_sm90, conv_plan, module, with_inf

from okgit.search.proposers.templates import plan

TILES = {"BLOCK_M": 16, "BLOCK_K": 16}
# name: (op file text, its input's memory format, tile settings beyond TILES, TMA_A expected)
TAKEN = {
    # two tiles per output row of 30: the second's last two rows past the row's end, masked
    "conv2d, stride 1, a tile past the row's end": (
        form("nn.Conv2d(cin, cout, 3, padding=1)", "torch.relu(y) * self.p", "torch.rand(batch, cin, 3, 30)", 32, 12, 2),
        {}),
    "conv2d, stride (2, 1), dilated": (
        form("nn.Conv2d(cin, cout, 3, stride=(2, 1), padding=2, dilation=2)", "y - self.p",
             "torch.rand(batch, cin, 5, 16)", 16, 8, 2), {}),
    "conv3d, stride 1": (form("nn.Conv3d(cin, cout, 3, padding=1)", "torch.sigmoid(y)", "torch.rand(batch, cin, 3, 4, 16)",
                              16, 8, 3), {}),
    "transposed conv2d, stride 1": (
        form("nn.ConvTranspose2d(cin, cout, (3, 2))", "torch.tanh(y)", "torch.rand(batch, cin, 3, 15)", 16, 8, 2), {}),
    # each phase's rows a step of one input position: consecutive rows of the view too
    "transposed conv2d, stride 2, phases": (
        form("nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1)", "y + self.p", "torch.rand(batch, cin, 3, 16)",
             16, 8, 2), {}),
    # 12 channels in blocks of 16: the block's last 4 past the view's row, zeros from TMA; an inf
    # at the next position's channel 0 would make NaNs of them (times the packed weight's zeros)
    "channel tail past the view": (
        form("nn.Conv2d(cin, cout, 3, padding=1)", "y", with_inf("batch, cin, 3, 15", "(1, 0, 1, 7)"), 12, 8, 2), {}),
    # 13 channels: the copy's padded to 16 (16-byte rows), zeros
    "channel tail in the copy": (
        form("nn.Conv2d(cin, cout, (1, 3), padding=(0, 1))", "y * self.p", "torch.rand(batch, cin, 2, 16)", 13, 8, 2), {}),
    # an inf in group 1's first channel: group 0's blocks end before it
    "groups, 16 channels each": (
        form("nn.Conv2d(cin, cout, 3, padding=1, groups=2)", "torch.relu(y)", with_inf("batch, cin, 3, 16", "(0, 16, 1, 5)"),
             32, 16, 2), {}),
    # no padding, channels-last already, the copy off: x itself as the 2D view
    "1x1 strided along h, channels-last read in place": (
        form("nn.Conv2d(cin, cout, 1, stride=(2, 1))", "y * self.p", "torch.rand(batch, cin, 2, 16).contiguous(memory_format=torch."
             "channels_last)", 16, 8, 2), {"INPUT_COPY": 0}),
}
# name: (op file text, tile settings beyond TILES): the pointer path for the input, TMA for the weight
KEPT = {
    "stride 2 along w": (form("nn.Conv2d(cin, cout, 3, stride=2, padding=1)", "y", "torch.rand(batch, cin, 3, 32)",
                              16, 8, 2), {}),
    "groups of 12 channels in blocks of 16": (
        form("nn.Conv2d(cin, cout, 3, padding=1, groups=2)", "y", "torch.rand(batch, cin, 3, 16)", 24, 8, 2), {}),
    "NCHW read in place": (form("nn.Conv2d(cin, cout, 1, stride=(2, 1))", "y", "torch.rand(batch, cin, 2, 16)", 16, 8, 2),
                           {"INPUT_COPY": 0}),
    "a tile across output rows (no ROWS)": (form("nn.Conv2d(cin, cout, 3, padding=1)", "y", "torch.rand(batch, cin, 3, 6)",
                                                 16, 8, 2), {}),
    "3 channels in blocks of 16 (most of K wasted)": (
        form("nn.Conv2d(cin, cout, 3, padding=1)", "y", "torch.rand(batch, cin, 3, 16)", 3, 8, 2), {}),
}
RUNNER = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path[:0] = [{here!r}, {tests!r}]
import test_conv_tma
test_conv_tma.run_checks(sys.argv[1])
"""


def candidate(tmp_path: Path, name: str, text: str, tiles: dict, origin: str = "template:conv") -> tuple[str, str]:
    """The op file's path and its convolution candidate `origin`, rendered for a GPU, its tiles set."""
    path = tmp_path / (re.sub(r"\W+", "_", name) + ".py")
    path.write_text(text)
    source = next(p.source for p in plan(ctx_for(path, "cuda")) if p.origin == origin)
    for key, value in {**TILES, **tiles}.items():
        source = setting(source, key, value)
    return str(path), source


def with_tma(source: str, tma: bool = True) -> types.ModuleType:
    """The candidate as a module whose plan finds TMA on any device where `tma` (the seam: _tma_device)."""
    mod = types.ModuleType("cand")
    exec(compile(source, "cand.py", "exec"), mod.__dict__)
    if tma:
        mod._tma_device = lambda device: True
    return mod


def tf32(t: torch.Tensor) -> torch.Tensor:
    """t rounded to TF32 (to nearest), as a TF32 cuDNN kernel takes its operands."""
    return ((t.view(torch.int32) + 0x1000) & -8192).view(torch.float32)


def check(ref_path: str, source: str, rounded: bool, tma: bool) -> dict:
    """The candidate (TMA forced where `tma`) against the reference in float64, its convolution's
    operands rounded to TF32 first where `rounded` (the TF32 kind's, to 64 ulps: and farther from
    the exact result); the switches of its layouts and its largest error over the largest
    output."""
    ref = types.ModuleType("ref")
    exec(compile(Path(ref_path).read_text(), ref_path, "exec"), ref.__dict__)
    cand = with_tma(source, tma)
    torch.manual_seed(0)
    model = ref.Model(*ref.get_init_inputs())
    ours = cand.Model(*ref.get_init_inputs())
    ours.load_state_dict(model.state_dict())
    x = ref.get_inputs()[0]
    with torch.no_grad():
        exact = copy.deepcopy(model).double()(x.double())
        got = ours(x).double()
        if rounded:
            model.conv.weight.copy_(tf32(model.conv.weight))
            want = copy.deepcopy(model).double()(tf32(x).double())
            ulps = 64 * 2.0**-23 * float(want.abs().max())
            assert float((got - want).abs().max()) < ulps < float((got - exact).abs().max())
    if not rounded:
        torch.testing.assert_close(got, exact, rtol=1e-4, atol=1e-4 * float(exact.nan_to_num(0, 0, 0).abs().max()),
                                   equal_nan=True)
    error = (got - exact).nan_to_num(0, 0, 0).abs().max() / exact.nan_to_num(0, 0, 0).abs().max()  # infs left out
    return {"switches": [{k: v for k, v in layout.switches.items() if k.startswith(("TMA", "ROUND"))}
                         for layout in cand._CONV_LAYOUTS.values()], "error": float(error)}


def run_jobs(tmp_path: Path, jobs: list) -> list[dict]:
    """Each job (ref_path, source, rounded, tma) checked in one subprocess under the interpreter."""
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    here, tests = str(Path(__file__).parent), str(Path(__file__).parents[1])
    proc = run_script(RUNNER.format(here=here, tests=tests), [str(tmp_path / "jobs.json")],
                      {**os.environ, "TRITON_INTERPRET": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(jobs), proc.stdout[-3000:] + proc.stderr[-3000:]
    bad = [r["why"] for r in results if not r["ok"]]
    assert not bad, bad
    return results


def run_checks(jobs_path: str) -> None:
    """In the subprocess (TRITON_INTERPRET set before Triton's import): each job's outcome, a JSON line."""
    for ref_path, source, rounded, tma in json.loads(Path(jobs_path).read_text()):
        try:
            out = {"ok": True, **check(ref_path, source, rounded, tma)}
        except Exception:  # noqa: BLE001 - the job's failure is the report
            out = {"ok": False, "why": traceback.format_exc()[-3000:]}
        print(json.dumps(out), flush=True)


@pytest.mark.slow  # the candidates under the interpreter, in a subprocess
def test_the_tma_path_matches_float64_where_the_plan_takes_it(tmp_path):
    """Stride-1 convolutions 2D and 3D, stride along d or h, transposed ones (one phase and
    several), a channel tail past the view (TMA's zeros) and one in the copy, groups whose
    channels fill whole blocks, x read in place: TMA for both operands, and the result within
    fp32 tolerance of float64 (infs where a tail or a neighbouring group would meet them)."""
    results = run_jobs(tmp_path, [(*candidate(tmp_path, name, text, tiles), False, True)
                                  for name, (text, tiles) in TAKEN.items()])
    for name, r in zip(TAKEN, results, strict=True):
        assert r["switches"] == [{"ROUND": False, "TMA_A": True, "TMA_B": True}], (name, r["switches"])


@pytest.mark.slow  # the candidates under the interpreter, in a subprocess
def test_one_tf32_pass_rounds_both_operands_to_nearest_on_either_path(tmp_path):
    """The TF32 kind's operands come rounded to TF32 (to nearest) where the plan writes them (the
    input's copy, the packed weight), so the products read them as they are; x read in place is
    rounded in the kernel (ROUND). Either way, through TMA or pointers, the result is the
    convolution of the rounded operands, and not the exact one."""
    forms = ["conv2d, stride 1, a tile past the row's end", "1x1 strided along h, channels-last read in place"]
    jobs = [(*candidate(tmp_path, name, *TAKEN[name], origin="template:conv_tf32"), True, tma)
            for name in forms for tma in (True, False)]
    results = run_jobs(tmp_path, jobs)
    assert [r["switches"] for r in results] == [
        [{"ROUND": False, "TMA_A": True, "TMA_B": True}], [{"ROUND": False, "TMA_A": False, "TMA_B": False}],
        [{"ROUND": True, "TMA_A": True, "TMA_B": True}], [{"ROUND": True, "TMA_A": False, "TMA_B": False}]]


def layout_switches(tmp_path, monkeypatch, name: str, text: str, tiles: dict, tma: bool) -> dict:
    """The plan's switches for the form's input, TMA forced where `tma` (else the CPU's own answer)."""
    _, source = candidate(tmp_path, name, text, tiles)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    mod = with_tma(source) if tma else module(source, monkeypatch)
    ref = module(text, monkeypatch)
    return conv_plan(mod, ref.get_inputs()[0], ref.Model(*ref.get_init_inputs())).switches


@pytest.mark.parametrize("name", KEPT)
def test_the_input_keeps_pointers_where_a_descriptor_would_read_wrong_elements(tmp_path, monkeypatch, name):
    """A stride along w (a tile's rows not consecutive rows), a group's channels not whole blocks
    (a block would read the next group's), NCHW read in place (channels not contiguous), tiles
    across output rows (rows of padding between), or a block mostly past the channels: the
    input through pointers; the weight through TMA all the same."""
    switches = layout_switches(tmp_path, monkeypatch, name, *KEPT[name], tma=True)
    assert (switches["TMA_A"], switches["TMA_B"]) == (False, True)


def test_no_tma_without_the_device_or_with_the_setting_off(tmp_path, monkeypatch):
    """The CPU has no TMA: pointers for both operands; `_TMA` 0 keeps them on a TMA device."""
    name = next(iter(TAKEN))
    text, tiles = TAKEN[name]
    off = layout_switches(tmp_path, monkeypatch, name, text, tiles, tma=False)
    assert (off["TMA_A"], off["TMA_B"]) == (False, False)
    off = layout_switches(tmp_path, monkeypatch, name, text, {**tiles, "TMA": 0}, tma=True)
    assert (off["TMA_A"], off["TMA_B"]) == (False, False)


SM90_SCRIPT = r"""
import json, re, sys, types
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
path, kernel, job = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
mod = types.ModuleType("cand")
exec(compile(open(path).read(), path, "exec"), mod.__dict__)
compiled = triton.compile(ASTSource(getattr(mod, kernel), job["signature"], job["constants"]),
                          target=GPUTarget("cuda", 90, 32), options={"num_warps": job["warps"], "num_stages": job["stages"]})
ptx, ttgir = compiled.asm["ptx"], compiled.asm["ttgir"]
dots = re.findall(r"ttng\.warp_group_dot [^{]*\{[^}]*\} : (\S+)", ttgir)  # A's type
print(json.dumps({"tma": ptx.count("cp.async.bulk.tensor.2d"), "wgmma": ptx.count("wgmma.mma_async"),
                  "copies": sorted(set(re.findall(r"cp\.async\.c[ag]\.shared\.global [^;]*, (0x[0-9a-f]+),", ptx))),
                  "dots": len(dots), "a_shared": sum(d.startswith("!ttg.memdesc") for d in dots)}))
"""


def sm90_job(tmp_path, monkeypatch, origin: str) -> tuple[str, str, dict]:
    """The candidate of `origin` on its TMA path at the kind's default tiles, its kernel's name
    and the compile job of a launch at the form's input (as Triton specializes it)."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    text = form("nn.Conv2d(cin, cout, 3, padding=1)", "torch.relu(y) * self.p", "torch.rand(batch, cin, 2, 128)", 32, 128, 2)
    path = tmp_path / "conv.py"
    path.write_text(text)
    source = next(p.source for p in plan(ctx_for(path, "cuda")) if p.origin == origin)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    mod, ref = with_tma(source), module(text, monkeypatch)
    p = conv_plan(mod, ref.get_inputs()[0], ref.Model(*ref.get_init_inputs()))
    assert p.switches["TMA_A"] and p.switches["TMA_B"]
    _, packed, table, sizes = p.launches[0]
    kernel = next(k for k in vars(mod) if k.endswith("_kernel") and k.startswith("fused_conv"))
    prefix = kernel[:-len("_kernel")].upper()
    params = [q for q in __import__("inspect").signature(getattr(mod, kernel).fn).parameters.values()]
    constants = {**{k: getattr(mod, f"{prefix}_{k}") for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "PRECISION")},
                 **{k: v for k, v in p.switches.items() if k != "PRECISION"}, "WIDE": False}
    values = {"x_ptr": p.a, "w_ptr": packed, **dict(zip(
        [q.name for q in params if "constexpr" not in str(q.annotation) and not q.name.endswith("_ptr")], sizes, strict=True))}
    signature = {}
    for q in params:
        if q.name in constants:
            signature[q.name] = "constexpr"
        elif q.name == "t_ptr":
            signature[q.name] = "*i32"  # 32-bit indices on a GPU (the interpreter's are 64-bit: WIDE)
        elif q.name.endswith("_ptr") and q.name not in values:
            signature[q.name] = "*fp32"  # the epilogue's
        else:
            signature[q.name], _ = native_specialize_impl(BaseBackend, values[q.name], False, True, True)
            if signature[q.name] == "constexpr":
                constants[q.name] = values[q.name]
    job = {"signature": signature, "constants": constants, "warps": getattr(mod, f"{prefix}_NUM_WARPS"),
           "stages": getattr(mod, f"{prefix}_NUM_STAGES")}
    assert job["warps"] == 8 and constants["BLOCK_M"] == constants["BLOCK_N"] == 128
    return source, kernel, job


@pytest.fixture(scope="module")
def on_hopper(tmp_path_factory) -> dict[str, dict]:
    """SM90_SCRIPT's findings for each origin, both compiled in one process."""
    return compiled_for_sm90(tmp_path_factory, ["template:conv", "template:conv_tf32"], sm90_job, SM90_SCRIPT)


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas), in the module's one process for both origins
@pytest.mark.parametrize("origin", ["template:conv", "template:conv_tf32"])
def test_the_tma_path_compiles_for_hopper(on_hopper, origin):
    """Compiled for sm_90 here, without a GPU, at the kind's default tiles (128 x 128 on 8 warps)
    as a launch at the form's input specializes it: both operands copied to shared memory by TMA
    (cp.async.bulk.tensor), the products on wgmma, and no per-thread copy left but the table's
    4-byte entries. In one TF32 pass (operands rounded ahead) every product reads A from shared
    memory as TMA wrote it; 3xTF32 splits A in registers first."""
    got = on_hopper[origin]
    assert got["tma"] >= 2 and got["wgmma"] > 0 and got["copies"] == ["0x4"], got
    assert got["dots"] > 0 and got["a_shared"] == (got["dots"] if origin == "template:conv_tf32" else 0), got
