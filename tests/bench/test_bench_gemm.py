"""bench/gemm.py on the CPU (--smoke): every step the GPU run takes but the timing, so a script
that would crash on the device fails here first; and its settings edits, which the GPU run's
configurations rest on."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gemm.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gemm", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # the bench script as the GPU machine runs it: a process, the interpreter
def test_smoke_runs_every_step_and_judges_by_the_rule(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| shape | cuBLAS fp32 | defaults |" in proc.stdout and "| problem | eager us |" in proc.stdout
    data = json.loads((tmp_path / "gemm.json").read_text())
    assert data["smoke"] is True
    family = [r for r in data["rows"] if r["part"] == "family"]
    assert {r["shape"] for r in family} == set(_bench().SHAPES)
    # a tile setting the kind counts as not fitting beside a shape's defaults (a store-bound GEMM's are
    # persistent, with TMA stores) is listed, not run; every other row runs and holds the rule
    listed = [r for r in family if (r["error"] or "").startswith("does not fit")]
    assert all(r["tiles"] for r in listed) and len(listed) < len(family) // 4
    ran = [r for r in family if r not in listed]
    assert all(r["error"] is None and r["rule"] and r["us"] is None for r in ran)
    assert {r["tiles"] for r in ran} == {False, True} and all(r["plan"]["split_k"] >= 1 for r in ran)
    problems = {r["key"]: r for r in data["rows"] if r["part"] == "problem"}
    assert set(problems) == {"L1/1", "L2/2"}
    linear = problems["L2/2"]["arms"]
    assert list(linear) == ["eager", "template:gemm", "template:gemm precision=bf16x3", "template:vendor_gemm+pointwise"]
    assert all(arm["rule"] and arm["us"] is None and arm["error"] is None for arm in linear.values())


def test_settings_reach_a_group_and_the_helper():
    bench = _bench()
    source = 'FUSED_GEMM_3_BLOCK_M: int = 128\nFUSED_GEMM_3_PRECISION: str = "tf32x3-split"\nGEMM_SPLIT_AHEAD_MIN: int = 1024\n'
    out = bench.with_settings(source, {"BLOCK_M": 64, "PRECISION": "tf32x3", "GEMM_SPLIT_AHEAD_MIN": 0})
    assert out == 'FUSED_GEMM_3_BLOCK_M: int = 64\nFUSED_GEMM_3_PRECISION: str = "tf32x3"\nGEMM_SPLIT_AHEAD_MIN: int = 0\n'
    assert bench.within_rule({"abs": 3.9e-6}, {"abs": 1e-6, "scale": 1.0})
    assert not bench.within_rule({"abs": 4.1e-6}, {"abs": 1e-6, "scale": 1.0})
