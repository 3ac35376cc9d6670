"""The watch view's model and sources, without a terminal."""

from __future__ import annotations

import json
from pathlib import Path

from okgit.journal.events import parse_event
from okgit.journal.files import read_events, read_jsonl
from okgit.journal.runview import RUNNING, RunView
from okgit.tui.sources import Sources, Tail

JOURNALS = Path(__file__).parents[1] / "journals"


def folded(run: str) -> RunView:
    view = RunView()
    view.apply(read_events(JOURNALS / run / "journal.jsonl")[0])
    return view


def test_finished_gpu_run_folds_into_its_numbers():
    view = folded("gpu-optimized")
    assert (view.run, view.device, view.backend, view.model, view.iterations) == ("gpu-optimized", "cuda", "triton", "openai/gpt-4o", 6)
    assert view.status == "optimized" and view.winner == "c005" and view.timed
    assert view.evaluated == 6
    assert [c.status for c in view.candidates.values()] == ["correct", "compile_error", "correct", "incorrect", "correct", "rejected"]
    assert view.candidates["c005"].tag == "okgit/gpu-optimized/c005"
    assert view.candidates["c001"].diagnosis.recommendation == "online softmax: one read of x"
    assert view.progress() == [1.5, 1.5, 2.1, 2.1, 2.3, 2.3]
    assert view.best_speedup() == 2.3
    assert view.cost_usd == 0.03  # run_finished's total
    assert view.intents["i1"].status == "done" and view.intents["i1"].best_speedup == 2.1
    assert view.intents["i1"].description == "fuse the row softmax into one kernel"  # an update keeps the rest
    assert view.intents["i3"].status == "pruned"
    assert view.elapsed(now=1e12) == view.last_ts - view.started  # a finished run's clock stops


def test_untimed_cpu_run_counts_correct_candidates():
    view = folded("cpu-failures")
    assert not view.timed and view.status == "unverified"
    assert view.progress() == [1, 1, 1, 1, 2, 2]
    assert view.best_speedup() is None
    assert sorted(c.cand for c in view.candidates.values() if c.failed) == ["c002", "c003", "c004", "c006"]


def test_a_proposal_without_its_result_is_running_and_the_run_too():
    events = read_events(JOURNALS / "gpu-optimized" / "journal.jsonl")[0]
    view = RunView()
    view.apply(events[: next(i for i, e in enumerate(events) if e.type == "evaluated")])
    assert view.candidates["c001"].status == RUNNING and not view.candidates["c001"].failed
    assert view.status == RUNNING and view.evaluated == 0 and view.progress() == []
    assert view.elapsed(now=view.started + 90) == 90


def test_unknown_events_and_lines_missing_fields_are_skipped(tmp_path):
    lines = [{"type": "from_the_future", "ts": 1.0, "run": "r"}, {"type": "evaluated", "ts": 2.0, "run": "r", "cand": "c001"},
             {"type": "note", "ts": 3.0, "run": "r", "message": "kept"}]
    assert [parse_event(line) is None for line in lines] == [True, True, False]
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    view = RunView()
    view.apply(read_events(tmp_path / "journal.jsonl")[0])
    assert not view.candidates and [line.text for line in view.log] == ["kept"] and view.version == 1


def test_tail_ignores_a_half_written_line_until_it_is_complete(tmp_path):
    path = tmp_path / "journal.jsonl"
    tail = Tail(path)
    assert tail.poll() == []  # no file yet
    whole = json.dumps({"type": "note", "ts": 1.0, "run": "r", "message": "one"})
    half = json.dumps({"type": "note", "ts": 2.0, "run": "r", "message": "two"})
    path.write_text(whole + "\n" + half[:10])
    assert [e.message for e in tail.poll()] == ["one"]
    with open(path, "a") as f:
        f.write(half[10:] + "\n")
    assert [e.message for e in tail.poll()] == ["two"]


def test_diff_against_the_base_and_without_it(tmp_path):
    sources = Sources(JOURNALS / "gpu-optimized" / "traces.jsonl")
    assert sources.poll()
    diff = sources.diff("c005")
    assert diff.startswith("--- a/ops/softmax.py\n+++ b/ops/softmax.py (c005)\n")
    assert "-        return torch.softmax(x, dim=-1)\n" in diff and "+@triton.jit\n" in diff
    assert sources.diff("c999").startswith("# no source for c999")

    # An older run: no `reference` record in traces. The candidate is shown whole.
    records = [r for r in read_jsonl(JOURNALS / "gpu-optimized" / "traces.jsonl")[0] if r["type"] != "reference"]
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    old = Sources(tmp_path / "traces.jsonl")
    old.poll()
    assert old.diff("c005").startswith("# traces.jsonl holds no base source; c005 in full:\nimport triton")
