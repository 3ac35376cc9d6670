"""`okgit bench kernelbench` as a user runs it: a real subprocess over the fixture folder
(problems okgit has not seen), on the CPU under the Triton interpreter, then resumed; its
refusals in this process (`cli`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parents[1] / "kb_fixture"


def bench(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "okgit", "bench", "kernelbench", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_usage_and_input_errors_are_one_line(cli, tmp_path):
    def bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return cli("bench", "kernelbench", *args, cwd=cwd, env={"CUDA_VISIBLE_DEVICES": ""})

    bad = bench(str(FIXTURE), "--problems", "x-y", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--problems" in bad.stderr
    missing = bench(str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 1 and "no such directory" in missing.stderr
    empty = bench(str(FIXTURE), "--level", "1", "--problems", "40-50", cwd=tmp_path)
    assert empty.returncode == 1 and "no problems" in empty.stderr


@pytest.mark.slow  # a sweep of three problems, each in an okgit process of its own, then resumed
def test_cpu_sweep_reports_every_problem_and_resumes(tmp_path):
    # The whole offline pipeline (templates and autotune proposers) must exist for a real run.
    pytest.importorskip("okgit.search.proposers.autotune")
    out = tmp_path / "out"
    args = (str(FIXTURE), "--level", "1", "--device", "cpu", "--iterations", "2", "--parallel", "2",
            "--out", str(out), "--json")
    first = bench(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    keys = [p["key"] for p in report["problems"]]
    assert keys == ["level1/1_ScaledRelu", "level1/2_RowSum", "level1/3_RowSort"]
    by_key = {p["key"]: p for p in report["problems"]}
    for p in report["problems"]:
        assert p["status"] in ("unverified", "fallback", "error", "timeout"), p
        assert p["timed"] is False and p["speedup_eager"] is None  # no speedup from a CPU
        assert p["device"] in ("cpu:0", "cpu:1")
        assert p["correct"] == (p["status"] == "unverified")
    # The templates handle a pointwise op and a row reduction; nothing handles a sort.
    # (the row in the message: once, on a 2-core host loaded by other tests, ScaledRelu's was not correct)
    assert by_key["level1/1_ScaledRelu"]["correct"] and by_key["level1/1_ScaledRelu"]["best_iteration"], \
        (by_key["level1/1_ScaledRelu"], first.stderr[-2000:])
    assert by_key["level1/2_RowSum"]["correct"], (by_key["level1/2_RowSum"], first.stderr[-2000:])
    assert not by_key["level1/3_RowSort"]["correct"]
    rate = sum(p["correct"] for p in report["problems"]) / 3
    for scores in report["summary"]["scores"]:
        assert scores["fast_p"] == {"0": pytest.approx(rate), "1.0": None, "1.5": None, "2.0": None}
    assert report["summary"]["correctness_rate"] == pytest.approx(rate)
    table, times = (out / "report.md").read_text().split("Where the time went")
    times, phases = times.split("Where the candidate evaluations' seconds went")
    assert table.count("| level1/") == 3 and times.count("| level1/") == 3  # each problem's row in both tables
    # how many ran at once, from each problem's stretches in its ledger: never more than --parallel
    at_once = report["running_at_once_s"]
    assert 1 <= len(at_once) <= 2 and at_once[0] > 0 and "problems running at once" in times, at_once
    evaluated = [p for p in report["problems"] if p["eval_phase_s"]]  # and each that evaluated a candidate
    assert len(evaluated) >= 2 and phases.count("| level1/") == len(evaluated)
    assert len(list((out / "state").glob("*.json"))) == 3
    assert len(list((out / "winners").glob("*.py"))) == sum(p["correct"] for p in report["problems"])

    # Resume: a finished sweep reruns nothing and reports the same problems.
    started = time.monotonic()
    again = bench(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "3 of 3 problems already finished" in again.stderr
    assert time.monotonic() - started < 30
    assert json.loads(again.stdout)["problems"] == report["problems"]
