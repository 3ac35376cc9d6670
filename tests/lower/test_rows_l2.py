"""The rows kind's persistent grid for long rows read in several passes (okgit/lower/kinds/rows.py,
rows_grid.py.tmpl): the grid rule as a pure function, the kernels' numerics under the Triton
interpreter on a grid smaller than their row blocks, which settings a rows kernel exposes, and the
autotune reaching them."""

from __future__ import annotations

import re

import pytest
from oprun import run_ops
from test_templates import ctx_for, op, tiny

from okgit.lower.kinds.rows import L2_SHARE, Rows
from okgit.lower.template import fill
from okgit.search.proposers.autotune import variants
from okgit.search.proposers.sites import find_sites
from okgit.search.proposers.templates import plan

MIB = 2**20


def grid_rule():
    """The launcher's `_rows_grid`, as the generated file defines it."""
    space: dict = {}
    exec(fill(Rows.helpers["_rows_grid"]), space)
    return space["_rows_grid"]


@pytest.mark.parametrize("n_blocks, block_bytes, l2, sms, resident, share, want", [
    # a 65535-wide fp32 row on an H200-like device: 150 blocks fit 75% of 50 MiB, one per SM
    (32768, 65535 * 4, 50 * MIB, 132, 4, 75, 132),
    (32768, 65535 * 4, 50 * MIB, 132, 4, 0, 32768),  # share 0: the plain grid
    (32768, 2**16, 50 * MIB, 132, 4, 75, 32768),  # 600 fit, but only 528 can be resident anyway: plain
    (32768, 2**17, 50 * MIB, 132, 4, 75, 264),  # 300 fit: two per SM, a multiple of the SMs
    (32768, 1536 * 1024, 50 * MIB, 132, 4, 75, 32768),  # 1.5 MB rows: not one per SM fits, plain
    (100, 65535 * 4, 50 * MIB, 132, 4, 75, 100),  # fewer blocks than fit: plain
    (32768, 65535 * 4, 0, 0, 4, 75, 32768),  # no cache or SMs known: plain
])
def test_the_grid_rule(n_blocks, block_bytes, l2, sms, resident, share, want):
    assert grid_rule()(n_blocks, block_bytes, l2, sms, resident, share) == want


# ops whose rows are read in several passes (a statistic after another, or written elementwise)
OPS = {
    "l2_norm": "x / torch.norm(x, p=2, dim=1, keepdim=True)",
    "softmax": "torch.softmax(x * 1.5, dim=1)",
    "log_softmax": "torch.log_softmax(x, dim=1)",
    "layer_norm": "F.layer_norm(x, (x.shape[1],)) * 2.0",
    "rms_norm": "x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + 1e-5)",
}


def long_row_op(tmp_path, name: str, expr: str) -> str:
    # rendered at a long row (the capture runs on the meta device), run at small knobs
    return op(tmp_path, name, f"""
class Model(nn.Module):
    def forward(self, x):
        return {expr}

rows = 5
dim = 40000

def get_inputs():
    return [torch.randn(rows, dim) * 3]

def get_init_inputs():
    return []
""")


def rows_candidate(path: str) -> str:
    (cand,) = [p.source for p in plan(ctx_for(path)) if p.origin == "template:rows"]
    return cand


@pytest.mark.slow  # reason: one interpreter subprocess, ten kernels
def test_persistent_kernels_match_pytorch_on_a_grid_smaller_than_the_rows(tmp_path):
    jobs = []
    for name, expr in OPS.items():
        path = long_row_op(tmp_path, name, expr)
        cand = rows_candidate(path)
        assert "_rows_programs(n_blocks" in cand  # the launcher asks the rule for its grid
        # chunks of 16 over rows of 37 (a tail), blocks of 2 rows (TILE 32) or 1 (TILE 16) over 7 rows
        # (a tail block), each program walking several: the grid one or two short of the blocks
        for tile, short in ((32, 1), (16, 2)):
            small = re.sub(r"(_TILE: int = )\d+", rf"\g<1>{tile}", tiny(cand))
            small += f"\n\n_rows_programs = lambda n_blocks, *rest: n_blocks - {short}  # a persistent grid off a GPU\n"
            jobs.append((path, small, {"rows": 7, "dim": 37}))
    for (path, _, _), result in zip(jobs, run_ops(jobs), strict=True):
        assert result["ok"], (path, result["why"])


def constants(source: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^FUSED_ROWS_\d+_(\w+): int = (\d+)$", source, flags=re.MULTILINE)}


def test_only_a_row_read_in_several_passes_gets_an_l2_share(tmp_path):
    twice = constants(rows_candidate(long_row_op(tmp_path, "norm", OPS["l2_norm"])))
    assert twice["L2_SHARE"] == 0 and twice["STAGES"] == 1 and twice["CHUNK"] == 8192  # the plain grid, as measured
    once = constants(rows_candidate(long_row_op(tmp_path, "sum", "x.sum(dim=1)")))
    assert "L2_SHARE" not in once and once["STAGES"] == 1 and once["CHUNK"] == 2048  # one read: no grid to size
    short = op(tmp_path, "short", """
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)

def get_inputs():
    return [torch.randn(8, 1024)]

def get_init_inputs():
    return []
""")
    held = rows_candidate(short)
    assert "L2_SHARE" not in constants(held) and "STAGES" not in constants(held)  # in registers: nothing to stream
    assert "_rows_grid" not in held and "tl.range(0, n_red" not in held


def test_autotune_reaches_the_l2_share_and_the_stages(tmp_path):
    source = rows_candidate(long_row_op(tmp_path, "norm", OPS["l2_norm"]))
    sites = {s.name: s for s in find_sites(source)}
    share, stages = sites["FUSED_ROWS_0_L2_SHARE"], sites["FUSED_ROWS_0_STAGES"]
    assert (share.control, share.value, stages.control) == ("path", 0, "stages")
    proposed = variants(source, cap_numel=5 * 40000, cap_dim=40000)
    assert [v for s, v in proposed if s.name == share.name] == [L2_SHARE]  # the persistent grid switched on
    assert 2 in [v for s, v in proposed if s.name == stages.name]
    on = source.replace("FUSED_ROWS_0_L2_SHARE: int = 0", f"FUSED_ROWS_0_L2_SHARE: int = {L2_SHARE}")
    assert [v for s, v in variants(on, 5 * 40000, 40000) if s.name == share.name] == [0, 2 * L2_SHARE]  # off, wider
