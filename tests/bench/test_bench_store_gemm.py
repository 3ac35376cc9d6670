"""bench/store_gemm.py on the CPU (--smoke): every arm the GPU run times, built, run and judged by
the precision rule under the interpreter (TMA stores included, through the plan's seam), nothing
timed; so an arm that would crash on the device fails here first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bench_smoke import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # the bench script as the GPU machine runs it: a process, the interpreter
def test_smoke_runs_every_arm_and_judges_it(tmp_path):
    proc = run([sys.executable, str(ROOT / "bench" / "store_gemm.py"), "--smoke"], tmp_path, timeout=600)
    assert "| part | arm | us | TB/s of C |" in proc.stdout
    data = json.loads((tmp_path / "store_gemm.json").read_text())
    rows = {(r["part"], r["arm"]): r for r in data["rows"]}
    assert data["smoke"] is True and not data["skipped"]
    assert {part for part, _ in rows} == {"floor", "cuBLAS", "okgit", "own"} and len(rows) == len(data["rows"]) > 30
    assert all(r["error"] is None and r["rule"] and r["us"] is None for r in rows.values()), \
        [(k, r["error"]) for k, r in rows.items() if not r["rule"]]
    # okgit's kind renders the problem with its store-bound defaults; "was" is the kind before them
    assert rows["okgit", "defaults"]["plan"] == {"ahead": False, "tma": False, "split_k": 1, "store": "tma", "persistent": True}
    was = next(r for (part, arm), r in rows.items() if arm.startswith("was: "))
    assert (was["plan"]["store"], was["plan"]["persistent"]) == ("plain", False)


@pytest.mark.slow  # the bench script as a process (torch and triton imported first)
def test_a_part_that_does_not_exist_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "store_gemm.py"), "--smoke", "--parts", "own,fast"],
                          cwd=ROOT, env={**os.environ, "OUT": str(tmp_path)}, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 2 and "--parts: own,fast" in proc.stderr
