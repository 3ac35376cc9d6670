"""The channels-last candidate of convolutions with a fused epilogue: proposed after the NCHW
candidate, right against the reference under the Triton interpreter (and judged correct by the
real evaluator on one of them), and returning the same contiguous NCHW output as the reference."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import torch
from oprun import run_ops
from test_columns import ctx_for

from okgit.eval.types import Reference, Status
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NCHW = "template:vendor_conv+{}"
CL = "template:vendor_conv_cl+{}"
SMALL = {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 7, "width": 9}


def shrunk(tmp_path: Path, name: str, knobs: dict[str, int] = SMALL) -> Path:
    """Example `name` with its size knobs set to small, odd values the interpreter runs quickly."""
    source = (EXAMPLES / f"{name}.py").read_text()
    for k, v in knobs.items():
        source, n = re.subn(rf"^{k} = \d+$", f"{k} = {v}", source, flags=re.MULTILINE)
        assert n == 1, k
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


def conv_op(tmp_path: Path, name: str, conv: str, forward: str, extra: str = "", knobs: dict[str, int] | None = None) -> Path:
    """A conv op with 3 channels in, 5 out, a 7x9 image and a batch of 2, kernel 3 (or `knobs`)."""
    path = tmp_path / f"{name}.py"
    knobs = (chr(10) + " " * 8).join(f"{k} = {v}" for k, v in {**SMALL, "kernel_size": 3, **(knobs or {})}.items())
    path.write_text(textwrap.dedent(f"""\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, in_channels, out_channels, kernel_size):
                super().__init__()
                self.conv = {conv}
                {extra or "pass"}

            def forward(self, x):
                {forward.replace(chr(10), chr(10) + " " * 16)}


        {knobs}


        def get_inputs():
            return [torch.randn(batch_size, in_channels, height, width)]


        def get_init_inputs():
            return [in_channels, out_channels, kernel_size]
        """))
    return path


def scale_tanh(tmp_path: Path) -> Path:
    return conv_op(
        tmp_path, "scale_tanh", "nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)",
        "return torch.tanh(self.conv(x) * self.scale)",
        "self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)",
    )


SPATIAL = [
    # a normalisation over H and W: mean, then variance, then the elementwise output
    ("y = self.conv(x)\nm = y.mean(dim=(2, 3), keepdim=True)\n"
     "return (y - m) * torch.rsqrt(((y - m) ** 2).mean(dim=(2, 3), keepdim=True) + 1e-5) * self.scale"),
    "return torch.amax(torch.relu(self.conv(x)), dim=(2, 3))",  # per-row outputs only
    # the last spatial dim alone: a row per (sample, channel, image row)
    "return torch.nn.functional.layer_norm(self.conv(x) * self.scale, (12,))",
    "return torch.amax(torch.relu(self.conv(x)), dim=3)",
]
SPATIAL_IDS = ["normalisation", "per_row_outputs", "layer_norm_over_w", "per_row_outputs_over_w"]
EXAMPLE_EPILOGUES = {"17_conv2d_relu_bias": "pointwise", "18_conv_channel_scale_tanh": "pointwise",
                     "20_conv_instance_norm": "rows"}


def spatial(tmp_path: Path, i: int) -> Path:
    # 11 channels (two channel blocks, a masked tail), a 13x12 image (several position chunks)
    return conv_op(tmp_path, f"spatial_{i}", "nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)", SPATIAL[i],
                   "self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)",
                   knobs={"out_channels": 11, "height": 13, "width": 12})


def conv3d_op(tmp_path: Path, name: str, forward: str, conv: str = "nn.Conv3d(in_channels, out_channels, 3, padding=1)",
              volume: str = "5, 6, 7") -> Path:
    """A 3D conv op: 3 channels in, 11 out (two channel blocks, a masked tail), a 5x6x7 volume
    (or `volume`), a batch of 2, kernel 3, padding 1 (or `conv`), a per-channel scale."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(f"""\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, in_channels, out_channels):
                super().__init__()
                self.conv = {conv}
                self.scale = nn.Parameter(torch.rand(out_channels, 1, 1, 1) + 0.5)

            def forward(self, x):
                {forward.replace(chr(10), chr(10) + " " * 16)}


        batch_size = 2
        in_channels = 3
        out_channels = 11


        def get_inputs():
            return [torch.randn(batch_size, in_channels, {volume})]


        def get_init_inputs():
            return [in_channels, out_channels]
        """))
    return path


CONV3D = {
    # as L2/47: an elementwise epilogue
    "conv3d_mish_tanh": ("return torch.tanh(torch.nn.functional.mish(self.conv(x))) * self.scale", "pointwise"),
    # an instance norm over D, H and W: mean, then variance, then the elementwise output
    "conv3d_norm": ("y = self.conv(x)\nm = y.mean(dim=(2, 3, 4), keepdim=True)\n"
                    "return (y - m) * torch.rsqrt(((y - m) ** 2).mean(dim=(2, 3, 4), keepdim=True) + 1e-5) * self.scale",
                    "rows"),
}


# transposed convolutions (stride 2, output padding 1: a 7x9 image becomes 14x18), 11 channels
TRANSPOSED = {
    # as L2/91: a softmax over the channels, then a per-channel bias, a scale and a sigmoid
    "transposed_softmax": ("nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1)",
                           "return torch.sigmoid((torch.softmax(self.conv(x), dim=1) + self.scale) * 2.0)", "columns"),
    "transposed_norm": ("nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1)",
                        SPATIAL[0], "rows"),
}
# as L2/3: a transposed 3D convolution (2x2x7 becomes 4x4x14), a layer norm over W, a pool; 16
# rows of W a plane (the channels-last rows kernel has a program per row and channel block: a
# 5x6x7 volume's 120 rows a plane made its candidate half the module's interpreter time)
TRANSPOSED_3D = ("nn.ConvTranspose3d(in_channels, out_channels, 3, stride=2, padding=1, output_padding=1)",
                 "return torch.nn.functional.gelu(torch.nn.functional.avg_pool3d(\n"
                 "    torch.nn.functional.layer_norm(self.conv(x) + 1.0, (14,)) * self.scale, 2))", "2, 2, 7")
# as L2/19: GELU, a group norm and a clamp after it; 3 channels a group (a masked lane of 4), rows
# of 3 * 46 * 60 = 8280 elements (a variance folded by Welford's updates from 8192)
GROUP_NORM = ("nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)",
              "return torch.clamp(self.norm(torch.nn.functional.gelu(self.conv(x))), -1.0, 1.0)",
              "self.norm = nn.GroupNorm(2, out_channels); self.norm.weight.data.uniform_(0.5, 1.5); "
              "self.norm.bias.data.uniform_(-0.5, 0.5)", {"out_channels": 6, "height": 46, "width": 60})
# the NCHW candidates of a softmax over the channels: the column layout first, then the row one;
# of a pool after the norm: okgit's pool, then the vendor's with its epilogue; of a group norm: rows
NCHW_EPILOGUES = {"columns": ["columns", "rows"], "rows+pool": ["rows+pool", "rows+vendor_pool+pointwise"], "groups": ["rows"]}
RESIDENT = re.compile(r"^(FUSED_COLUMNS_CL_1_RESIDENT_TILE: int = )\d+$", re.MULTILINE)
# The group norm's candidates run with their rows streamed in tiles of 256 instead of 8192 (the
# NCHW rows kernel's CHUNK, its TILE with it: a program a row as lowered) and 2048 lanes (the
# channels-last statistics'): the interpreter folds a tile's Welford triples one pair at a time,
# a Python call each, which made these two runs 85% of the module's interpreter time. The kernels
# and their paths are the lowered ones (Welford's updates are the lowering's choice at rows of
# 8192 or more, streamed.WELFORD_MIN: the 8280 elements stay); what changes is the number of
# chunks a row takes (33 and 44 here, the last one partial, as the lowered 2 and 6's).
GROUP_NORM_TILES = re.compile(r"^((?:FUSED_ROWS_1_CHUNK|FUSED_ROWS_1_TILE|FUSED_GROUPS_CL_1_LANES): int = )\d+$", re.MULTILINE)


def small_group_norm_tiles(source: str) -> str:
    small, n = GROUP_NORM_TILES.subn(r"\g<1>256", source)
    assert n == (1 if "FUSED_GROUPS_CL_1_LANES" in source else 2), n  # channels-last: LANES; NCHW: CHUNK, TILE
    return small


def transposed(tmp_path: Path, name: str) -> Path:
    conv, forward, _ = TRANSPOSED[name]
    return conv_op(tmp_path, name, conv, forward, "self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)",
                   knobs={"out_channels": 11, "kernel_size": 4})


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[str, dict]:
    """Every conv op below: its candidates, each run against the reference (oprun: the tolerance,
    every element written, two calls alike, inputs unchanged, and the outputs' strides), all in
    one interpreter process. The softmax's channels-last candidate runs a second time with its
    columns streamed (RESIDENT_TILE 0) instead of kept whole in registers; the group norm's
    candidates run in small tiles (small_group_norm_tiles)."""
    tmp = tmp_path_factory.mktemp("conv")
    ops = {**{name: shrunk(tmp, name) for name in EXAMPLE_EPILOGUES}, "scale_tanh": scale_tanh(tmp),
           **{f"spatial_{i}": spatial(tmp, i) for i in range(len(SPATIAL))},
           **{name: conv3d_op(tmp, name, forward) for name, (forward, _) in CONV3D.items()},
           **{name: transposed(tmp, name) for name in TRANSPOSED},
           "transposed_3d": conv3d_op(tmp, "transposed_3d", TRANSPOSED_3D[1], TRANSPOSED_3D[0], TRANSPOSED_3D[2]),
           "group_norm": conv_op(tmp, "group_norm", *GROUP_NORM)}
    proposals = {name: [p for p in plan(ctx_for(path)) if "vendor_conv" in p.origin]  # the Triton convolutions aside
                 for name, path in ops.items()}
    streamed = RESIDENT.sub(r"\g<1>0", proposals["transposed_softmax"][-1].source)
    jobs = [(ops[name], small_group_norm_tiles(p.source) if name == "group_norm" else p.source, {})
            for name in ops for p in proposals[name]] + [(ops["transposed_softmax"], streamed, {})]
    results = iter(run_ops(jobs, timeout=900))
    got = {name: {"proposals": proposals[name], "results": [next(results) for _ in proposals[name]]} for name in ops}
    got["transposed_softmax"]["streamed"] = (streamed, next(results))
    return got


def check(checked: dict[str, dict], name: str, epilogue: str = "pointwise") -> str:
    """The conv candidates are offered, NCHW first, each right against the reference; the
    channels-last one's output is contiguous NCHW like the reference's. Returns that
    candidate's source."""
    got = checked[name]
    nchw = [NCHW.format(e) for e in NCHW_EPILOGUES.get(epilogue, [epilogue])]
    assert [p.origin for p in got["proposals"]] == [*nchw, CL.format(epilogue)]
    for p, result in zip(got["proposals"], got["results"]):
        assert result["ok"], (p.origin, result["why"])
    ((want, out, contiguous),) = got["results"][-1]["strides"]  # the channels-last candidate's one output
    assert contiguous and out == want
    return got["proposals"][-1].source


@pytest.mark.slow  # two interpreter processes run all of the module's candidates
@pytest.mark.parametrize("name, epilogue", list(EXAMPLE_EPILOGUES.items()))
def test_examples_get_a_correct_channels_last_candidate(checked, name, epilogue):
    check(checked, name, epilogue)


@pytest.mark.slow  # two interpreter processes run all of the module's candidates
@pytest.mark.parametrize("i", range(len(SPATIAL)), ids=SPATIAL_IDS)
def test_spatial_reductions_of_an_odd_sized_conv_get_a_correct_channels_last_candidate(checked, i):
    source = check(checked, f"spatial_{i}", "rows")
    kernel = source.split("def fused_rows_cl_1_kernel")[1].split("\ndef ")[0]
    assert "nhwc = nhwc_base + col * n_chan" in kernel and "tl.load(in0_ptr + nhwc, mask=mask" in kernel


@pytest.mark.slow  # two interpreter processes run all of the module's candidates
def test_an_odd_sized_conv_gets_a_correct_channels_last_candidate(checked):
    source = check(checked, "scale_tanh")
    forward = source.split("def forward")[1]
    # input and weight channels-last, by a tiled Triton copy; the conv bias moves into the epilogue
    assert "conv2d(_to_channels_last(x), _to_channels_last(self.conv.weight), None, " in forward
    assert "tl.store(out_ptr + (row % n_chan) + col * n_chan" in source.split("def _to_channels_last_kernel")[1]
    assert "self.conv.bias)" in forward.split("conv2d(")[1]
    kernel = source.split("def fused_pointwise_cl_1_kernel")[1].split("\ndef ")[0]
    assert "nhwc = (row % n_chan) + col * n_chan + (row // n_chan) * (n_cols * n_chan)" in kernel
    assert re.search(r"tl\.load\(in0_ptr \+ nhwc, mask=mask", kernel)  # the conv output, NHWC
    assert re.search(r"tl\.store\(out0_ptr \+ flat, .*, mask=mask\)", kernel)  # the output, NCHW
    assert "(row % s0), mask=row_mask" in kernel  # per-channel operands: indexed per row
    for setting in ("YBLOCK", "XBLOCK", "NUM_WARPS"):
        assert re.search(rf"^FUSED_POINTWISE_CL_1_{setting}: int = \d+$", source, flags=re.MULTILINE)


@pytest.mark.slow  # two interpreter processes run all of the module's candidates
@pytest.mark.parametrize("name", list(CONV3D))
def test_3d_convolutions_get_a_correct_channels_last_candidate(checked, name):
    source = check(checked, name, CONV3D[name][1])
    forward = source.split("def forward")[1]
    assert "conv3d(_to_channels_last(x), _to_channels_last(self.conv.weight), None, " in forward
    # the launcher hands the epilogue the convolution's output in channels_last_3d, the
    # spatial dims flattened into one
    assert "memory_format=torch.channels_last_3d)" in source
    assert "torch.channels_last if x.dim() == 4 else torch.channels_last_3d" in source


@pytest.mark.slow  # two interpreter processes run all of the module's candidates
@pytest.mark.parametrize("name", list(TRANSPOSED))
def test_transposed_convolutions_get_a_correct_channels_last_candidate(checked, name):
    source = check(checked, name, TRANSPOSED[name][2])
    forward = source.split("def forward")[1]
    assert "conv_transpose2d.input(_to_channels_last(x), _to_channels_last(self.conv.weight), None, " in forward


@pytest.mark.slow  # two interpreter processes run all of the module's candidates
def test_a_layer_norm_over_w_after_a_transposed_3d_convolution_gets_a_correct_channels_last_candidate(checked):
    """As L2/3: the rows kernel folds W alone, a row per (sample, channel, depth, height) read
    NDHWC, okgit's pool after it reads its NCDHW output."""
    source = check(checked, "transposed_3d", "rows+pool")
    assert "conv_transpose3d.input(_to_channels_last(x), _to_channels_last(self.conv.weight), None, " in source
    launcher = source.split("def fused_rows_cl_1(")[1].split("\ndef ")[0]
    assert re.search(r"n_kept = \w+\.shape\[2\] \* \w+\.shape\[3\]$", launcher, flags=re.MULTILINE)
    assert re.search(r"n_red = \w+\.shape\[4\]$", launcher, flags=re.MULTILINE)


@pytest.mark.slow  # two interpreter processes run all of the module's candidates
def test_a_softmax_over_the_channels_reads_them_contiguous_in_both_paths(checked):
    """As L2/91: the column layout over a channels-last output reads a column's channels at
    consecutive addresses (nhwc = position * C + channel), the conv bias folded in by channel,
    the model's bias indexed by its channel too; right whether its columns stay in registers
    or stream."""
    source = check(checked, "transposed_softmax", "columns")
    kernel = source.split("def fused_columns_cl_1_kernel")[1].split("\ndef ")[0]
    assert "nhwc_base = outer * (n_inner * n_red) + j * n_red" in kernel
    assert kernel.count("nhwc = nhwc_base + col") == 3  # the one pass, the streamed max/sum pass and output pass
    assert re.search(r"tl\.load\(in0_ptr \+ nhwc, mask=mask, other=0\)\.to\(tl\.float32\) \+ tl\.load\(in\d_ptr \+ col, mask=mask", kernel)
    assert re.search(r"tl\.store\(out0_ptr \+ flat, ", kernel)  # NCHW
    assert RESIDENT.search(source) and "FUSED_COLUMNS_CL_1_RESIDENT_TILE: int = 4096" in source
    streamed, result = checked["transposed_softmax"]["streamed"]
    assert "FUSED_COLUMNS_CL_1_RESIDENT_TILE: int = 0" in streamed
    assert result["ok"], result["why"]


@pytest.mark.slow  # two interpreter processes run all of the module's candidates
def test_a_group_norm_reads_the_channels_last_output_a_group_at_a_time(checked):
    """As L2/19: the activation before the norm and the clamp after it run in the norm's kernels
    (okgit.lower.reshaping): the statistics one program per (sample, group) reading the
    channels-last output a lane per position and channel of the group, the normalisation in 2D
    tiles reading it again with the statistics stored per (sample, group)."""
    source = check(checked, "group_norm", "groups")
    stats = source.split("def fused_groups_cl_1_stats_kernel")[1].split("\ndef ")[0]
    assert "nhwc = nhwc_base + pos * n_chan" in stats and "tl.load(in0_ptr + nhwc, mask=mask" in stats
    assert "axis=0, keep_dims=True, combine_fn=_welford_combine" in stats and "tl.erf(" in stats
    assert "tl.store(stats_ptr + row * 2 + 1 + tl.arange(0, 1), " in stats and "out0_ptr +" not in stats.split("):")[1]
    norm = source.split("def fused_groups_cl_1_kernel")[1].split("\ndef ")[0]
    assert "tl.load(stats_ptr + stat_row * 2 + 1, mask=row_mask" in norm and "tl.load(in0_ptr + nhwc, mask=mask" in norm
    assert "tl.erf(" in norm and "tl.minimum(" in norm
    assert re.search(r"tl\.store\(out0_ptr \+ flat, ", norm)  # NCHW


@pytest.mark.slow  # the real evaluator's gates, on one channels-last candidate
def test_a_conv_without_bias_keeps_its_call(evaluator, tmp_path):
    path = conv_op(tmp_path, "no_bias", "nn.Conv2d(in_channels, out_channels, kernel_size, stride=2, bias=False)",
                   "return torch.relu(self.conv(x)) * 2.0 + x.mean()")
    proposals = [p for p in plan(ctx_for(path)) if "vendor_conv" in p.origin]
    assert [p.origin for p in proposals] == [NCHW.format("pointwise+scalar"), CL.format("pointwise+scalar")]
    cl = proposals[1]
    assert "[2, 2]" in cl.source.split("def forward")[1]  # the stride stays
    result = evaluator.evaluate(load_problem(path), cl.source)
    assert result.status is Status.correct, (result.status.value, result.error)


@pytest.mark.parametrize("forward", [
    "y = self.conv(x)\nreturn torch.relu(y) - y.mean()",  # a whole-tensor reduction reads it too
    "y = self.conv(x)\nreturn y, torch.relu(y)",  # it is returned as well
    "return torch.softmax(self.conv(x), dim=0)",  # its reader reduces over the batch
])
def test_no_channels_last_candidate_where_the_epilogue_reads_otherwise(tmp_path, forward):
    path = conv_op(tmp_path, "other", "nn.Conv2d(in_channels, out_channels, kernel_size)", forward)
    origins = [p.origin for p in plan(ctx_for(path))]
    assert origins and not any("vendor_conv_cl" in o for o in origins)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_3d_channels_last_candidate_is_correct_and_timed(tmp_path, gpu_evaluator):
    """A 3D convolution with mish and tanh (as L2/47) at tens of MB: cuDNN on channels_last_3d
    operands and okgit's epilogue, judged on the GPU (PyTorch's flags: cuDNN may take TF32, as
    the reference's own error shows)."""
    path = conv3d_op(tmp_path, "conv3d_mish_tanh", CONV3D["conv3d_mish_tanh"][0])
    path.write_text(path.read_text().replace("torch.randn(batch_size, in_channels, 5, 6, 7)",
                                             "torch.randn(batch_size, in_channels, 16, 32, 32)")
                    .replace("batch_size = 2", "batch_size = 8").replace("in_channels = 3", "in_channels = 32")
                    .replace("out_channels = 11", "out_channels = 64"))
    judged_on_the_gpu(gpu_evaluator, path, "pointwise")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_group_norm_over_a_channels_last_convolution_is_correct_and_timed(tmp_path, gpu_evaluator):
    """As L2/19 at tens of MB: a transposed convolution, GELU and a group norm of 8 channels a
    group, cuDNN on channels-last operands and okgit's groups epilogue, judged on the GPU."""
    path = conv_op(tmp_path, "group_norm_gpu", "nn.ConvTranspose2d(in_channels, out_channels, kernel_size)",
                   "return self.norm(torch.nn.functional.gelu(self.conv(x)))",
                   "self.norm = nn.GroupNorm(8, out_channels); self.norm.weight.data.uniform_(0.5, 1.5)",
                   knobs={"batch_size": 8, "in_channels": 32, "out_channels": 64, "height": 62, "width": 62})
    judged_on_the_gpu(gpu_evaluator, path, "groups")


def judged_on_the_gpu(gpu_evaluator, path, epilogue: str) -> None:
    """The op's channels-last candidate with this epilogue, correct and timed by the real evaluator."""
    problem = load_problem(path)
    ctx = Context(problem=problem, reference=Reference(device="cuda", timed=True), backend="triton", device="cuda")
    source = next(p.source for p in plan(ctx) if p.origin == CL.format(epilogue))
    result = gpu_evaluator.evaluate(problem, source)
    assert result.status is Status.correct, result.error
    assert result.timed and result.runtime_us and result.speedup, result
