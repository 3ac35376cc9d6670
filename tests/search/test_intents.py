"""The intent tree: insert / update / prune (subtrees too), the model's operations, attempts
ending in progress, stale or failed, selection, and the tree rebuilt from its events."""

from __future__ import annotations

from okgit.journal.events import Event, check_event
from okgit.search.intents import InsertOp, IntentTree, PruneOp, UpdateOp, parse_ops


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
    assert set(events[0]) >= {"id", "description", "parent", "priority", "status", "attempts", "best_speedup", "base"}


def test_a_failed_attempt_leaves_the_intent_alive_two_prune_it():
    t, events = tree(failed_attempts=2, patience=5)
    node = t.insert("good idea", priority=0.9)
    t.end_attempt(node.id, "failed")
    assert node.live and node.failed_in_row == 1
    t.end_attempt(node.id, "failed")
    assert node.status == "pruned" and events[-1]["op"] == "prune" and events[-1]["reason"] == "2 failed attempts in a row"


def test_progress_resets_the_streaks_and_sets_the_base():
    t, _ = tree(failed_attempts=2, patience=2)
    node = t.insert("idea")
    t.end_attempt(node.id, "failed")
    t.candidate(node.id, correct=True, speedup=1.4)
    t.end_attempt(node.id, "progress", base="c002")
    t.end_attempt(node.id, "failed")
    assert node.live and node.best_speedup == 1.4 and node.first_correct_at == 1 and node.base == "c002"


def test_stagnation_and_k_retire_an_intent():
    t, events = tree(patience=2, attempts_per_intent=10)
    node = t.insert("idea")
    t.end_attempt(node.id, "progress")
    t.end_attempt(node.id, "stale")
    assert node.live
    t.end_attempt(node.id, "failed")
    assert node.status == "done" and events[-1]["reason"].startswith("stagnated")
    t, events = tree(attempts_per_intent=2)
    node = t.insert("idea")
    t.end_attempt(node.id, "progress")
    t.end_attempt(node.id, "progress")
    assert node.status == "done" and events[-1]["reason"] == "2 attempts"


def test_prune_takes_the_subtree():
    t, events = tree()
    root = t.insert("root")
    child = t.insert("child", parent=root.id)
    grandchild = t.insert("grandchild", parent=child.id)
    other = t.insert("other")
    pruned = t.prune(root.id, "cannot pay")
    assert {n.id for n in pruned} == {root.id, child.id, grandchild.id} and other.live
    assert t.depth(grandchild.id) == 2
    assert [e["reason"] for e in events if e["op"] == "prune"][1] == "under i1: cannot pay"


def test_the_models_operations_are_validated_then_applied():
    ops = parse_ops('{"ops": [{"op": "insert", "description": "fuse it", "priority": 0.7},'
                    ' {"op": "insert", "description": "fuse it wider", "parent": "i1", "priority": "high"},'
                    ' {"op": "update", "id": "i1", "priority": 7}, {"op": "update", "id": "i1", "priority": 0.2},'
                    ' {"op": "prune", "id": "i9"}, {"op": "explode"}, 42]}')
    assert [type(o) for o in ops] == [InsertOp, InsertOp, UpdateOp, PruneOp]  # priority 7 and the rest dropped
    t, _ = tree()
    problems = t.apply(ops)
    assert t["i2"].parent == "i1" and t["i2"].priority == 0.8 and t["i1"].priority == 0.2
    assert problems == ["prune of unknown intent i9"]
    assert parse_ops('[{"description": "split K", "priority": 0.7}, "tile it", "x"]') == [
        InsertOp(op="insert", description="split K", priority=0.7), InsertOp(op="insert", description="tile it")]
    assert parse_ops("nothing") is None and parse_ops("[1, 2]") is None


def test_selection_prefers_priority_but_explores_untried_ideas():
    t, events = tree(exploration=0.3)
    hot = t.insert("hot", priority=0.6)
    cold = t.insert("cold", priority=0.5)
    assert t.select() is hot and hot.status == "active"
    assert t.select(exclude=(hot.id,)) is cold
    for _ in range(3):
        hot.attempts += 1  # tried often without change in priority: the untried idea's bonus wins
    assert t.select() is cold
    t.prune(cold.id, "test")
    t.prune(hot.id, "test")
    assert t.select() is None


def test_the_tree_is_rebuilt_from_its_events():
    events: list[Event] = []
    t = IntentTree(lambda **f: events.append(check_event({"type": "intent", "ts": 1.0, "run": "r", **f})))
    a = t.insert("idea")
    t.insert("child", parent=a.id)
    t.select()
    t.candidate(a.id, correct=True, speedup=1.3)
    t.end_attempt(a.id, "progress", base="c001")
    again = IntentTree.from_events(events)
    assert again["i1"].base == "c001" and again["i1"].status == "open" and again["i2"].parent == "i1"
    assert again.summary() == t.summary().replace("[active", "[open")
