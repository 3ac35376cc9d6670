"""bench/batchnorm.py --smoke: the batchnorm kind's candidate for L1/33 built as okgit builds it,
checked against float64 in training and eval mode with its state dict, every launch setting
run under the interpreter, nothing timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KB = Path("/work/shared/kernelbench/KernelBench")


@pytest.mark.slow  # the bench script as a process, its kernels under the interpreter
def test_batchnorm_bench_smoke(tmp_path):
    if not (KB / "level1").is_dir():
        pytest.skip("no KernelBench checkout here")
    env = {**os.environ, "OUT": str(tmp_path), "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "batchnorm.py"), str(KB), "--smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads((tmp_path / "batchnorm.json").read_text())["rows"]
    assert row["origin"] == "template:batchnorm"
    assert [s["mode"] for s in row["check"]["steps"]] == ["train", "eval"] and row["check"]["ok"]
    assert row["check"]["steps"][0]["bn.num_batches_tracked"] == 1
    assert len(row["timings"]) > 2 and all(t["us"] is None for t in row["timings"])
    assert "smoke: nothing timed" in proc.stdout
