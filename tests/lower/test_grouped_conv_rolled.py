"""The grouped-convolution kind's rolled path (okgit/lower/kinds/grouped_conv.py.tmpl, RUN > 0):
a program walks the input once along the outermost window dim and adds each plane into the up
to K outputs it feeds. Its numerics against torch.nn.functional.conv1d/2d/3d under the Triton
interpreter at tiny sizes (depthwise and two input channels per group, padding along the
rolled dim, a run that does not divide the outputs, bias, prologue and epilogue), and which
launches take it (the grid's second axis is the runs) and which stay on the direct path."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from scriptrun import run_script

from okgit.eval.types import Reference
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

# name -> (module, forward, input shape, the rolled dim's output index in out.shape or None: the
# direct path). Tiny, yet with several programs, partial tiles and a tail run at RUN = 2.
CASES = {
    # depthwise 3D, padding 1 along D: zero planes at both ends of every run's walk; bias, epilogue.
    # One sample and two channels (the interpreter's time grows with the output planes: two samples
    # cost twice the time, three channels half as much again): a sample is more output planes, its
    # input plane and bias read by the lines rolling along D and H share, at 2 samples in
    # grouped2d_prologue
    "depthwise3d_bias_relu": ("nn.Conv3d(2, 2, 3, padding=1, groups=2)", "torch.relu(self.conv(x))", "1, 2, 5, 3, 6", 2),
    # rolled along D with a stride and dilation along H and W (the fixed dim and the columns)
    "depthwise3d_strided_inner": ("nn.Conv3d(3, 3, 3, stride=(1, 2, 2), padding=(2, 1, 2), dilation=(1, 2, 2), groups=3)",
                                  "self.conv(x) * 2.0", "1, 3, 4, 6, 7", 2),
    # two input channels per group, a channel multiplier of 2, a window of 3 x 2 rolled along H (5
    # outputs: a tail run at RUN = 2);
    # a prologue with a per-channel operand (a padding tap stays 0)
    "grouped2d_prologue": ("nn.Conv2d(4, 8, (3, 2), padding=(1, 0), groups=2)", "self.conv(x * self.s.view(1, -1, 1, 1) + 1.0)",
                           "2, 4, 5, 5", 2),
    # KD = 1 (with a stride and padding along D): rolled along H, D the fixed dim; two channels
    # (it was four: twice the programs, the same lines)
    "depthwise3d_flat_window": ("nn.Conv3d(2, 2, (1, 3, 3), stride=(2, 1, 1), padding=(1, 2, 0), groups=2, bias=False)",
                                "torch.sigmoid(self.conv(x))", "1, 2, 3, 6, 5", 3),
    # a 1D window has no outer dim to roll: the direct path
    "depthwise1d": ("nn.Conv1d(3, 3, 3, padding=1, groups=3)", "self.conv(x)", "2, 3, 9", None),
    # stride 2 along the outermost window dim: the direct path (2 output rows a plane, a partial
    # tile of columns); one sample (the direct path's sample offset is depthwise1d's, at 2)
    "strided2d": ("nn.Conv2d(3, 6, 3, stride=(2, 1), padding=1, groups=3)", "self.conv(x)", "1, 3, 3, 6", None),
}


def op_file(tmp_path: Path, name: str, module: str, forward: str, shape: str) -> Path:
    path = tmp_path / f"{name}.py"
    channels = int(re.search(r"Conv\dd\((\d+)", module)[1])
    path.write_text(textwrap.dedent(f'''\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = {module}
                self.s = nn.Parameter(torch.randn({channels}))

            def forward(self, x):
                return {forward}


        def get_inputs():
            return [torch.randn({shape})]


        def get_init_inputs():
            return []
        '''))
    return path


def candidate(path: Path) -> str:
    """okgit's first candidate for the op file (the grouped-convolution kind)."""
    ctx = Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                  device="cpu", log=lambda type, **f: None)
    proposal = plan(ctx)[0]
    assert proposal.origin == "template:grouped_conv"
    return proposal.source


