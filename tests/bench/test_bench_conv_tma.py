"""bench/conv.py --tma on the CPU (--smoke): the TMA path's arms beside the pointer path's at the
same tiles, as the GPU run takes them, the plan finding TMA through the tests' seam (the
interpreter runs the descriptors), and the table of the pairs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # the bench script as the GPU machine runs it: a process, the interpreter
def test_smoke_pairs_each_tma_arm_with_its_pointer_arm(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "conv.py"), "--smoke", "--tma", "--no-compile"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| problem | arm | TMA us | pointers us | pointers / TMA | TMA path |" in proc.stdout
    rows = {r["key"]: r["arms"] for r in json.loads((tmp_path / "conv.json").read_text())["rows"]}
    for arms in rows.values():
        pairs = {"template:conv_tf32 tma", "template:conv_tf32 block_k=16, tma", "template:conv tma"}
        for arm in pairs:
            on, off = arms[f"{arm}=1"], arms[f"{arm}=0"]
            assert on["error"] is None and off["error"] is None, (on, off)
            # the smoke's tiny rows fit no 128-row tile: the weight alone through TMA
            assert on["tma"] == ["B"] and off["tma"] == ["none"], (arm, on, off)
        assert arms["template:conv tma=1"]["rule"] and arms["template:conv tma=0"]["rule"]
