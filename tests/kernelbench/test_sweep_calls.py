"""The sweep's record of its calls (`OUT/calls.json`), written by the sweep itself and completed by
bench/level3.py, which runs the sweep as a subprocess: one entry per call, never two."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from okgit.kernelbench import sweep

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _level3():
    spec = importlib.util.spec_from_file_location("bench_level3_calls", BENCH / "level3.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_call_the_sweep_recorded_is_completed_not_counted_twice(tmp_path):
    level3 = _level3()
    path = tmp_path / "calls.json"
    assert sweep._add_call(tmp_path, 120.0) == 120.0  # an earlier call
    before = len(level3._calls(tmp_path))
    assert sweep._add_call(tmp_path, 300.0) == 420.0  # this call, ended cleanly by the sweep
    level3._record_call(path, before, {"wall_s": 305.0, "parallel": 2, "cut": False})
    calls = json.loads(path.read_text())
    assert [c["wall_s"] for c in calls] == [120.0, 305.0]
    assert calls[1]["parallel"] == 2 and "ended" in calls[1]


def test_a_call_whose_sweep_was_killed_is_recorded_by_the_script(tmp_path):
    level3 = _level3()
    path = tmp_path / "calls.json"
    sweep._add_call(tmp_path, 120.0)
    level3._record_call(path, len(level3._calls(tmp_path)), {"wall_s": 560.0, "parallel": 1, "cut": True})
    assert [c.get("cut") for c in json.loads(path.read_text())] == [None, True]
    # and the sweep reads the script's entries back when it adds the next call
    assert sweep._add_call(tmp_path, 10.0) == 690.0
