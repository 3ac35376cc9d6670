"""bench/conv_plan_host.py on the CPU, as the GPU machine runs it (a process): the template of the
commit before the layout was kept and the current one build a plan at every shape it names, and
its JSON holds a row per shape. Host times on a shared CPU are not asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # the bench script as a process, real-size inputs allocated on the CPU
def test_every_shape_is_planned_before_and_after(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "conv_plan_host.py"), "--repeat", "1"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "conv_plan_host.json").read_text())
    assert report["device"] == "cpu" and len(report["rows"]) == 4
    for row in report["rows"]:
        assert all(row[k] > 0 for k in ("before_ms", "cold_ms", "warm_ms")), row
        assert row["problem"] in proc.stdout
