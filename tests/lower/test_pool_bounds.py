"""The pool kind's ROW_LANES_MAX: lanes above the window row's width (next power of two) would
compile the same kernel again under another name, since the launcher caps them there; the
autotune never proposes them (okgit.search.proposers.autotune, NAME_MAX)."""

from __future__ import annotations

import pytest
from oprun import run_ops
from test_pool_fold import candidate, op_file, setting, with_settings

from okgit.search.proposers.autotune import variants


def test_the_pool_kind_bounds_lanes_by_its_window_row(tmp_path):
    narrow = candidate(op_file(tmp_path, "narrow", "nn.AvgPool2d(3, 3)", "1, 2, 9, 12"))
    assert setting(narrow, "ROW_LANES_MAX") == 4
    lanes_seen = {v for s, v in variants(with_settings(narrow, ROW_LANES=4), 1 << 30, 4096)
                  if s.name == "FUSED_POOL_0_ROW_LANES"}
    assert lanes_seen == {2, 1}  # 8 and 16 would run as 4
    wide = candidate(op_file(tmp_path, "wide", "nn.AvgPool2d(11, 11)", "1, 2, 22, 22"))
    assert setting(wide, "ROW_LANES_MAX") == 16


@pytest.mark.slow  # a kernel under the interpreter in a subprocess
def test_lanes_above_the_bound_run_at_it(tmp_path):
    path = op_file(tmp_path, "narrow", "nn.AvgPool2d(3, 2, 1)", "2, 3, 9, 13")
    source = with_settings(candidate(path), ROW_LANES=16, BLOCK_W=4, BLOCK_ROWS=2, SHARED_ROWS=0)
    (result,) = run_ops([(path, source, {})])
    assert result["ok"], result["why"]
