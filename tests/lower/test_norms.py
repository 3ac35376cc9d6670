"""Normalisations over several dims, distance losses, triangles, reductions over size-1 dims and
scalar tensor constants: captured as primitives (group norm's channel groups a reshape made in
the forward, its group count read from the module), lowered by the template kinds, and checked
under the Triton interpreter."""

from __future__ import annotations

import re

import pytest
from oprun import run_ops
from test_templates import op, tiny

from okgit.lower.capture import capture
from okgit.lower.fusion import Group, partition
from okgit.lower.graph import Bound, BoundInt, Unsupported
from okgit.lower.opfile import lowered_file
from okgit.problem import load_problem
from okgit.search.proposers.templates import candidates, reshaped

OPS = {
    "group_norm": ("""
class Model(nn.Module):
    def __init__(self, channels, num_groups):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)
        self.norm.weight.data.uniform_(0.5, 1.5)
        self.norm.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.clamp(self.norm(torch.relu(x) * 2.0), max=1.0).mean(dim=[1, 2, 3])

batch = 3
num_groups = 8
channels = 16
size = 5

def get_inputs():
    return [torch.randn(batch, channels, size, size + 2)]

def get_init_inputs():
    return [channels, num_groups]
""", {"num_groups": 4, "channels": 12, "size": 7}),
    "group_norm_2d": ("""
class Model(nn.Module):
    def __init__(self, features, num_groups):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, features, affine=False)

    def forward(self, x):
        return torch.min(self.norm(x), dim=1, keepdim=True)[0] + 1.0

batch = 9
features = 64
num_groups = 16

def get_inputs():
    return [torch.randn(batch, features)]

def get_init_inputs():
    return [features, num_groups]
""", {"features": 30, "num_groups": 5, "batch": 4}),
    "instance_norm": ("""
class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.norm = nn.InstanceNorm3d(channels, affine=True)
        self.norm.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        return torch.clamp(self.norm(x * 3.0), -1.0, 1.0)

batch = 2
channels = 5
size = 4

def get_inputs():
    return [torch.randn(batch, channels, size, size, size + 1)]

def get_init_inputs():
    return [channels]
""", {"size": 9}),
    "batch_norm": ("""
class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels, momentum=0.2)
        self.bn.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        return torch.tanh(self.bn(x + 1.0))

batch = 4
channels = 6
size = 5

def get_inputs():
    return [torch.randn(batch, channels, size, size + 3)]

def get_init_inputs():
    return [channels]
""", {"channels": 3, "size": 11}),
    "triplet": ("""
class Model(nn.Module):
    def __init__(self, margin=1.0):
        super().__init__()
        self.loss_fn = torch.nn.TripletMarginLoss(margin=margin)

    def forward(self, anchor, positive, negative):
        return self.loss_fn(anchor, positive, negative)

batch = 16
dim = 40

def get_inputs():
    return [torch.rand(batch, dim) * 0.5, torch.rand(batch, dim), torch.rand(batch, dim)]

def get_init_inputs():
    return [1.0]
""", {"batch": 33, "dim": 300}),
    "size_one_folds": ("""
class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x):
        original = x.clone().detach()
        x = x - self.shift
        x = torch.mean(x, dim=1, keepdim=True)
        x = torch.logsumexp(x, dim=1, keepdim=True)
        return torch.nn.functional.gelu(x) + original

batch = 8
features = 32

def get_inputs():
    return [torch.randn(batch, features)]

def get_init_inputs():
    return [features]
""", {"features": 300}),
    "tensor_constant": ("""
class Model(nn.Module):
    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def forward(self, x):
        return torch.min(x, torch.tensor(self.cap)) * 2.0

size = 64

def get_inputs():
    return [torch.randn(size, size)]

def get_init_inputs():
    return [0.3]
""", {"size": 17}),
    "device_constant": ("""
class Model(nn.Module):
    def forward(self, x):
        return torch.clamp(torch.min(x, torch.tensor(low, device=x.device)), min=-0.5)

low = 0.25
size = 32

def get_inputs():
    return [torch.randn(size, size)]

def get_init_inputs():
    return []
""", {"size": 9}),
    "diagonal": ("""
class Model(nn.Module):
    def forward(self, a, b, c):
        return torch.diag(a) @ b + torch.matmul(b, torch.diag(c))

size = 24

def get_inputs():
    return [torch.randn(size), torch.randn(size, size), torch.randn(size)]

def get_init_inputs():
    return []
""", {"size": 19}),
    "triangles": ("""
class Model(nn.Module):
    def forward(self, a, b):
        return torch.tril(a @ b) + torch.triu(a, diagonal=1)

size = 24

def get_inputs():
    return [torch.randn(size, size), torch.randn(size, size)]

def get_init_inputs():
    return []
""", {"size": 19}),
}


