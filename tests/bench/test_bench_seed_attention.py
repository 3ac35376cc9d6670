"""bench/attention.py and bench/seed_shapes.py on the CPU (--smoke): every step but the GPU
timing, so that a script that would crash on the device fails here first."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_bench_smoke import BENCH, run, table_rows


@pytest.mark.slow  # the bench script as the GPU machine runs it: a process, the interpreter
@pytest.mark.timeout(600)
def test_attention_smoke(tmp_path):
    proc = run([sys.executable, str(BENCH / "attention.py"), "--smoke", "--configs", "64c,1024"], tmp_path, timeout=500)
    rows = table_rows(proc.stdout, "| config")[1:]
    # per config the flash kernel and attention as GEMMs: its default, Q and K split ahead, and for
    # the causal config the plain tile order beside the kept-first one
    kernels = [r for r in rows if "| okgit " in r]
    gemms = [r for r in kernels if "| okgit gemms " in r]
    assert len(kernels) == 7 and len(gemms) == 5 and all("| True |" in r for r in kernels), rows
    assert [r.split(" (")[0] for r in gemms if "plain grid" in r] == ["| 64c"], rows
    assert sum(" ahead " in r for r in gemms) == 2, rows
    saved = json.loads((tmp_path / "attention.json").read_text())
    assert [r["config"] for r in saved] == ["64c", "1024"] and all(a.get("us") is None for r in saved for a in r["arms"].values())


@pytest.mark.slow  # the bench script as the GPU machine runs it: Inductor, the interpreter
@pytest.mark.timeout(900)
def test_seed_shapes_smoke(tmp_path):
    kb = Path(__file__).resolve().parents[1] / "kb_fixture"  # 1:2 is a row sum: a reduction Inductor specialises
    proc = run([sys.executable, str(BENCH / "seed_shapes.py"), str(kb), "--smoke", "--problems", "1:2"], tmp_path, timeout=800)
    saved = json.loads((tmp_path / "seed_shapes.json").read_text())
    assert saved and "error" not in saved[0], proc.stdout[-2000:]
    assert all(r["launches"] > 0 for r in saved[0]["dynamic"].values())  # the dynamic seed's kernels ran at every shape
    assert saved[0]["static"]["batch"]["launches"] == 0  # the static one falls back at another batch
