"""`okgit traces export`: training records with rewards from correctness and speedup."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from okgit.errors import OkgitError
from okgit.search.driver import source_key
from okgit.search.traces import export, reward


def test_reward_scale():
    assert reward(None) == -1.0
    assert reward({"status": "compile_error", "correct": False}) == -1.0
    assert reward({"correct": True, "timed": False}) == 0.1
    assert reward({"correct": True, "timed": True, "speedup": 0.9}) == 0.1
    assert reward({"correct": True, "timed": True, "speedup": 2.5}) == 2.5


def llm(cand, source=None, role="generator"):
    rec = {"type": "llm", "cand": cand, "role": role, "model": "gpt-4o", "messages": [{"role": "user", "content": f"p{cand}"}],
           "reply": f"r{cand}", "usage": {"prompt_tokens": 10, "completion_tokens": 5}, "cost_usd": 0.001}
    if source is not None:
        rec["source_key"] = source_key(source)
    return rec


def cand(c, source, **result):
    return {"type": "candidate", "cand": c, "origin": "llm:gpt-4o", "source": source, "result": result}


def make_run(root, run, records):
    d = root / run
    d.mkdir(parents=True)
    (d / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "journal.jsonl").write_text(json.dumps({"type": "run_started", "op": "ops/relu.py", "run": run}) + "\n")


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "r1", [
        llm("c001", "A"), cand("c001", "A", status="compile_error", correct=False),
        llm("c002"),  # a reply with no usable code
        llm("c002", "B"), cand("c002", "B", status="correct", correct=True, timed=True, speedup=1.8),
        llm("c002", role="critic"),
        llm("c003", "B"),  # repeated B: the driver skipped it; it earns B's result
        llm("c003", "C"),  # the run stopped before C was evaluated: nothing to reward
    ])
    make_run(root, "r2", [llm("c001", "D"), cand("c001", "D", status="correct", correct=True, timed=False)])
    return SimpleNamespace(runs_dir=root, run_dir=lambda run: root / run)


def test_export_one_run(repo):
    path = export(repo, "r1")
    assert path == repo.runs_dir / "r1" / "training.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["role"], r["cand"], r["reward"]) for r in rows] == [
        ("generator", "c001", -1.0), ("generator", "c002", -1.0), ("generator", "c002", 1.8),
        ("critic", "c002", None), ("generator", "c002", 1.8),
    ]
    first = rows[0]
    assert first["messages"] == [{"role": "user", "content": "pc001"}] and first["completion"] == "rc001"
    assert first["op"] == "ops/relu.py" and first["status"] == "compile_error"


def test_export_every_run_to_a_chosen_path(repo, tmp_path):
    path = export(repo, out=tmp_path / "all.jsonl")
    runs = [json.loads(line)["run"] for line in path.read_text().splitlines()]
    assert runs.count("r1") == 5 and runs.count("r2") == 1


def test_export_errors(repo, tmp_path):
    with pytest.raises(OkgitError, match="no traces.jsonl"):
        export(repo, "nope")
    with pytest.raises(OkgitError, match="no run with traces"):
        export(SimpleNamespace(runs_dir=tmp_path / "empty", run_dir=lambda r: tmp_path), None)


def test_parquet_needs_pyarrow(repo):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        with pytest.raises(OkgitError, match="pip install 'okgit\\[parquet\\]'"):
            export(repo, "r1", fmt="parquet")
        return
    table = pq.read_table(export(repo, "r1", fmt="parquet"))
    assert table.num_rows == 5 and "reward" in table.column_names
