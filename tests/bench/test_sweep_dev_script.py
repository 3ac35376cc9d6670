"""bench/sweep_dev.py across two calls, as the device calls run it: the first stopped by SIGTERM
(the call's own limit) while its problem's search runs, its state packed into the tarball; the
second starts from that tarball alone, in a fresh working folder (no worktree, nothing else of the
first call's), and finishes the same run. The real `okgit bench kernelbench` it runs, a process
the SIGTERM is passed on to, is checked in both calls as a user stopping a sweep and running it
again sees it: the problem left in flight with its run resumable, then that run resumed, not
started over."""

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
    # the sweep itself (its stderr is the script's): stopped in flight, exit 130, its problem pending
    sweep_out = repo.parents[1]
    (call,) = json.loads((sweep_out / "dev_calls.json").read_text())
    assert call["exit"] == 130, err
    assert "stopped in flight" in err and "interrupted (SIGTERM" in err
    report = json.loads((sweep_out / "report.json").read_text())
    assert report["pending"] == report["in_flight"] == ["level2/1_ScaleShift"] and report["problems"] == []
    flight = json.loads((sweep_out / "in_flight" / "level2_1_ScaleShift.json").read_text())
    assert flight["calls"] == 1 and flight["wall_s"] > 0
    (run_dir,) = (repo / ".okgit" / "runs").iterdir()
    run_id = run_dir.name
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] in ("interrupted", "unverified")  # stopped in its search, or in the check after it

    again = subprocess.run(cmd, cwd=tmp_path, env={**env, "SWEEP_REV": "rev2"}, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "resuming from" in again.stdout and "over 2 call(s)" in again.stdout and "pending" not in again.stdout
    assert re.search(r"rows measured on different code or cards: rev1 on [^:;]+: none; rev2 on [^:;]+: level2/1_ScaleShift",
                     again.stdout), again.stdout
    report = json.loads((out / "sweep-dev.json").read_text())["report"]
    (problem,) = report["problems"]
    assert problem["run_id"] == run_id and problem["calls"] == 2 and problem["correct"], (problem, again.stderr[-3000:])
    assert not (sweep_out / "in_flight" / "level2_1_ScaleShift.json").exists()
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    if result["status"] == "interrupted":
        assert any(e["type"] == "resumed" for e in events)
    assert sum(1 for e in events if e["type"] == "run_started") == 1  # one run, not started over
    assert problem["time"]["reference"]["wall_s"] > 0 and problem["time"]["check"]["wall_s"] > 0, (
        problem["time"], result["status"], flight)
    assert "None" not in problem["time"], problem["time"]  # the first call's stretch is no stage
    assert report["running_at_once_s"][0] > problem["wall_s"] * 0.5  # both calls' stretches
