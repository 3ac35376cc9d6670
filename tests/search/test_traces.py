"""`okgit traces export`: training records with rewards from correctness and speedup."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import OP, OP_SOURCE, okgit, record_run, variant

from okgit.errors import OkgitError
from okgit.search.traces import CONTENTS, export, reward
from okgit.search.types import source_key


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
    started = {"type": "run_started", "ts": 1.0, "run": run, "op": "ops/relu.py", "base": "0" * 40, "base_dirty": False,
               "branch": f"okgit/{run}", "worktree": f".okgit/worktrees/{run}", "backend": "triton", "device": "cpu",
               "mode": "fast", "model": "gpt-4o", "eval": "local", "iterations": 4}
    (d / "journal.jsonl").write_text(json.dumps(started) + "\n")


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
    done = export(repo, "r1")
    assert done.path == repo.runs_dir / "r1" / "training.jsonl" and done.records == 5 and done.runs == ["r1"]
    rows = [json.loads(line) for line in done.path.read_text().splitlines()]
    assert [(r["role"], r["cand"], r["reward"]) for r in rows] == [
        ("generator", "c001", -1.0), ("generator", "c002", -1.0), ("generator", "c002", 1.8),
        ("critic", "c002", None), ("generator", "c002", 1.8),
    ]
    first = rows[0]
    assert first["messages"] == [{"role": "user", "content": "pc001"}] and first["completion"] == "rc001"
    assert first["op"] == "ops/relu.py" and first["status"] == "compile_error"


def test_export_every_run_to_a_chosen_path(repo, tmp_path):
    path = export(repo, out=tmp_path / "all.jsonl").path
    runs = [json.loads(line)["run"] for line in path.read_text().splitlines()]
    assert runs.count("r1") == 5 and runs.count("r2") == 1


def test_nothing_to_export_writes_nothing(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "r1", [cand("c001", "A", status="correct", correct=True)])  # an offline run: no model calls
    (root / "r2").mkdir()  # a run stopped before its first trace
    store = SimpleNamespace(runs_dir=root, run_dir=lambda run: root / run)
    done = export(store, fmt="parquet")  # no file to write, so no pyarrow needed either
    assert (done.path, done.records, done.runs) == (None, 0, ["r1", "r2"])
    assert done.text() == "0 records (no model calls in any of 2 runs): nothing written"
    assert sorted(p.name for p in root.rglob("training.*")) == []
    with pytest.raises(OkgitError, match="unknown format"):
        export(store, fmt="csv")


def model_run(root: Path) -> str:
    """A recorded run whose candidate came from a model: two model calls in its traces; its id."""
    space, _ = record_run(root, [("x.clamp(min=0)", "clamp")])
    source = variant("x.clamp(min=0)")
    space.traces.write("reference", path=OP, source=OP_SOURCE)
    for rec in (llm("c001", source), cand("c001", source, status="correct", correct=True, timed=False),
                llm("c001", role="critic")):
        space.traces.write(rec.pop("type"), **rec)
    return space.run_id


def test_cli_says_how_many_records_it_wrote(cli, git_repo: Path) -> None:
    runs = git_repo / ".okgit" / "runs"
    proc = cli("traces", "export", cwd=git_repo)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "0 records (no runs yet): nothing written\n", "")

    offline, _ = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])
    offline.traces.write("reference", path=OP, source=OP_SOURCE)
    proc = cli("traces", "export", offline.run_id, cwd=git_repo)
    assert (proc.returncode, proc.stdout) == (0, f"0 records (no model calls in run {offline.run_id}): nothing written\n")
    assert not list(runs.rglob("training.*"))

    with_model = model_run(git_repo)
    proc = cli("traces", "export", "--json", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"path": str(runs / "training.jsonl"), "records": 2,
                                       "runs": sorted([offline.run_id, with_model])}
    proc = cli("traces", "export", with_model, cwd=git_repo)
    assert proc.stdout == f"wrote 2 records to {runs / with_model / 'training.jsonl'}\n{CONTENTS}\n"

    proc = cli("traces", "export", "20990101-000000-dead", cwd=git_repo)
    assert (proc.returncode, proc.stderr) == (1, "okgit: unknown run: 20990101-000000-dead\n")


def test_parquet_round_trips(git_repo: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    run = model_run(git_repo)
    for fmt in ("jsonl", "parquet"):
        proc = okgit("traces", "export", run, "--format", fmt, cwd=git_repo)
        assert proc.returncode == 0 and proc.stdout.startswith("wrote 2 records to "), proc.stderr
    run_dir = git_repo / ".okgit" / "runs" / run
    rows = [json.loads(line) for line in (run_dir / "training.jsonl").read_text().splitlines()]
    table = pq.read_table(run_dir / "training.parquet")
    assert table.column_names == list(rows[0]) and table.to_pylist() == rows


def test_parquet_without_pyarrow_is_one_line(git_repo: Path) -> None:
    run = model_run(git_repo)
    # None in sys.modules makes every `import pyarrow` fail, as on a machine without it.
    blocked = "import sys; sys.modules['pyarrow'] = None; from okgit.cli import main; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", blocked, "traces", "export", run, "--format", "parquet"],
                          cwd=git_repo, capture_output=True, text=True, timeout=120, check=False)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == "okgit: parquet export needs pyarrow: pip install 'okgit[parquet]'\n"
    assert not (git_repo / ".okgit" / "runs" / run / "training.parquet").exists()
