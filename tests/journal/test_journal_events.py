"""The journal as a typed contract (okgit/journal/events.py): a real run's journal, the recorded ones
the reader tests use (tests/journals) and docs/internals.md's table all agree with the models,
and the writer refuses an event its model does not accept."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import OP
from pydantic import ValidationError

from okgit.eval.base import InMemoryEvaluator
from okgit.eval.types import EvalError, EvalResult, Status
from okgit.git.rundir import RunDir
from okgit.journal.events import EVENTS, Event, check_event
from okgit.journal.files import Journal
from okgit.run import optimize
from okgit.search.types import Proposal

ROOT = Path(__file__).resolve().parents[2]
RECORDED = sorted((ROOT / "tests" / "journals").glob("*/journal.jsonl"))


def undeclared(event: dict) -> set[str]:
    """Fields of an event its model does not name."""
    return set(event) - set(EVENTS[event["type"]].model_fields)


def check_journal(events: list[dict]) -> None:
    assert events and events[0]["type"] == "run_started"
    for e in events:
        check_event(e)
        assert not undeclared(e), (e["type"], undeclared(e))


class Queue:
    name = "queue"

    def __init__(self, sources: list[str]) -> None:
        self.sources = sources

    def propose(self, ctx):
        return Proposal(source=self.sources.pop(0), origin="template:test", intent="try") if self.sources else None


def test_a_real_runs_journal_matches_the_models(git_repo):
    base = (git_repo / OP).read_text()
    good, bad = base + "\n# a\n", base + "\n# b\n"

    def judge(source: str) -> EvalResult:
        if source == bad:
            return EvalResult(status=Status.incorrect, error=EvalError(gate="outputs", message="wrong"), wall_s=0.1)
        return EvalResult(status=Status.correct, correct=True, wall_s=0.1)

    result = optimize(git_repo / OP, flags={"device": "cpu", "iterations": 3}, cwd=git_repo,
                      evaluator=InMemoryEvaluator(judge), proposers=[Queue([good, bad])])
    run = RunDir(Path(result.report).parent)
    events = [json.loads(line) for line in run.journal.read_text().splitlines()]  # as written, not as read
    check_journal(events)
    types = [e["type"] for e in events]
    assert {"run_started", "reference", "proposal", "evaluated", "accepted", "best", "run_finished"} <= set(types)
    assert run.diff.is_file() and run.result.is_file() and run.traces.is_file()


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.parent.name)
def test_the_recorded_journals_match_the_models(path):
    check_journal([json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def test_the_docs_table_lists_each_model_and_its_fields():
    text = (ROOT / "docs" / "internals.md").read_text()
    section = text.split("## Journal events", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)`[^|]*\| ([^|]+) \|$", section, re.MULTILINE))
    assert set(rows) == set(EVENTS)
    for type, model in EVENTS.items():
        documented = set(re.findall(r"\b[a-z_]+\b", re.sub(r"\([^)]*\)|\{[^}]*\}", "", rows[type])))
        own = set(model.model_fields) - set(Event.model_fields)  # every line's type, ts and run: said once
        assert own <= documented, (type, own - documented)


def test_the_writer_refuses_what_its_model_does_not_accept(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl", "r1")
    journal.write("best", cand="c001", speedup=None)
    with pytest.raises(ValidationError):
        journal.write("best", speedup=1.2)  # no cand
    with pytest.raises(ValueError, match="unknown journal event type"):
        journal.write("bset", cand="c001", speedup=None)
    assert len(RunDir(tmp_path).events()) == 1