def captured(tmp_path, name):
    path = op(tmp_path, name, OPS[name][0])
    return path, load_problem(path), capture(load_problem(path))


def test_group_norm_reads_its_group_count_from_the_module_and_runs_in_one_rows_kernel(tmp_path):
    _, problem, graph = captured(tmp_path, "group_norm")
    bound = [a for n in graph.nodes for a in n.kwargs.get("sizes", ()) if isinstance(a, BoundInt)]
    assert bound and {b.expr for b in bound} == {"self.norm.num_groups"}
    items = partition(graph)
    assert not [it for it in items if not isinstance(it, Group)]  # no PyTorch call left
    source, _ = lowered_file(problem.source, graph, items)
    assert "int(self.norm.num_groups), -1" in source
    assert "aten.group_norm" not in source


def test_the_group_norms_weight_is_read_from_the_rows_group_and_the_columns_channel(tmp_path):
    """The affine weight and bias vary by channel: the group among the rows (a row is a sample's
    group), the channel within it among the folded elements. Their offset is summed from the two
    positions (`row` and `col`, vectors of the tile), not divided out of the flat offset per
    element (their values: the module's correctness tests)."""
    _, problem, graph = captured(tmp_path, "group_norm")
    source, _ = lowered_file(problem.source, graph, partition(graph))
    loads = re.findall(r"tl\.load\(in\d+_ptr \+ ([^,]+), mask=mask", source)
    across = [o for o in loads if re.fullmatch(r"\(row % s\d+\) \* s\d+ \+ \(col // s\d+\)", o)]
    assert len(across) >= 2 and not [o for o in loads if "flat //" in o or "flat %" in o], loads


def test_a_knob_set_int_no_attribute_holds_is_still_refused(tmp_path):
    path = op(tmp_path, "knob_groups", """
class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.group_norm(x, groups)

groups = 8
channels = 16

def get_inputs():
    return [torch.randn(2, channels, 4)]

def get_init_inputs():
    return []
""")
    with pytest.raises(Exception, match="depend on the shape knobs"):
        capture(load_problem(path))


def test_folds_over_size_one_dims_and_tensor_constants_are_captured(tmp_path):
    _, _, graph = captured(tmp_path, "size_one_folds")
    assert [n.dims for n in graph.nodes if n.kind == "reduce"] == [(1,)]  # the mean alone
    _, _, graph = captured(tmp_path, "tensor_constant")
    (cap,) = [a for n in graph.nodes for a in n.args if isinstance(a, Bound)]
    assert cap.expr == "self.cap" and float(cap) == 0.3
    _, _, graph = captured(tmp_path, "device_constant")  # made on the input's device: meta in a capture
    assert [n.args[1] for n in graph.nodes if n.op == "minimum"] == [0.25]


