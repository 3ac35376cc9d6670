"""Readers of the journal go through its models and one fold (okgit.journal): journals older
okgit versions wrote still read, history is a projection of RunView, and a campaign's journal
is checked and read as its own models."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import OP, record_run
from pydantic import ValidationError

from okgit.cli import main
from okgit.git.history import detail
from okgit.git.rundir import RunDir
from okgit.journal.campaign import CAMPAIGN_EVENTS, CampaignStarted, ProblemFinished
from okgit.journal.events import RunFinished, RunStarted
from okgit.journal.files import Journal, read_events
from okgit.journal.runview import RunView
from okgit.views.progress import CampaignPrinter

OLDER = sorted((Path(__file__).parents[1] / "journals" / "older").glob("*.jsonl"))


@pytest.mark.parametrize("path", OLDER, ids=lambda p: p.stem)
def test_a_journal_an_older_okgit_wrote_reads_whole(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    events, _ = read_events(path)
    assert [e.type for e in events] == [line["type"] for line in lines]  # no line skipped
    view = RunView()
    view.apply(events)
    assert view.status == "unverified" and view.op == "ops/relu.py" and view.device == "cpu"
    assert [(c.cand, c.status) for c in view.candidates.values()] == [("c001", "correct"), ("c002", "incorrect")]
    run = detail(lines[0]["run"], view, live=False)
    assert (run.summary.status, run.summary.candidates, run.summary.proposer) == ("unverified", 2, "offline")
    assert [r.tag for r in run.candidates] == [f"okgit/{lines[0]['run']}/c001", None]


def test_history_is_the_runs_fold_seen_from_outside():
    events, _ = read_events(Path(__file__).parents[1] / "journals" / "gpu-optimized" / "journal.jsonl")
    view = RunView()
    view.apply(events[:-1])  # before run_finished: the search's best, and who holds the run decides
    running, stopped = detail("r", view, live=True), detail("r", view, live=False)
    assert (running.summary.status, stopped.summary.status) == ("running", "interrupted")
    assert running.summary.best_tag == view.candidates[view.best_cand].tag and running.summary.speedup == view.best.speedup
    view.fold(events[-1])
    finished = detail("r", view, live=False)
    assert isinstance(events[-1], RunFinished)
    assert (finished.summary.status, finished.summary.best_tag) == ("optimized", events[-1].best_tag)
    assert [r.status for r in finished.candidates] == [c.status for c in view.candidates.values()]


def test_a_campaign_journal_is_written_and_read_as_its_models(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl", "c1", CAMPAIGN_EVENTS)
    started = journal.write("campaign_started", kind="ops", ops=["a.py"], base="0" * 40, device="cpu",
                            backend="triton", model=None, iterations=4)
    assert isinstance(started, CampaignStarted) and started.run == "c1"
    journal.write("note", message="a note")
    journal.write("problem_finished", op="a.py", status="at_floor", reason="at its floor")
    with pytest.raises(ValueError, match="unknown journal event type 'run_started'"):
        journal.write("run_started", op="a.py")
    with pytest.raises(ValidationError):
        journal.write("problem_finished", status="matched")  # no op
    events, _ = read_events(tmp_path / "journal.jsonl", models=CAMPAIGN_EVENTS)
    assert [e.type for e in events] == ["campaign_started", "note", "problem_finished"]
    assert isinstance(events[-1], ProblemFinished) and events[-1].reason == "at its floor"
    assert read_events(tmp_path / "journal.jsonl")[0][0].type == "note"  # a run's models read only the note


def test_a_second_run_started_keeps_the_first_start():
    first = RunStarted(run="r", ts=1.0, op="ops/a.py", base="b", base_dirty=False, branch="okgit/r", worktree="w",
                       backend="triton", device="cpu", mode="fast", model=None, eval="local", iterations=3)
    view = RunView()
    view.apply([first, first.model_copy(update={"ts": 9.0, "device": "cuda"})])
    assert (view.started, view.device) == (1.0, "cpu")


def test_history_log_prints_the_runs_log_as_watch_shows_it(git_repo, monkeypatch, capsys):
    """`okgit history RUN --log`: a reader written through the models and the one fold."""
    space, tags = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    monkeypatch.chdir(git_repo)
    assert main(["history", space.run_id, "--log"]) == 0
    lines = capsys.readouterr().out.splitlines()
    view = RunView()
    view.apply(RunDir(space.run_dir).events())
    assert lines == view.log_lines() and len(lines) == len(view.log) > 3
    assert lines[0] == f"+    0s run {space.run_id} started: {OP} on cpu (triton, fast)"
    assert any(line.endswith(f"run finished: optimized 1.10x, best {tags[0]}") for line in lines)
    assert main(["history", space.run_id, "--log", "--json"]) == 0
    assert [r["text"] for r in json.loads(capsys.readouterr().out)] == [line.text for line in view.log]
    assert main(["history", "--log"]) == 2
    assert capsys.readouterr().err == "okgit: history --log takes a run: okgit history RUN --log\n"


def test_a_campaign_prints_its_own_lines_and_each_problems_run(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl", "c1", CAMPAIGN_EVENTS)
    run_events, _ = read_events(Path(__file__).parents[1] / "journals" / "cpu-failures" / "journal.jsonl")
    out = io.StringIO()
    on_event = CampaignPrinter(out)
    on_event(journal.write("campaign_started", kind="ops", ops=["ops/softmax.py"], base="0" * 40, device="cpu",
                           backend="triton", model=None, iterations=8))
    on_event(journal.write("note", message="skipped ops/draft.py: not tracked by git (commit it first)"))
    on_event(journal.write("screened", op="ops/softmax.py", timed=False, runtime_us=None, floor_us=12.5, headroom=None))
    on_event(journal.write("planned", order=["ops/softmax.py"], iterations=[8], shares=[1.0], ordered_by="work"))
    on_event(journal.write("problem_started", op="ops/softmax.py", iterations=8, time_s=None, usd=None))
    for event in run_events[:4]:
        on_event(event)
    on_event(journal.write("problem_finished", op="ops/softmax.py", status="unverified", run_id="cpu-failures"))
    lines = out.getvalue().splitlines()
    assert lines[:4] == ["okgit campaign c1: 1 problem on cpu (triton, 8 iterations per problem on average)",
                         "  skipped ops/draft.py: not tracked by git (commit it first)",
                         "  screen ops/softmax.py: untimed, floor 12.5 us", "  plan by work: ops/softmax.py 8"]
    assert lines[4].startswith("okgit run cpu-failures: ops/softmax.py on cpu (triton, fast, 8 iterations)")
    assert lines[-1] == "  problem ops/softmax.py: unverified: untimed" and len(lines) == 4 + 4 + 1


def test_a_screen_line_names_no_floor_where_none_was_measured():
    """A CPU has no device peaks: its floor is 0, and the line leaves it out rather than print 0.0 us."""
    from okgit.journal.campaign import Screened
    from okgit.views.progress import _screened

    common = {"type": "screened", "ts": 0.0, "run": "c1", "op": "ops/softmax.py", "timed": False, "runtime_us": None,
              "headroom": None}
    assert _screened(Screened(**common, floor_us=0.0)) == "  screen ops/softmax.py: untimed"
    assert _screened(Screened(**common, floor_us=12.5)) == "  screen ops/softmax.py: untimed, floor 12.5 us"
