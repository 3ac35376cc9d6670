"""The pooling kernel (okgit/lower/kinds/pool.py.tmpl) at wide and overlapping windows: its launch
settings from the window's arithmetic (pool_tunables), those settings within the autotune's
reach, and its numerics against PyTorch under the Triton interpreter with a window row across
lanes in whole and partial steps, one lane per output, tiles inside the input and at its edges,
and input rows read once for the output rows that share them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from oprun import run_ops

from okgit.eval.types import Reference
from okgit.lower.kinds.pool import pool_tunables
from okgit.problem import load_problem
from okgit.search.proposers.autotune import variants
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

# name -> (module, input shape): wide windows (stride >= 4: a window row across lanes by default),
# stride unlike the window, padding counted and not, dilation, tails of rows and columns; 1D and 3D.
# Two planes each, the first with NaN and -inf, and the fewest rows and columns that still give
# every layout below the same cases as larger inputs: several programs, tiles inside the input and
# at each of its edges, tails of rows and columns, tiles across planes and depths, shared rows past
# the last row (the interpreter's time grows with the programs a layout runs).
OPS = {
    "avg2d_wide": ("nn.AvgPool2d(11, 11)", "1, 2, 24, 47"),
    "avg2d_padded_uncounted": ("nn.AvgPool2d(5, 4, 2, count_include_pad=False)", "1, 2, 6, 14"),
    "avg2d_padded_ceil": ("nn.AvgPool2d(5, 4, 2, ceil_mode=True)", "1, 2, 6, 14"),
    "max2d_wide_nan": ("nn.MaxPool2d(6, 5, 1)", "1, 2, 13, 23"),
    "max2d_dilated_strided": ("nn.MaxPool2d(3, 4, 1, dilation=2)", "1, 2, 12, 33"),
    "max1d_wide": ("nn.MaxPool1d(9, 7, 3)", "1, 2, 60"),
    # one tile of columns in small tiles (4 outputs a row, the window past both edges): columns'
    # programs and tails are the same lines in 2D (37 columns, two tiles, ran twice its programs)
    "avg3d_wide": ("nn.AvgPool3d((2, 3, 7), (2, 2, 5), (1, 1, 3))", "1, 2, 5, 6, 17"),
    # overlapping down the height: rows shared by default
    "max2d_overlapping": ("nn.MaxPool2d(4, 1, 1)", "1, 2, 6, 13"),
    "max2d_overlapping_dilated": ("nn.MaxPool2d(3, 1, 1, dilation=2)", "1, 2, 7, 13"),
    "avg3d_overlapping_ceil": ("nn.AvgPool3d(3, (2, 1, 2), 1, ceil_mode=True, count_include_pad=False)", "1, 2, 5, 3, 5"),
}


def op_file(tmp_path: Path, name: str, module: str, shape: str) -> Path:
    """A pooling op; its first plane holds NaN and -inf here and there (a NaN must win a max),
    the second none (an average's numerics are checked on finite windows)."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(f'''\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.pool = {module}

            def forward(self, x):
                return self.pool(x)


        def get_inputs():
            x = torch.randn({shape})
            first = x[0, 0]
            first[torch.rand_like(first) < 0.04] = float("nan")
            first[torch.rand_like(first) < 0.03] = float("-inf")
            return [x]


        def get_init_inputs():
            return []
        '''))
    return path


def reference_output(path: Path) -> torch.Tensor:
    """The op's float64 output on the input tests/oprun.py gives it (its seed)."""
    scope: dict = {}
    exec(path.read_text(), scope)
    torch.manual_seed(2)
    (x,) = scope["get_inputs"]()
    return scope["Model"]().double()(x.double())


def candidate(path: Path) -> str:
    (first, *_) = plan(Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False),
                               backend="triton", device="cpu"))
    assert first.origin == "template:pool", first.origin
    return first.source


def setting(source: str, name: str) -> int:
    (value,) = re.findall(rf"^FUSED_POOL_0_{name}: int = (\d+)$", source, flags=re.MULTILINE)
    return int(value)


def with_settings(source: str, **settings: int) -> str:
    for name, value in settings.items():
        source, n = re.subn(rf"^(FUSED_POOL_0_{name}): int = \d+$", rf"\1: int = {value}", source, flags=re.MULTILINE)
        assert n == 1, name
    return source


LAYOUTS = [{"ROW_LANES": 16}, {"ROW_LANES": 4}, {"ROW_LANES": 1}, {"ROW_LANES": 1, "SHARED_ROWS": 4},
           {"ROW_LANES": 4, "SHARED_ROWS": 2}]
# (op, layout) left out: avg3d_wide's rows shared at one lane, its costliest run by far (each of
# its programs walks 2 depths x 9 input rows x 7 taps, a tap at a time: 40% of the op's time).
# Its window and strides on the shared rows path are its 4-lane shared layout's (tiles past the
# last row included); a lane walking a window row tap by tap on that path, in 3D too, is
# avg3d_overlapping_ceil's (as lowered, and in small tiles) and the 2D ops'.
LEFT_OUT = {("avg3d_wide", str({"ROW_LANES": 1, "SHARED_ROWS": 4}))}


def layouts(source: str, shares: bool = True) -> dict[str, str]:
    """The candidate as lowered, then in small tiles (several programs, tiles inside the input
    and at its edges) with the window row across 16 lanes (one step, the row's padding masked),
    4 lanes (steps, the last one partial where the row is not a multiple of 4) and 1 lane, each
    row's windows on their own, then rows sharing their input rows (tiles past the last row);
    by label. A layout the launcher runs as another runs once: it caps the lanes at the window
    row's width (ROW_LANES_MAX, its next power of two; where that is 4, rows of 3 or 4 taps, 16
    lanes are 4), and shares rows only where the output has rows to share (`shares`: not 1D)."""
    small = with_settings(source, BLOCK_W=4, BLOCK_ROWS=2, SHARED_ROWS=0)
    cap = setting(source, "ROW_LANES_MAX")
    out, ran = {"as lowered": source}, set()
    for layout in LAYOUTS:
        runs = (min(layout["ROW_LANES"], cap), layout.get("SHARED_ROWS", 0) if shares else 0)
        if runs not in ran:
            ran.add(runs)
            out[str(layout)] = with_settings(small, **layout)
    return out


@pytest.mark.slow  # kernels under the interpreter, one process for every op and layout
@pytest.mark.timeout(1800)
def test_every_layout_matches_torch(tmp_path):
    paths = [op_file(tmp_path, name, *spec) for name, spec in OPS.items()]
    shares = {}
    for path in paths:  # small inputs: a NaN that reaches an output, and finite windows, still there
        out = reference_output(path)
        assert out[0, 0].isnan().any() and out[0, 1].isfinite().all(), path.stem
        shares[path] = out.dim() > 3 and out.shape[-2] > 1  # output rows to share (the launcher's rule)
    cases = [(path.stem, label, (path, variant, {})) for path in paths
             for label, variant in layouts(candidate(path), shares[path]).items() if (path.stem, label) not in LEFT_OUT]
    results = run_ops([job for _, _, job in cases], timeout=1800)
    bad = [(stem, label, r["why"][-800:]) for (stem, label, _), r in zip(cases, results, strict=True) if not r["ok"]]
    assert not bad


def test_wide_strides_read_a_window_row_across_lanes(tmp_path):
    """The defaults a candidate is lowered with: a window row across the fewest lanes that keep
    a warp's load within 4 cache lines (dilation 1), one lane per output up to stride 4; a step's
    tile held to 256 taps; 8 output rows sharing their input rows where their windows read each
    at least twice between them."""
    wide = candidate(op_file(tmp_path, "wide", *OPS["avg2d_wide"]))
    assert [setting(wide, n) for n in ("ROW_LANES", "BLOCK_ROWS", "BLOCK_W", "SHARED_ROWS")] == [4, 1, 64, 0]
    overlapping = candidate(op_file(tmp_path, "overlapping", *OPS["max2d_overlapping"]))
    assert [setting(overlapping, n) for n in ("ROW_LANES", "BLOCK_W", "SHARED_ROWS")] == [1, 128, 8]
    dilated = candidate(op_file(tmp_path, "dilated", *OPS["max2d_dilated_strided"]))
    assert setting(dilated, "ROW_LANES") == 1 and setting(dilated, "SHARED_ROWS") == 0
    for kw, sw, lanes in ((2, 2, 1), (3, 2, 1), (4, 4, 1), (5, 4, 1), (7, 5, 2), (11, 11, 4), (3, 16, 4), (40, 40, 16)):
        s = pool_tunables("P", (kw, kw), (sw, sw), (1, 1))
        assert s["P_ROW_LANES"] == lanes and s["P_BLOCK_ROWS"] * s["P_BLOCK_W"] * lanes <= 256 and not s["P_SHARED_ROWS"]
    assert pool_tunables("P", (11, 11), (11, 11), (1, 2))["P_ROW_LANES"] == 1
    for kh, sh, dh, shared in ((4, 1, 1, 8), (3, 1, 1, 8), (2, 1, 1, 0), (3, 2, 1, 0), (3, 1, 2, 8), (3, 1, 3, 0)):
        assert pool_tunables("P", (kh, 3), (sh, 1), (dh, 1))["P_SHARED_ROWS"] == shared


def test_the_autotune_reaches_every_pool_setting(tmp_path):
    """Lanes and rows are settings the autotune varies, down to one."""
    source = candidate(op_file(tmp_path, "wide", *OPS["avg2d_wide"]))
    found: dict[str, set] = {}
    for site, value in variants(source, 1 << 30, 4096):
        found.setdefault(site.name, set()).add(value)
    assert {1, 2, 8, 16} <= found["FUSED_POOL_0_ROW_LANES"] and {2, 4} <= found["FUSED_POOL_0_BLOCK_ROWS"]
    assert {32, 128} <= found["FUSED_POOL_0_BLOCK_W"] and "FUSED_POOL_0_NUM_WARPS" in found
    assert found["FUSED_POOL_0_SHARED_ROWS"] == {8}  # the other path
    overlapping = candidate(op_file(tmp_path, "overlapping", *OPS["max2d_overlapping"]))
    assert {v for s, v in variants(overlapping, 1 << 30, 4096) if s.name == "FUSED_POOL_0_SHARED_ROWS"} == {0, 16}


@pytest.mark.slow  # bench/pool_speed.py as a subprocess under the interpreter
def test_the_speed_benchmark_runs_on_the_cpu(tmp_path):
    """bench/pool_speed.py --smoke on a problem numbered as asked: the lowered settings and others
    run and checked against float64, the lanes a setting ran with recorded, nothing timed."""
    (tmp_path / "kb" / "level1").mkdir(parents=True)
    op_file(tmp_path / "kb" / "level1", "45_wide", *OPS["avg2d_wide"])
    env = {**os.environ, "OUT": str(tmp_path / "out"), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "bench/pool_speed.py", str(tmp_path / "kb"), "--problems", "level1/45", "--smoke"],
                          cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads((tmp_path / "out" / "pool_speed.json").read_text())["rows"]
    assert row["origin"] == "template:pool" and row["correct"] and row["eager_us"] is None
    default, *others = row["settings"]
    assert default["label"] == "default" and (default["block_rows"], default["block_w"], default["row_lanes"]) == (1, 64, 4)
    assert [(s["row_lanes"], s["us"]) for s in others] == [(1, None), (16, None)]
    assert "| level1/45 | 1x64 / 4 / 4 (default) |" in proc.stdout
