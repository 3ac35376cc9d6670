"""A sweep stopped in flight and resumed, as a user (or a device call's time limit) does it: the
real `okgit bench kernelbench` as a subprocess on the CPU, SIGTERM once its problem's search has
begun, then the same command again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parents[1] / "kb_fixture"


@pytest.mark.slow  # the real sweep as a process, stopped by SIGTERM and run again
@pytest.mark.timeout(900)
def test_a_problem_stopped_in_flight_resumes_its_run_in_the_next_sweep(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "okgit", "bench", "kernelbench", str(FIXTURE), "--level", "2", "--device", "cpu",
           "--iterations", "2", "--out", str(out), "--json"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    sweep = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    repo = out / "repos" / "level2_1_ScaleShift"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and sweep.poll() is None:
        journals = list(repo.glob(".okgit/runs/*/journal.jsonl"))
        if journals and '"type": "evaluated"' in journals[0].read_text():
            break  # its search has begun: a stop now leaves a run to resume
        time.sleep(0.2)
    assert sweep.poll() is None, sweep.communicate()
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 130, err
    assert "stopped in flight" in err and "interrupted (SIGTERM" in err
    report = json.loads((out / "report.json").read_text())
    assert report["pending"] == report["in_flight"] == ["level2/1_ScaleShift"] and report["problems"] == []
    flight = json.loads((out / "in_flight" / "level2_1_ScaleShift.json").read_text())
    assert flight["calls"] == 1 and flight["wall_s"] > 0
    (run_dir,) = (repo / ".okgit" / "runs").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] in ("interrupted", "unverified")  # stopped in its search, or in the check after it

    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    (problem,) = json.loads(again.stdout)["problems"]
    assert problem["correct"] and problem["run_id"] == run_dir.name and problem["calls"] == 2, (problem, again.stderr[-3000:])
    assert not (out / "in_flight" / "level2_1_ScaleShift.json").exists()
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    if result["status"] == "interrupted":
        assert any(e["type"] == "resumed" for e in events)
    assert sum(1 for e in events if e["type"] == "run_started") == 1  # one run, not started over
    assert problem["time"]["reference"]["wall_s"] > 0 and problem["time"]["check"]["wall_s"] > 0, (
        problem["time"], result["status"], flight)
    assert "None" not in problem["time"], problem["time"]  # the first call's stretch is no stage
    assert json.loads(again.stdout)["running_at_once_s"][0] > problem["wall_s"] * 0.5  # both calls' stretches
