"""The implicit-GEMM convolution's packed operands (conv_plan.py.tmpl): the weight packed per
phase and group into zero-padded K-major matrices, and the table of where each run of K's
channels reads the input, in each of the plan's layouts of K: runs of gcd(CG, BLOCK_K)
channels (several taps a step where the channels are few, vector loads where `VEC` says so),
whole BLOCK_K chunks of one tap's channels (`CHUNKS`: the tail masked) and single channels. The
layout is checked entry by entry against the weight, and the kernel under Triton's interpreter
against float64 on forms that land in each layout and each tiling of M (which, is asserted, so
that a change of the plan's rules cannot leave one untested)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable

import pytest
import torch
from oprun import run_ops
from test_conv_kind import ctx_for, form, setting

from okgit.search.proposers.templates import plan


def with_inf(shape: str, at: str) -> str:
    """Uniform inputs of `shape` with one inf at index `at`: a channel tail read unmasked (times
    the packed weight's zeros) would turn it into NaNs where the reference has none."""
    return f"torch.rand({shape}).index_put_(tuple(torch.tensor(i) for i in {at}), torch.tensor(float('inf')))"


# name: (op file text, tile settings, the plan's switches expected at the form's input)
FORMS = {
    "chunks, channel tail": (form("nn.Conv2d(cin, cout, 3, padding=1)", "y", with_inf("batch, cin, 5, 6", "(1, 0, 2, 3)"),
                                  26, 12, 2), {}, {"CHUNKS": True, "RUN": 32, "VEC": 2, "ROWS": False}),
    "chunks, grouped 3d, channel tail": (
        form("nn.Conv3d(cin, cout, 2, padding=(0, 1, 1), groups=2)", "torch.sigmoid(y)",
             with_inf("batch, cin, 3, 4, 3", "(0, 30, 1, 2, 1)"), 60, 16, 3), {}, {"CHUNKS": True, "RUN": 32, "VEC": 2}),
    "chunks, transposed phases, grouped": (
        form("nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1, output_padding=1, groups=2)", "y + self.p",
             "torch.rand(batch, cin, 3, 4)", 28, 12, 2), {"BLOCK_K": 16}, {"CHUNKS": True, "RUN": 16, "VEC": 2}),
    "runs, two per tap, strided, column tail": (
        form("nn.Conv2d(cin, cout, 3, stride=2, padding=1)", "torch.relu(y) * self.p", "torch.rand(batch, cin, 7, 6)",
             32, 20, 2), {"BLOCK_K": 16, "BLOCK_N": 16}, {"CHUNKS": False, "RUN": 16, "VEC": 4}),
    "runs, one tap": (form("nn.Conv2d(cin, cout, 1, stride=2)", "y - self.p", "torch.rand(batch, cin, 4, 5)", 32, 24, 2),
                      {"BLOCK_K": 16}, {"CHUNKS": False, "RUN": 16, "VEC": 4}),
    # 8 channels: four taps a step, the last step's padding runs not read
    "runs, several taps a step, padding": (
        form("nn.Conv2d(cin, cout, 3, padding=1)", "torch.tanh(y)", with_inf("batch, cin, 5, 6", "(0, 0, 2, 3)"), 8, 12, 2),
        {}, {"CHUNKS": False, "RUN": 8, "VEC": 4, "ROWS": False}),
    "runs, transposed grouped 3d": (
        form("nn.ConvTranspose3d(cin, cout, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 0), "
             "groups=2)", "torch.tanh(y)", "torch.rand(batch, cin, 3, 4, 3)", 16, 8, 3), {}, {"CHUNKS": False, "RUN": 8}),
    "runs, transposed phases without taps": (
        form("nn.ConvTranspose1d(cin, cout, 3, stride=2, dilation=2, padding=1)", "y * 2.0", "torch.rand(batch, cin, 6)",
             16, 8, 1), {"BLOCK_K": 16}, {"CHUNKS": False, "RUN": 16, "VEC": 4}),
    # a group's few channels (one group's are padded to 4 in the copy instead: below)
    "single channels, grouped, K over several steps": (
        form("nn.Conv2d(cin, cout, (3, 2), padding=(1, 0), dilation=(1, 2), groups=2)", "torch.tanh(y)",
             "torch.rand(batch, cin, 5, 7)", 18, 12, 2), {"BLOCK_K": 16}, {"CHUNKS": False, "RUN": 1, "VEC": 1}),
    "single channels, grouped, transposed, padding": (
        form("nn.ConvTranspose2d(cin, cout, 3, stride=2, padding=1, groups=2)", "y",
             with_inf("batch, cin, 3, 4", "(0, 0, 1, 1)"), 10, 10, 2), {"BLOCK_K": 16}, {"CHUNKS": False, "RUN": 1}),
    # one group's channels padded with zeros to a multiple of 4 in the copy: 16-byte runs, K per tap the padded count
    "padded channels, 3 of 4, 3d": (
        form("nn.Conv3d(cin, cout, 3, padding=1)", "torch.relu(y)", with_inf("batch, cin, 3, 4, 5", "(1, 2, 1, 2, 3)"),
             3, 8, 3), {"BLOCK_K": 16}, {"CHUNKS": False, "RUN": 4, "VEC": 4}),
    "padded channels, 6 of 8, transposed phases": (
        form("nn.ConvTranspose2d(cin, cout, 3, stride=2, padding=1)", "y * self.p", "torch.rand(batch, cin, 3, 4)",
             6, 8, 2), {}, {"CHUNKS": False, "RUN": 8, "VEC": 4}),
    # tiles within one output row (ROWS): two per row, the second with a tail; many rows
    "rows, runs, padded": (
        form("nn.Conv2d(cin, cout, 3, padding=1)", "y * self.p + torch.sigmoid(y)", "torch.rand(batch, cin, 4, 31)",
             16, 20, 2), {"BLOCK_M": 16, "BLOCK_K": 16}, {"RUN": 16, "VEC": 4, "ROWS": True}),
    "rows, padded channels, strided 3d": (
        form("nn.Conv3d(cin, cout, 3, stride=(1, 1, 2), padding=1)", "torch.relu(y)", "torch.rand(batch, cin, 3, 4, 31)",
             5, 8, 3), {"BLOCK_M": 16}, {"RUN": 8, "VEC": 4, "ROWS": True}),
    "rows, transposed phases": (
        form("nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1)", "y - self.p", "torch.rand(batch, cin, 3, 16)",
             16, 8, 2), {"BLOCK_M": 16, "BLOCK_K": 16}, {"RUN": 16, "ROWS": True}),
}

def candidate(tmp_path, name: str) -> tuple[str, str]:
    """The reference's path and the 3xTF32 convolution's candidate for FORMS[name], its tiles set."""
    text, tiles, _ = FORMS[name]
    path = tmp_path / (re.sub(r"\W+", "_", name) + ".py")
    path.write_text(text)
    source = next(p.source for p in plan(ctx_for(path, "cuda")) if p.origin == "template:conv")
    for key, value in tiles.items():
        source = setting(source, key, value)
    return str(path), source


def module(source: str, monkeypatch) -> types.ModuleType:
    """The candidate as a module, its kernels under Triton's interpreter."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    mod = types.ModuleType("cand")
    exec(compile(source, "cand.py", "exec"), mod.__dict__)
    return mod


def conv_plan(mod: types.ModuleType, x: torch.Tensor, model: torch.nn.Module):
    """The candidate's _ConvPlan for its model's convolution at input x, at its tile settings."""
    conv = model.conv
    name = next(k[:-len("_BLOCK_M")] for k in vars(mod) if k.endswith("_BLOCK_M"))
    setting = lambda key: getattr(mod, f"{name}_{key}")  # noqa: E731
    transposed = isinstance(conv, torch.nn.modules.conv._ConvTransposeNd)
    return mod._ConvPlan(x, conv.weight.detach(), setting("BLOCK_M"), setting("BLOCK_N"), setting("BLOCK_K"), "ieee",
                         setting("INPUT_COPY"), setting("TMA"), stride=conv.stride, padding=conv.padding, dilation=conv.dilation,
                         groups=conv.groups, transposed=transposed, output_padding=conv.output_padding)


@pytest.mark.parametrize("name", FORMS)
def test_the_plan_packs_the_weight_and_tables_the_input_offsets(tmp_path, monkeypatch, name):
    """Per launch (phase): packed[g, n, tap * per_tap + c] is the weight at the phase's tap (in d,
    h, w order) for input channel c and output channel n of group g, zero in every padded row and
    column; the table's offsets are the tap's input offset plus the chunk's or channel's."""
    path, source = candidate(tmp_path, name)
    mod = module(source, monkeypatch)
    ref = module(FORMS[name][0], monkeypatch)
    model = ref.Model(*ref.get_init_inputs())
    x = ref.get_inputs()[0]
    p = conv_plan(mod, x, model)
    assert {k: p.switches[k] for k in FORMS[name][2]} == FORMS[name][2]
    w = model.conv.weight.detach()
    w5 = w[(slice(None),) * 2 + (None,) * (5 - w.dim())]
    transposed = isinstance(model.conv, torch.nn.modules.conv._ConvTransposeNd)
    groups, block_k = model.conv.groups, getattr(mod, next(k for k in vars(mod) if k.endswith("_BLOCK_K")))
    xs = p.x.stride()
    every = w5.flatten(2)  # (.., .., kernel taps)
    wcg = (w.shape[0] if transposed else w.shape[1] * groups) // groups  # the weight's input channels per group
    seen: list[int] = []
    for _, packed, table, sizes in p.launches:
        _, _, cog, kp, np_, _, cg, cgp = sizes[:8]
        run = p.switches["RUN"]
        per_tap = cgp if p.switches["CHUNKS"] else cg
        taps = int((table >= 0).sum()) * run // per_tap
        assert packed.shape == (groups, np_, kp) and packed.is_contiguous()
        assert kp % block_k == 0 and np_ % getattr(mod, next(v for v in vars(mod) if v.endswith("_BLOCK_N"))) == 0
        live = torch.zeros_like(packed, dtype=torch.bool)
        for t in range(taps):
            live[:, :cog, t * per_tap:t * per_tap + wcg] = True
        assert not packed[~live].any(), "padding must be zeros (a masked input times it adds nothing)"
        # every live block is the weight at one kernel tap, the taps in (d, h, w) order
        found = []
        for t in range(taps):
            block = packed[:, :cog, t * per_tap:t * per_tap + wcg]  # (groups, cog, wcg)
            want = block.permute(0, 2, 1).reshape(groups * wcg, cog) if transposed else block.reshape(groups * cog, wcg)
            found += [j for j in range(every.shape[2]) if torch.equal(every[:, :, j], want)]
        assert found == sorted(found) and len(found) == taps
        seen += found
        # the table: per tap its runs' offsets (RUN channels apart; whole chunks with CHUNKS),
        # the taps apart by their input offsets (not checked here: the kernel's test is), then -4s
        assert run == (block_k if p.switches["CHUNKS"] else math.gcd(cg, block_k) if xs[4] == 1 else 1)
        assert table.numel() == kp // run and (table[taps * per_tap // run:] == -4).all()
        runs = table[:taps * per_tap // run].reshape(taps, per_tap // run)
        assert (runs - runs[:, :1] == torch.arange(0, per_tap, run) * xs[4]).all()
    # a convolution's one phase holds every tap; a transposed one's phases split them (some none)
    assert sorted(seen) == list(range(every.shape[2])) if not transposed else len(set(seen)) == len(seen)


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_each_layout_matches_float64(tmp_path):
    """The kernel in each layout of K against float64: channel tails, one tap, several chunks per
    tap, aligned vectors, a column tail, groups, transposed phases (some without taps)."""
    jobs = [(*candidate(tmp_path, name), {}) for name in FORMS]
    results = run_ops(jobs, timeout=900)
    bad = [(n, r["why"]) for n, r in zip(FORMS, results, strict=True) if not r["ok"]]
    assert not bad, bad


# a candidate's `kernel` compiled for sm_90 as `job` says (signature, constants, warps, stages);
# each test's script reads the compiled kernel after it
SM90_COMPILE = r"""
import json, re, sys, types
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
path, kernel, job = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
mod = types.ModuleType("cand")
exec(compile(open(path).read(), path, "exec"), mod.__dict__)
attrs = {(i,): [["tt.divisibility", 16]] for i in job["aligned"]}
compiled = triton.compile(ASTSource(getattr(mod, kernel), job["signature"], job["constants"], attrs),
                          target=GPUTarget("cuda", 90, 32), options={"num_warps": job["warps"], "num_stages": job["stages"]})