def test_triplet_margin_loss_binds_its_margin_and_triangles_and_diagonals_use_coordinates(tmp_path):
    _, _, graph = captured(tmp_path, "triplet")
    assert {a.expr for n in graph.nodes for a in n.args if isinstance(a, Bound)} == {"self.loss_fn.margin", "self.loss_fn.eps"}
    assert not [n for n in graph.nodes if n.kind == "extern"]
    _, _, graph = captured(tmp_path, "triangles")
    assert [n.op for n in graph.nodes if n.kind == "extern"] == ["aten.matmul.default"]
    assert len([n for n in graph.nodes if n.kind == "iota"]) == 4
    _, _, graph = captured(tmp_path, "diagonal")  # row and column scalings: no matrix made, no matmul
    assert not [n for n in graph.nodes if n.kind in ("extern", "iota")]


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_norms_losses_and_triangles_match_pytorch_under_the_interpreter(tmp_path):
    """Every candidate of each op, with tiny launch settings (streamed rows, split programs) and
    as proposed, at the op's sizes and at other knobs (another group count among them)."""
    jobs = []
    for name, (_, knobs) in OPS.items():
        path, problem, graph = captured(tmp_path, name)
        for turned_on in candidates(graph, "cpu"):
            shaped = reshaped(graph, turned_on)
            try:
                source, _ = lowered_file(problem.source, shaped, partition(shaped, seeding=turned_on), turned_on)
            except Unsupported:
                continue  # nothing for a Triton kernel (the vendor batch norm alone)
            # a candidate whose kinds lower the op to the file another one gave runs once (for most
            # of these ops every candidate but the first: half the jobs)
            jobs += [job for job in ((path, tiny(source), {}), (path, source, knobs)) if job not in jobs]
    results = run_ops(jobs, timeout=900)
    bad = [(job[0], job[2], r["why"][-600:]) for job, r in zip(jobs, results) if not r["ok"]]
    assert not bad, bad


def test_batch_norm_is_the_batchnorm_kinds_call_with_its_counter_and_the_vendors_without_it(tmp_path):
    _, problem, graph = captured(tmp_path, "batch_norm")
    calls = [n.op for n in partition(graph) if not isinstance(n, Group)]
    assert calls == ["aten.add_.Tensor", "aten.batch_norm.default"]  # the counter's step; the vendor call
    (kind,) = [k for k in candidates(graph, "cpu")[0] if k.name == "batchnorm"]
    shaped = kind.rewrite(graph)
    items = partition(shaped, seeding=(kind,))
    assert not [n for n in items if not isinstance(n, Group)]
    source, _ = lowered_file(problem.source, shaped, items, (kind,))
    assert "self.bn.num_batches_tracked, self.training, float(self.bn.momentum)" in source


# The evaluator's batch norm runs its statistics in tiles of 32 positions split over 2 programs a
# channel instead of the proposed 2048 and 8192: the interpreter folds a tile's Welford triples
# (tl.reduce with the kind's combine) one pair at a time, a Python call each, so the 256 lanes of
# a channel's one tile (4 samples x 64 positions, 160 of them in the op) were most of the
# evaluator's time (it calls the candidate many times). Same three kernels, none of their paths
# lost: a sample's 40 positions are now a whole tile of 32 (the per-lane updates, which the
# proposed tile, partial, never ran) and a partial one of 8 (folded on its own and combined, as
# the proposed tile is); the lanes are still combined by tl.reduce, and a channel's two partials
# (one program its whole tiles, the other its partial ones) by the finalize kernel's tl.reduce.
STATS_TILES = re.compile(r"^(FUSED_BATCHNORM_\d+_(STATS_TILE|STATS_PROGRAMS): int = )\d+$", re.MULTILINE)


def small_statistics_tiles(source: str) -> str:
    channels = 6  # OPS["batch_norm"]: split = STATS_PROGRAMS / channels = 2
    small, n = STATS_TILES.subn(lambda m: m.group(1) + str(32 if m.group(2) == "STATS_TILE" else 2 * channels), source)
    assert n == 2, n
    return small


@pytest.mark.slow  # the real evaluator
def test_the_evaluator_finds_batch_norm_right_in_both_modes_with_its_buffers(tmp_path, evaluator):
    """The evaluator's modes case: training mode, the running statistics left as the reference
    leaves them, then eval mode."""
    path, problem, graph = captured(tmp_path, "batch_norm")
    turned_on = candidates(graph, "cpu")[0]
    shaped = reshaped(graph, turned_on)
    source, _ = lowered_file(problem.source, shaped, partition(shaped, seeding=turned_on), turned_on)
    result = evaluator.evaluate(problem, small_statistics_tiles(source), mode="fast", backend="triton")
    assert result.correct, result.error
