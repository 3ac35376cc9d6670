"""bench/coverage.py (the development set's coverage by okgit's own kernels) and
bench/coverage_gpu.py --smoke, on a KernelBench-shaped folder of two small problems."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCAN = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=self.dim)

batch_size = 64
length = 1000
dim = 1

def get_inputs():
    x = torch.rand(batch_size, length)
    return [x, torch.randint(0, 2, x.shape).bool()]

def get_init_inputs():
    return [dim]
"""

SORT = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=1).values

def get_inputs():
    return [torch.rand(8, 16)]

def get_init_inputs():
    return []
"""


def kb(tmp_path: Path) -> Path:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_MaskedCumsum.py").write_text(SCAN)
    (tmp_path / "level1" / "2_Sort.py").write_text(SORT)
    return tmp_path


def run(args: list[str], out: Path) -> str:
    env = {**os.environ, "OUT": str(out), "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow  # the bench script as the GPU machine runs it: a process, captures of every problem
def test_the_survey_says_what_is_covered_and_why_not(tmp_path):
    out = tmp_path / "coverage.md"
    run(["bench/coverage.py", str(kb(tmp_path)), "--levels", "1", "--out", str(out)], tmp_path)
    text = out.read_text()
    assert "| 1 | 1_MaskedCumsum | scan | yes | scan |  |  |" in text
    assert "| 1 | 2_Sort | sort or selection | no |  |  | no template covers aten.sort (sort or selection) |" in text
    assert "- level 1: 2 problems; a kernel of okgit's own on 1 (50%)" in text


@pytest.mark.slow  # the bench script as the GPU machine runs it: a process, the interpreter
def test_the_gpu_script_checks_the_scan_at_scaled_sizes_on_a_cpu(tmp_path):
    stdout = run(["bench/coverage_gpu.py", str(kb(tmp_path)), "--smoke", "--problems", "1:1,2"], tmp_path)
    rows = json.loads((tmp_path / "coverage_gpu.json").read_text())["rows"]
    assert [c["correct"] for c in rows[0]["candidates"]] == [True]
    assert "eager_us" not in rows[0]  # nothing timed on a CPU
    assert rows[1]["error"].startswith("templates: no template covers aten.sort")
    assert "| 1:1 1_MaskedCumsum.py | template:scan | yes |" in stdout
