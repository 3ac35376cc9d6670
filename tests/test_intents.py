"""The intent tree: insert / update / prune, priorities, retries of buggy ideas, selection."""

from __future__ import annotations

from okgit.eval.types import EvalResult, Status
from okgit.search.intents import IntentTree, parse_intents

CORRECT = EvalResult(status=Status.correct, correct=True, timed=True, speedup=1.4)
BUGGY = EvalResult(status=Status.compile_error)


def tree(**options):
    events = []
    return IntentTree(lambda **f: events.append(f), **options), events


def test_insert_deduplicates_and_links_parents():
    t, events = tree()
    a = t.insert("Fuse the epilogue", priority=0.8)
    assert t.insert("fuse  the EPILOGUE!", priority=0.1) is None
    b = t.insert("fuse epilogue with a wider block", parent=a.id)
    orphan = t.insert("split-K", parent="i99")
    assert (b.parent, orphan.parent) == ("i1", None)
    assert [e["op"] for e in events] == ["insert"] * 3
    assert set(events[0]) >= {"id", "description", "parent", "priority", "status", "attempts", "best_speedup"}


def test_buggy_implementations_keep_the_intent_alive_until_max_buggy():
    t, events = tree(max_buggy=3)
    node = t.insert("good idea", priority=0.9)
    t.record(node.id, BUGGY, improved=False)
    t.record(node.id, None, improved=False)  # a reply with no code counts the same
    assert node.live and node.priority < 0.9 and node.attempts == 2
    t.record(node.id, BUGGY, improved=False)
    assert node.status == "pruned" and events[-1]["op"] == "prune"


def test_a_correct_candidate_resets_the_buggy_streak_and_raises_priority():
    t, _ = tree(max_buggy=2)
    node = t.insert("idea", priority=0.5)
    t.record(node.id, BUGGY, improved=False)
    t.record(node.id, CORRECT, improved=True)
    t.record(node.id, BUGGY, improved=False)
    assert node.live and node.best_speedup == 1.4 and node.first_correct_at == 2
    assert node.priority > 0.5 * 0.9


def test_stagnation_retires_an_intent():
    t, _ = tree(patience=2, max_attempts=10)
    node = t.insert("idea")
    t.record(node.id, CORRECT, improved=True)
    t.record(node.id, CORRECT, improved=False)
    assert node.live
    t.record(node.id, CORRECT, improved=False)
    assert node.status == "done"


def test_attempt_cap_retires_an_intent():
    t, _ = tree(max_attempts=2, max_buggy=5)
    node = t.insert("idea")
    t.record(node.id, BUGGY, improved=False)
    t.record(node.id, BUGGY, improved=False)
    assert node.status == "done"


def test_selection_prefers_priority_but_explores_untried_ideas():
    t, events = tree(exploration=0.3)
    hot = t.insert("hot", priority=0.6)
    cold = t.insert("cold", priority=0.5)
    assert t.select() is hot and hot.status == "active"
    for _ in range(3):
        hot.attempts += 1  # tried often without change in priority: the untried idea's bonus wins
    assert t.select() is cold
    t.prune(cold.id, "test")
    t.prune(hot.id, "test")
    assert t.select() is None
    assert [e["op"] for e in events].count("prune") == 2


def test_summary_lists_tried_intents():
    t, _ = tree()
    node = t.insert("idea")
    t.insert("untried")
    t.record(node.id, CORRECT, improved=True)
    assert t.summary() == "- [open] idea: 1 tried, 1 correct, best 1.40x"


def test_parse_intents_forms():
    assert parse_intents('[{"description": "a", "priority": 0.7}, {"description": "b", "priority": "high"}]') == [("a", 0.7), ("b", 0.5)]
    assert parse_intents('{"intents": ["x", "y"]}') == [("x", 0.5), ("y", 0.5)]
    assert parse_intents("nothing") is None
    assert parse_intents("[1, 2]") is None