"""
SM90_SCRIPT = SM90_COMPILE + r"""
# the widths of the copies global -> shared ahead of the products (cp.async: 4, 8 or 16 bytes)
copies = re.findall(r"cp\.async\.c[ag]\.shared\.global [^;]*, (0x[0-9a-f]+),", compiled.asm["ptx"])
print(json.dumps({int(w, 16): copies.count(w) for w in set(copies)}))
"""


def compiled_for_sm90(tmp_path_factory, cases: list, make_job: Callable[..., tuple[str, str, dict]],
                      script: str) -> dict:
    """`script` run on each case's (candidate source, kernel, job), `make_job(tmp, monkeypatch,
    case)`'s (compiling `kernel` for sm_90 with the job's signature, constants, warps and stages,
    outside the interpreter), all in one process (a process a candidate imported Triton each
    time): what it printed last for each, as JSON, by case; skipped where this Triton has no
    NVIDIA backend or no ptxas."""
    pytest.importorskip("triton.backends.nvidia")
    tmp_path = tmp_path_factory.mktemp("hopper")
    with pytest.MonkeyPatch.context() as monkeypatch:
        jobs = [make_job(tmp_path, monkeypatch, case) for case in cases]
    args = []
    for i, (source, kernel, job) in enumerate(jobs):
        (tmp_path / f"cand{i}.py").write_text(source)
        args.append([str(tmp_path / f"cand{i}.py"), kernel, job])
    each = ("import json, sys\nfor _path, _kernel, _job in json.loads(sys.argv[1]):\n"
            "    sys.argv[1:] = [_path, _kernel, json.dumps(_job)]\n" + textwrap.indent(script, "    ")
            + "\n    print('END OF JOB', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", each, json.dumps(args)], capture_output=True, text=True, timeout=600,
                          check=False, env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("no ptxas in this Triton")
    assert proc.returncode == 0, proc.stderr[-3000:]
    outputs = proc.stdout.split("END OF JOB\n")[:-1]
    return dict(zip(cases, [json.loads(out.splitlines()[-1]) for out in outputs], strict=True))


def sm90_job(tmp_path, monkeypatch, name: str) -> tuple[str, str, dict]:
    """FORMS[name]'s candidate, its conv kernel's name and the compile job (signature, constants,
    warps, stages) of a launch at the form's input: ints and pointers divisible by 16 marked so,
    as Triton specializes them, with a 128 x 128 tile on 8 warps."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    _, source = candidate(tmp_path, name)
    mod = module(source, monkeypatch)
    ref = module(FORMS[name][0], monkeypatch)
    p = conv_plan(mod, ref.get_inputs()[0], ref.Model(*ref.get_init_inputs()))
    _, packed, table, sizes = p.launches[0]
    kernel = next(k for k in vars(mod) if k.endswith("_kernel") and k.startswith("fused_conv"))
    prefix = kernel[:-len("_kernel")].upper()
    params = [q for q in __import__("inspect").signature(getattr(mod, kernel).fn).parameters.values()]
    tensors = {"x_ptr": p.x, "w_ptr": packed, "t_ptr": table}
    epilogue = [q.name for q in params if q.name.endswith("_ptr") and q.name not in tensors]
    values = dict(zip([q.name for q in params if "constexpr" not in str(q.annotation) and not q.name.endswith("_ptr")],
                      sizes, strict=True))
    constants = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": getattr(mod, f"{prefix}_BLOCK_K"), "GROUP_M": getattr(mod, f"{prefix}_GROUP_M"),
                 **p.switches, "PRECISION": "tf32x3", "WIDE": False}
    signature, aligned = {}, []
    for i, q in enumerate(params):
        if q.name in constants:
            signature[q.name] = "constexpr"
        elif q.name in tensors or q.name in epilogue:
            t = tensors.get(q.name)
            signature[q.name] = "*i64" if t is not None and t.dtype == torch.int64 else "*fp32"
            aligned.append(i)
        else:
            kind, spec = native_specialize_impl(BaseBackend, values[q.name], False, True, True)
            signature[q.name] = kind
            if kind == "constexpr":
                constants[q.name] = values[q.name]
            elif spec == "D":
                aligned.append(i)
    return source, kernel, {"signature": signature, "constants": constants, "aligned": aligned, "warps": 8,
                            "stages": getattr(mod, f"{prefix}_NUM_STAGES")}


# (form, whether its input's tile is copied in vectors)
VECTORS = [("chunks, grouped 3d, channel tail", True), ("runs, several taps a step, padding", True),
           ("padded channels, 3 of 4, 3d", True), ("single channels, grouped, K over several steps", False)]
@pytest.fixture(scope="module")
def copy_widths(tmp_path_factory) -> dict[str, dict[int, int]]:
    """SM90_SCRIPT's copy widths for each form of VECTORS, by name, all compiled in one process."""
    found = compiled_for_sm90(tmp_path_factory, [name for name, _ in VECTORS], sm90_job, SM90_SCRIPT)
    return {name: {int(k): v for k, v in widths.items()} for name, widths in found.items()}


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas), in the module's one process for every form
@pytest.mark.parametrize(("name", "vector_a"), VECTORS)
def test_tiles_load_with_16_byte_vectors_on_hopper(copy_widths, name, vector_a):
    """Compiled for sm_90 here, without a GPU, as a launch at the form's input specializes it (ints
    and pointers divisible by 16 marked so, as Triton does), with a 128 x 128 tile on 8 warps: the
    packed weight's tile is copied to shared memory in 16-byte vectors (K contiguous, as Hopper's
    TF32 products take it), and where K's runs are contiguous channels the input's tile is copied
    in vectors too, none element by element (16 bytes where VEC is 4, 8 where it is 2, the
    channel tail's mask constant over each vector); in single channels it is a gather of
    elements (the table's offsets say nothing of contiguity)."""
    widths = copy_widths[name]
    if vector_a:
        assert widths.get(16) and not widths.get(4), widths
    else:
        assert widths.get(4), widths
