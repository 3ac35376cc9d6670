"""bench/conv.py on the CPU (--smoke): every step the GPU run takes but the timing, so a script
that would crash on the device fails here first, and the precision rule's verdicts on its arms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_smoke_runs_every_step_and_judges_by_the_rule(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "conv.py"), "--smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| problem | eager us | torch.compile us | okgit conv us |" in proc.stdout
    data = json.loads((tmp_path / "conv.json").read_text())
    rows = {r["key"]: r["arms"] for r in data["rows"]}
    assert set(rows) == {"L1/1", "L2/2"}
    for arms in rows.values():
        assert all(a["error"] is None and a["us"] is None for a in arms.values())
        assert arms["eager"]["rule"] and arms["eager channels_last"]["rule"]
        # the CPU reference is fp32 in both layouts: 3xTF32 holds the rule, one TF32 pass does not
        assert arms["template:conv"]["rule"] and arms["template:conv block_m=64"]["rule"]
        assert arms["template:conv_tf32"]["rule"] is False
