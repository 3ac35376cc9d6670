"""bench/sweep_dev.py across two calls, as the device calls run it: the first stopped by SIGTERM
(the call's own limit) while its problem's search runs, its state packed into the tarball; the
second starts from that tarball alone, in a fresh working folder (no worktree, nothing else of the
first call's), and finishes the same run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_profiles_table_takes_a_resumed_runs_last_winner(tmp_path, monkeypatch):
    """A run stopped in flight finishes once per call (interrupted, then optimized): its winner is
    the last call's, profiled in that call (L1/3 on a96f65a read "winner c006 not profiled")."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # sweep_dev imports its neighbour resumable
    spec = importlib.util.spec_from_file_location("sweep_dev", ROOT / "bench" / "sweep_dev.py")
    assert spec is not None and spec.loader is not None
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    journal = tmp_path / "repos" / "level1_3_bmm" / ".okgit" / "runs" / "r1" / "journal.jsonl"
    journal.parent.mkdir(parents=True)
    profile = {"bandwidth_utilization": 0.2, "compute_utilization": 0.35, "occupancy": 0.12}
    events = [{"type": "profiled", "cand": None, "tools": ["ncu"], "profile": profile},
              {"type": "run_finished", "status": "interrupted", "best_cand": "c006"},
              {"type": "resumed"},
              {"type": "profiled", "cand": "c009", "tools": ["ncu"], "profile": profile},
              {"type": "run_finished", "status": "optimized", "best_cand": "c009"}]
    journal.write_text("".join(json.dumps(e) + "\n" for e in events))
    table = sweep._profiles(tmp_path)
    assert "| level1_3_bmm | winner c009 | ncu | 20% | 35% |" in table
    assert "c006" not in table and "not profiled" not in table


@pytest.mark.slow  # the bench script across two calls as the device runs it: processes, SIGTERM
@pytest.mark.timeout(900)
def test_the_second_call_resumes_from_the_first_calls_tarball_alone(tmp_path):
    state, out, tmp = tmp_path / "state", tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OUT": str(out), "TMPDIR": str(tmp)}
    cmd = [sys.executable, str(ROOT / "bench" / "sweep_dev.py"), "--smoke", "--state", str(state), "--parallel", "1",
           "--level=2"]
    first = subprocess.Popen(cmd, cwd=tmp_path, env={**env, "SWEEP_REV": "rev1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    repo = tmp / "okgit-sweep-dev" / "out" / "repos" / "level2_1_ScaleShift"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and first.poll() is None:
        journals = list(repo.glob(".okgit/runs/*/journal.jsonl"))
        if journals and '"type": "evaluated"' in journals[0].read_text():
            break  # its search has begun
        time.sleep(0.2)
    assert first.poll() is None, first.communicate()
    first.send_signal(signal.SIGTERM)
    said, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert "pending (1, 1 in flight): level2/1_ScaleShift" in said and "over 1 call(s)" in said
    assert (state / "sweep-dev.tar.gz").is_file() and (out / "sweep-dev.tar.gz").is_file()
    (run_id,) = [d.name for d in (repo / ".okgit" / "runs").iterdir()]

    again = subprocess.run(cmd, cwd=tmp_path, env={**env, "SWEEP_REV": "rev2"}, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "resuming from" in again.stdout and "over 2 call(s)" in again.stdout and "pending" not in again.stdout
    assert re.search(r"rows measured on different code or cards: rev1 on [^:;]+: none; rev2 on [^:;]+: level2/1_ScaleShift",
                     again.stdout), again.stdout
    (problem,) = json.loads((out / "sweep-dev.json").read_text())["report"]["problems"]
    assert problem["run_id"] == run_id and problem["calls"] == 2 and problem["correct"]