# Runs each case's candidate under the interpreter (set before Triton is imported) at each
# (ROLL_CHUNK, ROLL_BLOCK, the direct path's BLOCK_ROWS and BLOCK_W); prints, per case and
# setting, the error against torch in float64, the reference's largest magnitude, whether any
# output is NaN (never written), and each launch's grid; or the case's error. Every case in one
# process (each imported torch and Triton again: a fifth of the module's time), each as it ran
# alone: its seed set first, its allocations poisoned while it runs.
SCRIPT = r"""
import json, sys, traceback, types, torch
import triton
grids, patched = [], set()
empty = torch.empty


def check(ref_path, cand_path, settings):
    ref, cand = types.ModuleType("ref"), types.ModuleType("cand")
    exec(compile(open(ref_path).read(), ref_path, "exec"), ref.__dict__)
    exec(compile(open(cand_path).read(), cand_path, "exec"), cand.__dict__)
    prefix = next(k for k in vars(cand) if k.endswith("_ROLL_CHUNK"))[:-len("_ROLL_CHUNK")]
    launch = type(getattr(cand, prefix.lower() + "_kernel"))
    if launch not in patched:  # once: every case's kernel is of one type
        patched.add(launch)
        index = launch.__getitem__
        launch.__getitem__ = lambda self, grid: (grids.append(list(grid)), index(self, grid))[1]
    grids.clear()
    torch.manual_seed(0)
    model = ref.Model()
    mine = cand.Model()
    mine.load_state_dict(model.state_dict())
    x = ref.get_inputs()[0]
    out = {}
    # poisoned allocations: an output element the kernel never writes is NaN
    torch.empty = lambda *a, **k: empty(*a, **k).fill_(float("nan"))
    try:
        with torch.no_grad():
            want = model.double()(x.double())
            for run, block, rows, cols in settings:
                setattr(cand, prefix + "_ROLL_CHUNK", run)
                setattr(cand, prefix + "_ROLL_BLOCK", block)
                setattr(cand, prefix + "_BLOCK_ROWS", rows)
                setattr(cand, prefix + "_BLOCK_W", cols)
                got = mine(x).double()
                out[run] = {"err": (got - want).abs().max().item(), "scale": want.abs().max().item(),
                            "nan": bool(got.isnan().any()), "grids": grids[:], "shape": list(want.shape)}
                grids.clear()
    finally:
        torch.empty = empty
    return out


for name, ref_path, cand_path, settings in json.loads(sys.argv[1]):
    try:
        found = check(ref_path, cand_path, settings)
    except Exception:
        found = {"error": traceback.format_exc()[-3000:]}
    print("CASE " + json.dumps([name, found]), flush=True)
"""


@pytest.fixture(scope="module")
def rolled(tmp_path_factory) -> dict[str, dict]:
    """SCRIPT's answer for every case, by name: at RUN = 2, 16 and 0 (see the test), or at RUN =
    16 alone where the dim cannot roll; where the process died (a kernel writing out of bounds
    can take it down), its error for the case it was running and those after it."""
    tmp = tmp_path_factory.mktemp("rolled")
    cases = []
    for name, (*spec, rolled_dim) in CASES.items():
        path = op_file(tmp, name, *spec)
        cand = tmp / f"{name}_cand.py"
        cand.write_text(candidate(path))
        settings = [[2, 4, 2, 4], [16, 16, 2, 4], [0, 16, 8, 16]] if rolled_dim is not None else [[16, 16, 2, 4]]
        cases.append([name, str(path), str(cand), settings])
    proc = run_script(SCRIPT, [json.dumps(cases)], {**os.environ, "TRITON_INTERPRET": "1"}, timeout=1200)
    found = dict(json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("CASE "))
    died = {"error": f"exit status {proc.returncode}, {len(found)} of {len(cases)} cases done: {proc.stderr[-3000:]}"}
    return {name: found.get(name, died) for name, *_ in cases}


@pytest.mark.slow  # kernels under the interpreter in a subprocess (the module's one), three settings per case
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_rolled_convolution_matches_torch(rolled, name):
    """At RUN = 2 (a tail run where the outputs along the rolled dim are odd) in tiles of 4
    columns (partial ones where a width is not a multiple of 4), RUN = 16 (one run past the
    outputs) in tiles of up to 16 outputs (whole rows, several a tile: partial tiles of rows
    where the other outer dim's outputs are 3) and RUN = 0 (the direct path, in tiles of 8 rows
    by up to 16 columns: a few programs, the last one partial; its small tiles, both branches and
    every window setting are test_pool_conv's, at 1D, 2D and 3D): torch's result in float64
    within fp32's rounding, every output written (allocations poisoned with NaN); the launch's
    grid has a second axis of ceil(outputs / RUN) runs exactly where the dim rolls. Where it
    cannot roll, at RUN = 16 alone, the direct path in tiles of 2 rows by 4 columns (several
    programs, partial tiles): the launcher keeps the direct path whatever RUN and ROLL_BLOCK
    (unread there) are, so the three settings ran one kernel three times."""
    rolled_dim = CASES[name][3]
    assert "error" not in rolled[name], rolled[name]["error"]
    assert len(rolled[name]) == (3 if rolled_dim is not None else 1)
    for run, r in rolled[name].items():
        assert not r["nan"] and r["err"] <= 1e-5 * r["scale"], (run, r["err"])
        (grid,) = r["grids"]
        if int(run) and rolled_dim is not None:
            assert len(grid) == 2 and grid[1] == math.ceil(r["shape"][rolled_dim] / int(run)), grid
        else:
            assert len(grid) == 1, grid


