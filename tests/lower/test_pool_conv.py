"""The pooling and grouped-convolution kinds (okgit/lower/kinds/pool.py, grouped_conv.py): what
they recognise, a window that a knob the evaluator varies sets bound to the module's attribute
(okgit.lower.binding.bind_ints), and their kernels' numerics against PyTorch under the Triton
interpreter (NaN and -inf, padding, ceil mode, the average's divisors, dilation, channel
multipliers), with both tile layouts and several programs."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from oprun import run_ops

from okgit.eval.judge.prepared import shape_variants
from okgit.eval.types import Reference, Status
from okgit.lower.capture import capture
from okgit.lower.kinds.window import WINDOW
from okgit.problem import load_problem, with_knobs
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

# windows each kernel is checked at: each the op file's own (knobs below 8, which the evaluator
# leaves alone, stay literals in the candidate; see test_a_bound_window_is_correct for one it varies)
WINDOWS = [{}, {"k": 2, "s": 1, "p": 0, "d": 1}, {"k": 4, "s": 3, "p": 2, "d": 1}]


def ctx_for(path: Path, notes: list | None = None) -> Context:
    log = (lambda type, **f: notes.append(f.get("message"))) if notes is not None else (lambda type, **f: None)
    return Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                   device="cpu", log=log)


def pool_file(tmp_path: Path, name: str, module: str, forward: str, shape: str) -> Path:
    """A pooling op whose window comes from knobs; its input holds NaN and -inf here and there."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(f'''\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, k, s, p, d):
                super().__init__()
                self.pool = {module}
                self.bias = nn.Parameter(torch.randn(channels))

            def forward(self, x):
                return {forward}


        batch = 2
        channels = 3
        size = 11
        k = 3
        s = 2
        p = 1
        d = 2


        def get_inputs():
            x = torch.randn({shape})
            x[torch.rand_like(x) < 0.03] = float("nan")
            x[torch.rand_like(x) < 0.03] = float("-inf")
            return [x]


        def get_init_inputs():
            return [k, s, p, d]
        '''))
    return path


ROOT = Path(__file__).resolve().parents[2]
# Input sizes: as small as keeps, at every window above, what these kernels are checked for: some
# tiles inside the input (the branch without bounds) where a window fits one, tiles at its edges,
# partial tiles of rows and of columns, several programs, the last window of ceil mode, NaN and -inf
# reaching the output. Planes (samples x channels) as few as keep tiles across planes: both samples
# and every channel only where a per-channel operand is read (a plane's channel is its index modulo
# the channels); the interpreter's time grows with the programs, so with the planes. A partial tile
# of rows (the row mask, one line at every window and dim): the 1D ops' three planes in tiles of two
# rows, at every window (the 3D average's two planes, 12 rows at its k=4 window, have none). The 3D
# average at 4 x 5 x 7 (two thirds of the programs of 5 x 6 x 7): ceil mode's last window along D at
# its own window and along H at k=4, tiles inside the input at k=2.
POOLS = {
    "max1d_ceil": ("nn.MaxPool1d(k, s, p, d, ceil_mode=True)", "self.pool(x)", "1, channels, size + 6"),
    "max2d_epilogue": ("nn.MaxPool2d(k, s, p, d, ceil_mode=True)", "torch.relu(self.pool(x) + self.bias.view(1, -1, 1, 1))",
                       "batch, channels, 2, 7"),
    "max3d_prologue": ("nn.MaxPool3d(k, s, p, d)", "self.pool(x * 2.0 - 1.0)", "1, 2, 5, 3, 7"),
    # a prologue with a per-channel operand; a padding tap must stay -inf, not the prologue of 0
    "max2d_prologue_channels": ("nn.MaxPool2d(k, s, p, d)", "self.pool(x * self.bias.view(1, -1, 1, 1) - 0.5)",
                                "batch, channels, 6, 7"),
    "avg2d_prologue": ("nn.AvgPool2d(k, s, p)", "self.pool(torch.exp(x) + 1.0)", "batch, 1, 3, 6"),
    "avg1d_no_pad_count": ("nn.AvgPool1d(k, s, p, ceil_mode=True, count_include_pad=False)", "self.pool(x)", "1, channels, size + 6"),
    "avg2d_ceil": ("nn.AvgPool2d(k, s, p, ceil_mode=True)", "self.pool(x)", "batch, 1, 4, 5"),
    "avg2d_divisor_unbatched": ("nn.AvgPool2d(k, s, p, divisor_override=5)", "torch.sigmoid(self.pool(x))", "2, 3, 6"),
    "avg3d_ceil_no_pad_count": ("nn.AvgPool3d(k, s, p, ceil_mode=True, count_include_pad=False)", "self.pool(x)",
                                "1, 2, size - 7, size - 6, size - 4"),
}


def conv_file(tmp_path: Path, name: str, module: str, forward: str, shape: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(f'''\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, cin, cout, k, s, p, d, groups):
                super().__init__()
                self.conv = {module}

            def forward(self, x):
                return {forward}


        batch = 2
        cin = 4
        cout = 8
        size = 11
        k = 3
        s = 2
        p = 1
        d = 2
        groups = 4


        def get_inputs():
            return [torch.randn({shape})]


        def get_init_inputs():
            return [cin, cout, k, s, p, d, groups]
        '''))
    return path


# As for the pools: sizes as small as keeps what the kernel is checked for (and channels: a
# multiplier of 2 in each setting but the depthwise one, two input channels per group in the last)
CONVS = {
    "conv1d_multiplier": ("nn.Conv1d(cin, cout, k, s, p, d, groups=groups)", "self.conv(x)", "batch, cin, 6"),
    "conv2d_no_bias_epilogue": ("nn.Conv2d(cin, cout, k, s, p, d, groups=groups, bias=False)", "torch.relu(self.conv(x)) * 2.0",
                                "batch, cin, 5, 7"),
    "conv3d": ("nn.Conv3d(cin, cout, k, s, p, d, groups=groups)", "self.conv(x)", "1, cin, 5, 5, 7"),
    # a padding tap is 0, not the prologue's sigmoid(0); one sample (its prologue at every tap made
    # it the fixture's costliest op at two; a sample's offset is the other convolutions' at 2)
    "conv2d_prologue": ("nn.Conv2d(cin, cout, k, s, p, d, groups=groups)", "self.conv(torch.sigmoid(x))", "1, cin, 5, 7"),
}
CONV_SETTINGS = [{"cin": 2, "cout": 4, "groups": 2}, {"cin": 3, "cout": 3, "groups": 3, "k": 2, "s": 1, "p": 0, "d": 1},  # depthwise
                 {"cin": 4, "cout": 4, "k": 4, "s": 3, "p": 2, "d": 1, "groups": 2}]
# The 3D convolution's last setting with one output channel per group: its 64 taps a window made
# that run the fixture's costliest by far (8.5 of its 62 CPU s at a multiplier of 2); an output
# channel's group is one line at every dim, a multiplier of 2 the 3D one's at its own window and
# the 1D and 2D ones' at every setting.
SETTINGS_OF = {"conv3d": [*CONV_SETTINGS[:2], {**CONV_SETTINGS[2], "cout": 2}]}


def layouts(source: str, lanes: tuple[int, ...] = (1, 2)) -> list[str]:
    """The candidate with one lane per output and with window rows across two lanes (in chunks,
    the last one part masked where the window is odd), each in tiles small enough for several
    programs, tiles inside the input (no bounds checked) and tiles at its edges."""
    small = re.sub(r"^(FUSED_\w+)_BLOCK_W: int = \d+", r"\1_BLOCK_W: int = 4", source, flags=re.MULTILINE)
    small = re.sub(r"^(FUSED_\w+)_BLOCK_ROWS: int = \d+", r"\1_BLOCK_ROWS: int = 2", small, flags=re.MULTILINE)
    assert small.count(": int = 4") and small.count(": int = 2")
    return [re.sub(r"^(FUSED_\w+_ROW_LANES): int = \d+", rf"\1: int = {n}", small, flags=re.MULTILINE) for n in lanes]


def lanes_at(name: str, source: str, knobs: dict[str, int]) -> tuple[int, ...]:
    """The layouts (ROW_LANES) op `name`'s candidate runs at setting `knobs`: both, except
    - on the grouped convolution's rolled path (a 2D or 3D window at stride 1 and dilation 1:
      the depthwise setting, ROLL_CHUNK > 0): its launcher shapes the tile itself (ROLL_BLOCK)
      and the kernel reads a window row a tap at a time, so both layouts run the same kernel;
    - for a 3D op, at the windows other than its own: a window row across lanes is the last dim's
      (the tap axis, the same lines at 1, 2 or 3 dims), checked at every window by the 1D and 2D
      ops (max and average, prologues, ceil mode, dilation, padding) and in 3D at the op's own
      window (3 taps a row: a whole chunk and a masked one); the 3D ops' windows at one lane;
    - for the 3D max pooling, at the windows other than its own, none: a depth's window (its
      start, taps, bounds and the tile inside the input) is the same lines for the max and the
      average, the 3D average's at those windows (which also counts its divisor over depth), and
      a max's own lines (-inf start and padding after a prologue, NaN kept) are the 3D max's at
      its own window and the 1D and 2D maxes' at every window."""
    window = {"k": 3, "s": 2, "d": 2, **knobs}
    dims = int(re.search(r"(\d)d", name)[1])
    roll = re.search(r"^FUSED_\w+_ROLL_CHUNK: int = (\d+)$", source, flags=re.MULTILINE)
    if roll and int(roll[1]) and dims > 1 and window["k"] > 1 and window["s"] == 1 and window["d"] == 1:
        return (1,)
    if dims < 3 or not {"k", "s", "p", "d"} & set(knobs):
        return (1, 2)
    return () if name.startswith("max") else (1,)


def with_defaults(path: Path, knobs: dict[str, int]) -> Path:
    """A copy of the op file `path` whose knobs default to `knobs` (`path` itself for none)."""
    if not knobs:
        return path
    out = path.with_name(path.stem + "".join(f"_{k}{v}" for k, v in sorted(knobs.items())) + ".py")
    out.write_text(ast.unparse(with_knobs(path.read_text(), str(path), knobs)))
    return out


@dataclass
class Checked:
    """One op of POOLS or CONVS: the kind of the first candidate at each setting, and where one of
    those candidates (of the op's kind) differs from torch under a tile layout: (knobs, why)."""

    kinds: list[str] = field(default_factory=list)
    mismatches: list[tuple[dict[str, int], str]] = field(default_factory=list)


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[str, Checked]:
    """Each op's first candidate with its knobs defaulting to each of its settings, in the layouts
    lanes_at gives, every one run in one interpreter process."""
    tmp = tmp_path_factory.mktemp("kernels")
    ops = {name: (pool_file(tmp, name, *spec), "pool", WINDOWS) for name, spec in POOLS.items()}
    ops |= {name: (conv_file(tmp, name, *spec), "grouped_conv", SETTINGS_OF.get(name, CONV_SETTINGS))
            for name, spec in CONVS.items()}
    found = {name: Checked() for name in ops}
    cases = []  # (name, knobs, job)
    for name, (path, kind, settings) in ops.items():
        for knobs in settings:
            op = with_defaults(path, knobs)
            proposal = plan(ctx_for(op))[0]
            found[name].kinds.append(proposal.origin.split(":")[1].split("+")[-1])
            if found[name].kinds[-1] == kind:
                variants = layouts(proposal.source, lanes_at(name, proposal.source, knobs))
                cases += [(name, knobs, (op, variant, {})) for variant in variants]
    for (name, knobs, _), r in zip(cases, run_ops([job for _, _, job in cases], timeout=1800), strict=True):
        if not r["ok"]:
            found[name].mismatches.append((knobs, r["why"][-600:]))
    return found


@pytest.mark.slow  # kernels under the interpreter (the module's one process), one op file per window
@pytest.mark.timeout(1800)  # the interpreter, one program per tile of a few outputs
@pytest.mark.parametrize("name", sorted(POOLS))
def test_pooling_kernels_match_torch(checked, name):
    assert checked[name].kinds == ["pool"] * len(WINDOWS)
    assert not checked[name].mismatches


@pytest.mark.slow  # kernels under the interpreter (the module's one process), one op file per convolution
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", sorted(CONVS))
def test_grouped_convolution_kernels_match_torch(checked, name):
    assert checked[name].kinds == ["grouped_conv"] * len(CONV_SETTINGS)
    assert not checked[name].mismatches


def bound_window_file(tmp_path: Path) -> Path:
    """An average pooling whose window is a knob the evaluator varies (kernel_size = 11), over two
    planes (the interpreter's time grows with them; the window's binding does not depend on them)
    of finite input (at 121 taps a window, NaN and -inf here and there would leave few outputs
    finite to compare: NaN is test_pooling_kernels_match_torch's), 22 x 22 (the evaluator's
    shapes: 21 and 10 with windows of 9, 4 and 11, 8 x 8 outputs at most, a tile of the shared
    rows path a plane; the time grows with the tiles too, and the window's binding does not
    depend on how many)."""
    path = pool_file(tmp_path, "avg", "nn.AvgPool2d(k, s, p)", "self.pool(x)", "batch, channels, size, size")
    text = path.read_text().replace("k = 3", "k = 11").replace("size = 11", "size = 22")
    text = text.replace("batch = 2", "batch = 1").replace("channels = 3", "channels = 2")
    path.write_text("\n".join(line for line in text.splitlines() if "torch.rand_like" not in line) + "\n")
    return path


def test_the_window_follows_the_knobs(tmp_path):
    """A window set by a knob the evaluator varies is bound to the module's attribute
    (okgit.lower.binding.bind_ints): the kernel takes it at launch."""
    path = bound_window_file(tmp_path)
    graph = capture(load_problem(path))
    (pool,) = [n for n in graph.nodes if n.kind == "extern"]
    assert [getattr(v, "expr", None) for v in pool.args[1]] == ["self.pool.kernel_size"] * 2
    (proposal,) = plan(ctx_for(path))
    assert "= fused_pool_0(x, [int(self.pool.kernel_size), int(self.pool.kernel_size)], [2, 2], " in proposal.source


@pytest.mark.slow  # the interpreter at the evaluator's shape variants
@pytest.mark.timeout(600)
def test_a_bound_window_is_correct(tmp_path):
    """That candidate gives torch's result at the evaluator's other shapes, where the window
    changes with the input's size and apart from it."""
    path = bound_window_file(tmp_path)
    (proposal,) = plan(ctx_for(path))
    settings = shape_variants(load_problem(path).knobs)
    assert {s["k"] for s in settings} == {4, 9, 11}
    results = run_ops([(path, proposal.source, knobs) for knobs in settings], timeout=600)
    assert all(r["ok"] for r in results), [(knobs, r["why"][-600:]) for knobs, r in zip(settings, results, strict=True)]


@pytest.mark.parametrize("forward, why", [
    ("torch.nn.functional.max_pool2d(x, 2, return_indices=True)", "no template covers aten.max_pool2d_with_indices (pooling)"),
    ("torch.nn.functional.adaptive_avg_pool2d(x, 3)", "no template covers aten.adaptive_avg_pool2d (pooling)"),
])
def test_pools_it_does_not_cover_are_said(tmp_path, forward, why):
    notes: list = []
    path = pool_file(tmp_path, "other", "None", forward, "batch, channels, size, size")
    assert plan(ctx_for(path, notes)) == []
    assert any(why in n for n in notes), notes


@pytest.mark.parametrize("module, channels, taken", [
    ("nn.Conv2d(cin, cout, k, s, p, d, groups=groups)", "cin", True),
    ("nn.Conv2d(cin, cout, k, s, p, d, groups=1)", "cin", False),  # dense: a GEMM's business
    ("nn.Conv2d(cin * 8, cout * 8, k, s, p, d, groups=2)", "cin * 8", False),  # 16 channels per group: too many
    ("nn.Conv2d(cin, cout, k, 1, 'same', d, groups=groups)", "cin", False),  # string padding
    ("nn.ConvTranspose2d(cin, cout, k, s, p, groups=groups)", "cin", False),  # transposed: not covered
])
def test_which_convolutions_get_the_direct_kernel(tmp_path, module, channels, taken):
    notes: list = []
    path = conv_file(tmp_path, "conv", module, "self.conv(x) * 2.0", f"batch, {channels}, size, size + 2")
    origins = [p.origin for p in plan(ctx_for(path, notes))]
    assert origins and not any("cannot" in n for n in notes), notes  # the reference is captured
    assert ("template:grouped_conv" in origins) == taken, origins


def test_window_sizes_are_torchs(tmp_path):
    """`_window` (the launcher's helper) gives PyTorch's output sizes, ceil mode included."""
    ns: dict = {}
    exec(WINDOW.read_text(), ns)
    checked = 0
    for n in (1, 2, 3):
        for size in (5, 6, 9):
            for k, s, p, d, ceil in ((2, 2, 0, 1, False), (3, 2, 1, 1, True), (3, 3, 1, 2, True), (4, 3, 2, 1, True), (5, 1, 2, 1, False)):
                x = torch.empty((2, 3) + (size,) * n, device="meta")
                pool = getattr(torch.nn.functional, f"max_pool{n}d")
                try:
                    want = pool(x, k, s, p, d, ceil_mode=ceil).shape[2:]
                except RuntimeError:
                    continue  # an invalid window for this size
                kk, ss, pp, dd, out = ns["_window"](x.shape[2:], [k] * n, [s], p, d, ceil)
                assert out[3 - n:] == list(want) and kk[: 3 - n] == [1] * (3 - n) and pp[: 3 - n] == [0] * (3 - n)
                checked += 1
    assert checked > 30
    assert ns["_window"]((7,), 3, [], 0, 1, False)[1] == [1, 1, 3]  # an empty stride is the window
    assert math.prod(ns["_window"]((4, 4), (2, 2), (2, 2), (0, 0), (1, 1), False)[4]) == 4


@pytest.mark.slow  # a real worker and judge
def test_a_pooling_candidate_is_judged_correct(evaluator, tmp_path):
    """One candidate through the real evaluator: workers, judge, extra shapes and all."""
    module, forward, _ = POOLS["max2d_epilogue"]
    path = pool_file(tmp_path, "max2d", module, forward, "batch, channels, size, size + 2")  # size: a knob it varies
    path.write_text(path.read_text().replace("x[torch.rand_like", "# x[torch.rand_like"))  # the judge draws its own signs
    proposal = plan(ctx_for(path))[0]
    assert proposal.origin == "template:pool"
    result = evaluator.evaluate(load_problem(path), proposal.source)
    assert result.status is Status.correct, result.error


def test_the_elementwise_work_before_a_window_runs_at_its_taps(tmp_path):
    """A prologue that only feeds the window is computed where the window reads it: one kernel.
    One that something else reads too is written once, by a kernel of its own."""
    fused = pool_file(tmp_path, "fused", *POOLS["max2d_prologue_channels"])
    (first, vendor) = plan(ctx_for(fused))
    assert first.origin == "template:pool" and "def fused_pointwise" not in first.source
    assert "its input computed at each tap (mul, sub)" in first.intent
    assert vendor.origin == "template:pointwise+vendor_pool"
    shared = pool_file(tmp_path, "shared", "nn.MaxPool2d(k, s, p, d)", "self.pool(x * 2.0).sum() + (x * 2.0).sum()",
                       "batch, channels, size, size")
    source = plan(ctx_for(shared))[0].source
    assert "tl.load(x_ptr + off, mask=ok" in source  # the pooling reads the tensor the other kernel wrote


@pytest.mark.slow  # bench/pool_conv.py as a subprocess under the interpreter
def test_the_benchmark_runs_on_the_cpu(tmp_path):
    """bench/pool_conv.py --smoke: a pooling and a grouped-convolution problem found by what they
    compute, a synthetic case, each checked and run under settings; nothing timed. The
    convolution at stride 1 and dilation 1, so that its third setting takes the rolled path; the
    synthetic case a 3D max pooling (the depthwise 3D convolution's tiny inputs, 8k elements, took
    the interpreter three quarters of the run; its kernels are the module's conv3d's and
    test_grouped_conv_rolled's)."""
    kb = tmp_path / "kb"
    (kb / "level1").mkdir(parents=True)
    (kb / "level2").mkdir()
    pool_file(kb / "level1", "1_pool", *POOLS["max2d_prologue_channels"])
    level2 = conv_file(kb / "level2", "2_conv", *CONVS["conv2d_no_bias_epilogue"])
    level2.write_text(level2.read_text().replace("\ns = 2\n", "\ns = 1\n").replace("\nd = 2\n", "\nd = 1\n"))
    pool_file(kb / "level1", "3_adaptive", "nn.AdaptiveAvgPool2d(k)", "self.pool(x)", "batch, channels, size, size")
    env = {**os.environ, "OUT": str(tmp_path / "out"), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "pool_conv.py"), str(kb), "--smoke", "--cases",
                           "level,synthetic_max_pool3d", "--time-limit", "900"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads((tmp_path / "out" / "pool_conv.json").read_text())
    assert [r["case"] for r in data["rows"]] == ["level1/1_pool", "level1/3_adaptive", "level2/2_conv", "synthetic_max_pool3d_k3"]
    pool, adaptive, conv, synthetic = data["rows"]
    assert "no template covers aten.adaptive_avg_pool2d (pooling)" in adaptive["skipped"]
    for row, origin in ((pool, "template:pool"), (conv, "template:grouped_conv"), (synthetic, "template:pool")):
        assert row["origin"] == origin and row["correct"] and len(row["configs"]) == (2 if origin == "template:pool" else 3)
        assert all(c["us"] is None and c["kernel_us"] is None for c in row["configs"])
    assert [c["roll_chunk"] for c in conv["configs"]] == [0, 0, 16]  # the convolution's rolled path too
    assert "| level1/1_pool | pool |" in proc.stdout and "smoke run: no time is claimed" in proc.stdout


@pytest.mark.slow  # kernels under the interpreter
def test_relu_and_clamp_keep_nan(tmp_path):
    """torch.relu, clamp and maximum give NaN for NaN; Triton's tl.maximum drops it by default."""
    path = tmp_path / "nan.py"
    path.write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def forward(self, x, y):
                return torch.relu(x) + torch.clamp(x, min=0.5, max=0.7) + torch.maximum(x, y)


        n = 33


        def get_inputs():
            x, y = torch.randn(n, n), torch.randn(n, n)
            x[torch.rand_like(x) < 0.1] = float("nan")
            y[torch.rand_like(y) < 0.1] = float("nan")
            return [x, y]


        def get_init_inputs():
            return []
        """))
    (proposal,) = plan(ctx_for(path))
    (result,) = run_ops([(path, proposal.source, {})])
    assert result["ok"], result["why"]
