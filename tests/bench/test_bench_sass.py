"""bench/sass.py on this machine: a development-style convolution's kernel compiled for sm_90 as
its launch specializes it, read from its SASS; and a problem without the candidate refused in
one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, 3)

        def forward(self, x):
            return torch.nn.functional.mish(self.conv(x) - 0.5)

    batch_size = 64
    cin, cout = 8, 64

    def get_inputs():
        return [torch.rand(batch_size, cin, 40, 130)]  # output rows of 128: one tile each (ROWS)

    def get_init_inputs():
        return [cin, cout]
    """)


def sass(kb: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "sass.py"), "--kb", str(kb), *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=900,
                          check=False)


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas)
def test_the_3xtf32_and_the_tf32_kernels_read_from_their_sass(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    (tmp_path / "level2").mkdir()
    (tmp_path / "level2" / "1_Conv2d_Mish.py").write_text(PROBLEM)
    # both candidates in one call: one render, one compiling process
    r = sass(tmp_path, "--problem", "2:1", "--origin", "template:conv", "--origin", "template:conv_tf32")
    if r.returncode == 2 and "cuobjdump" in r.stderr:
        pytest.skip("no cuobjdump in this Triton")
    assert r.returncode == 0, r.stderr[-3000:]
    split, tf32 = json.loads(r.stdout)
    assert split["origin"] == "template:conv" and tf32["origin"] == "template:conv_tf32"
    assert split["switches"]["PRECISION"] == "tf32x3" and tf32["switches"]["PRECISION"] == "tf32"
    # Triton's 3xTF32 splits the operands in registers each K step (the first loop); one TF32 pass does not
    assert split["split_in_registers"] > 0 == tf32["split_in_registers"]
    assert split["wgmma"] > 0 and tf32["wgmma"] > 0 and tf32["stack"] == 0
    assert tf32["loops"][0]["instructions"] < split["loops"][0]["instructions"]


def test_a_problem_without_the_candidate_is_refused_in_one_line(tmp_path):
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_Relu.py").write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x)

        def get_inputs():
            return [torch.rand(4, 8)]

        def get_init_inputs():
            return []
        """))
    r = sass(tmp_path, "--problem", "1:1")
    assert r.returncode != 0 and "no template:conv candidate" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = sass(tmp_path, "--problem", "1:2")
    assert r.returncode == 2 and r.stderr.strip() == f"sass.py: no problem 1:2 in {tmp_path}"