def test_the_run_is_a_setting_the_autotune_phase_varies(tmp_path):
    """The candidate carries ROLL_CHUNK and ROLL_BLOCK as module constants (16 and 512 by
    default) that the autotune phase finds as launch settings; ROLL_CHUNK as a path switch: the
    direct path (0) is its first variant, memory-bound too, and from the direct path the rolled
    one is tried back (the evaluator decides which pays, not the template)."""
    from okgit.search.proposers.autotune import FOCUS, Focus, variants
    from okgit.search.proposers.sites import apply, find_sites

    path = op_file(tmp_path, "dw", *CASES["depthwise3d_bias_relu"][:3])
    ctx = Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                  device="cpu", log=lambda type, **f: None)
    source = plan(ctx)[0].source
    assert "FUSED_GROUPED_CONV_0_ROLL_CHUNK: int = 16" in source and "FUSED_GROUPED_CONV_0_ROLL_BLOCK: int = 512" in source
    sites = {s.name: s for s in find_sites(source)}
    assert {"FUSED_GROUPED_CONV_0_ROLL_CHUNK", "FUSED_GROUPED_CONV_0_ROLL_BLOCK"} <= set(sites)
    switch = sites["FUSED_GROUPED_CONV_0_ROLL_CHUNK"]
    assert switch.control == "path"
    memory = Focus("memory", FOCUS["memory"][0], None, "")
    for focus in (None, memory):
        found = variants(source, 1 << 31, 1 << 16, focus)
        assert found[0] == (switch, 0), focus  # the other path is the first variant tried
        assert [v for s, v in found if s.name == switch.name] == [0, 32], focus
    direct = apply(source, switch, 0)
    assert [v for s, v in variants(direct, 1 << 31, 1 << 16) if s.name == switch.name] == [16]


# Compiles each candidate's kernel for sm_90 (no GPU needed) on the rolled path along D or H
# (arguments: path, 1 or 0, in turn) and prints its PTX's barrier count: a layout conversion
# through shared memory needs one.
SM90 = r"""
import inspect, json, sys, types
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
for path, roll_d in zip(sys.argv[1::2], [a == "1" for a in sys.argv[2::2]]):
    mod = types.ModuleType("cand")
    exec(compile(open(path).read(), path, "exec"), mod.__dict__)
    fn = next(v for k, v in vars(mod).items() if k.endswith("_kernel"))
    constants = dict(CIN_G=1, KD=3 if roll_d else 1, KH=3, KW=3, SD=1, SH=1, SW=1, PD=1, PH=1, PW=1, DD=1, DH=1, DW=1,
                     ROWS=4, BLOCK_W=64, KW_TILE=1, WIDE=False, RUN=16, ROLL_D=roll_d, KP2=4)
    params = inspect.signature(fn.fn).parameters
    sig = {q: "constexpr" if q in constants else "*fp32" if q.endswith("_ptr") else "i32" for q in params}
    compiled = triton.compile(ASTSource(fn, sig, constants, {}), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    print(json.dumps({"barriers": compiled.asm["ptx"].count("bar.sync")}))
"""


@pytest.fixture(scope="module")
def barriers(tmp_path_factory) -> dict[bool, dict]:
    """SM90's answer by roll_d: rolled along D (depthwise3d_bias_relu's candidate) and along H
    (grouped2d_prologue's), both compiled in one process (a process each imported Triton and
    torch each time)."""
    pytest.importorskip("triton.backends.nvidia")
    tmp = tmp_path_factory.mktemp("hopper")
    args = []
    for roll_d in (True, False):
        path = op_file(tmp, "dw", *CASES["depthwise3d_bias_relu" if roll_d else "grouped2d_prologue"][:3])
        cand = tmp / f"cand_{int(roll_d)}.py"
        cand.write_text(candidate(path))
        args += [str(cand), "1" if roll_d else "0"]
    proc = subprocess.run([sys.executable, "-c", SM90, *args], capture_output=True, text=True, timeout=600, check=False,
                          env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("no ptxas in this Triton")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(zip((True, False), map(json.loads, proc.stdout.splitlines()[-2:]), strict=True))


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas), twice, in the module's one process for them
@pytest.mark.parametrize("roll_d", [True, False])
def test_the_slots_stay_in_their_threads_on_hopper(barriers, roll_d):
    """Compiled for sm_90 here, without a GPU (what the interpreter never checks: constexprs
    stay constexprs, the branches' types agree): the accumulators' slot axis lies within each
    thread as the plane's tile does, so adding a tile into its slots and summing a finished
    output out of them moves nothing through shared memory (no barrier in the kernel)."""
    assert barriers[roll_d] == {"barriers": 0}
