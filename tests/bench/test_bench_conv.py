"""bench/conv.py on the CPU (--smoke): every step the GPU run takes but the timing, so a script
that would crash on the device fails here first, and the precision rule's verdicts on its arms."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_problems_left_are_the_next_calls_problems(tmp_path):
    """Past --time-limit the script prints the problems it did not start as a --problems value:
    that value selects the same files, in the same order, levels interleaved as given."""
    spec = importlib.util.spec_from_file_location("bench_conv", ROOT / "bench" / "conv.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for level, ids in (("1", (54, 63, 75)), ("2", (7, 15, 87))):
        (tmp_path / f"level{level}").mkdir()
        for i in ids:
            (tmp_path / f"level{level}" / f"{i}_Conv.py").write_text("")
    files = bench.problem_files(tmp_path, "2:87,7 1:63 2:15 1:54,75")
    assert [k for k, _ in files] == ["L2/87", "L2/7", "L1/63", "L2/15", "L1/54", "L1/75"]
    left = bench.spec(files[2:])
    assert bench.problem_files(tmp_path, left) == files[2:], left


def test_direct_tiles_walk_the_direct_convolutions_settings_only():
    spec = importlib.util.spec_from_file_location("bench_conv", ROOT / "bench" / "conv.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sources = {"template:conv_direct+rows": "", "template:conv+rows": "", "template:conv_tf32+rows": ""}
    row = {"arms": {"template:conv_tf32+rows": {"rule": False}}}
    walked = [origin for origin, _ in bench.tile_arms(row, sources)]
    assert walked == ["template:conv_direct+rows", "template:conv_tf32+rows", "template:conv+rows"]
    assert [origin for origin, _ in bench.tile_arms(row, sources, "direct")] == ["template:conv_direct+rows"]
    assert bench.tile_arms(row, {"template:conv+rows": ""}, "direct") == []
    # where the TF32 convolution keeps the rule, the 3xTF32 one's tiles are not walked
    assert [o for o, _ in bench.tile_arms({"arms": {"template:conv_tf32+rows": {"rule": True}}}, sources)] == [
        "template:conv_direct+rows", "template:conv_tf32+rows"]


@pytest.mark.slow  # the bench script as the GPU machine runs it: a process, the interpreter
def test_smoke_runs_every_step_and_judges_by_the_rule(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "conv.py"), "--smoke", "--kernels"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| problem | eager us | torch.compile us | okgit conv us |" in proc.stdout
    data = json.loads((tmp_path / "conv.json").read_text())
    rows = {r["key"]: r["arms"] for r in data["rows"]}
    assert set(rows) == {"L1/1", "L1/3", "L2/2"}  # L1/3: a 1x1 convolution, the conv kinds' GEMM per sample
    for arms in rows.values():
        assert all(a["error"] is None and a["us"] is None for a in arms.values())
        assert arms["eager"]["rule"] and arms["eager channels_last"]["rule"]
        # the CPU reference is fp32 in both layouts: 3xTF32 holds the rule, one TF32 pass does not
        assert arms["template:conv"]["rule"] and arms["template:conv block_m=64"]["rule"]
        assert arms["template:conv_tf32"]["rule"] is False
        # --kernels: every arm at its defaults profiled (on the CPU, its operators), the longest first
        for arm in ("eager", "template:conv"):
            found = arms[arm]["kernels"]
            assert found and all(a[1] >= b[1] for a, b in zip(found, found[1:])), found
        assert "kernels" not in arms["template:conv block_m=64"]
    assert "  kernels of eager (us a call;" in proc.stdout
