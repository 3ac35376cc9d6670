"""Runs and candidates as the journal tells them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import OP, crashed_run, record_run

from okgit.errors import OkgitError
from okgit.git import history
from okgit.git.repo import Repo
from okgit.journal.files import JsonlWriter
from okgit.views import tables


def test_runs_newest_first_with_their_status(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    assert history.list_runs(repo) == []
    assert "no runs yet" in tables.runs_text([])

    done, tags = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp"), ("x.clamp(min=0)", "method")])
    died = crashed_run(git_repo, [("x.clamp(min=0)", "method")])  # no run_finished, no holder
    stopped = crashed_run(git_repo, [])
    JsonlWriter(repo.run_dir(stopped) / "journal.jsonl", stopped).write("interrupted", reason="SIGTERM")
    live, _ = record_run(git_repo, [("x.clamp(min=0)", "method")], finish=None)

    runs = history.list_runs(repo)
    assert [r.run_id for r in runs] == [live.run_id, stopped, died, done.run_id]
    by_id = {r.run_id: r for r in runs}
    assert by_id[done.run_id].model_dump(exclude={"started"}) == {
        "run_id": done.run_id, "op": OP, "status": "optimized", "speedup": 1.2, "best_tag": tags[1],
        "device": "cpu", "backend": "triton", "model": None, "proposer": "offline", "candidates": 2,
        "campaign": None,
    }
    assert by_id[died].status == by_id[stopped].status == "interrupted"
    assert by_id[live.run_id].status == "running"
    assert by_id[live.run_id].speedup == 1.1 and by_id[live.run_id].best_tag == f"okgit/{live.run_id}/c001"

    text = tables.runs_text(runs)
    assert text.splitlines()[0].split()[:3] == ["RUN", "STARTED", "(UTC)"]
    assert f"{done.run_id}" in text and "optimized" in text and "1.20x" in text and "running" in text
    live.close()


def test_run_detail(git_repo: Path) -> None:
    space, tags = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp"), ("x.clamp(min=0)", "method clamp")])
    space.journal.write("proposal", cand="c003", origin="template:test", intent="broken", parent="c002", backend="triton")
    space.journal.write("evaluated", cand="c003", status="compile_error", correct=False, timed=False, speedup=None,
                        runtime_us=None, ref_runtime_us=None, error={"gate": "compile", "message": "x"}, profile=None,
                        wall_s=1.0)
    detail = history.run_detail(Repo.find(git_repo), space.run_id)
    assert [c.model_dump() for c in detail.candidates] == [
        {"cand": "c001", "tag": tags[0], "parent": None, "origin": "template:test", "intent": "clamp",
         "status": "correct", "speedup": 1.1, "runtime_us": 100 / 1.1},
        {"cand": "c002", "tag": tags[1], "parent": "c001", "origin": "template:test", "intent": "method clamp",
         "status": "correct", "speedup": 1.2, "runtime_us": 100 / 1.2},
        {"cand": "c003", "tag": None, "parent": "c002", "origin": "template:test", "intent": "broken",
         "status": "compile_error", "speedup": None, "runtime_us": None},
    ]
    lines = tables.detail_text(detail).splitlines()
    assert lines[0].startswith(f"run {space.run_id}  optimized  speedup 1.20x  op {OP}")
    assert lines[1].split() == ["CAND", "TAG", "PARENT", "STATUS", "SPEEDUP", "RUNTIME_US", "ORIGIN", "INTENT"]
    assert lines[3].split()[:6] == ["c002", tags[1], "c001", "correct", "1.20x", "83.3"]
    assert lines[4].split()[:5] == ["c003", "-", "c002", "compile_error", "-"]


def test_unknown_run(git_repo: Path) -> None:
    with pytest.raises(OkgitError, match="^unknown run: 20990101-000000-dead$"):
        history.run_detail(Repo.find(git_repo), "20990101-000000-dead")
