"""The middle loop: a tree of intents deciding what to try next, driven by the model.

An intent is one optimization idea ("fuse the epilogue", "one program per row"). Intents come
from the model (the planning prompt), from the skill library or from built-in seeds; a child
refines its parent ("the fused kernel, with split-K"). The model changes the tree through a
small structured format (`TreeOp`: insert, update, prune), validated before anything is
applied; a prune takes the whole subtree. Fixed arithmetic on priorities is only the fallback
when the model's reply is unusable.

Each intent is worked on in *attempts* (okgit.search.refine: one implementation and its
repairs). How an attempt ends decides the intent's fate:

- progress (correct and faster than the intent's own best so far; on an untimed device, its
  first correct version): the candidate becomes the intent's base, even when it is not the
  run's best;
- stale (correct, no faster) or failed (the repair budgets ran out): `patience` of those in a
  row retire the intent (stagnation: the search switches to another); `failed_attempts` failed
  ones in a row prune it; a single failed attempt leaves it alive for a retry;
- `attempts_per_intent` attempts (K) retire it whatever they did.

Selection is by priority plus an exploration bonus for little-tried intents (UCB-like).
Every operation is logged as an `intent` journal event carrying the node's full state, so a
resumed run rebuilds the tree from its journal (`IntentTree.from_events`).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from okgit.journal.events import Event, IntentEvent
from okgit.search.extract import extract_json

IntentStatus = Literal["open", "active", "done", "pruned"]
IntentOrigin = Literal["model", "skill", "seed"]
AttemptEnd = Literal["progress", "stale", "failed"]
LIVE = ("open", "active")

SEEDS = {
    "triton": [
        ("Write the whole forward pass as one fused Triton kernel with autotuned block sizes", 0.6),
        ("Keep a vendor library call for the heaviest op and fuse every op around it into one Triton kernel", 0.5),
        ("Cut memory traffic: one pass over the data with coalesced, vectorized loads and stores", 0.4),
    ],
    "cuda": [
        ("Write the whole forward pass as one fused CUDA kernel with a tuned block size", 0.6),
        ("Keep a vendor library call for the heaviest op and fuse every op around it into one CUDA kernel", 0.5),
        ("Cut memory traffic: one pass over the data with coalesced, vectorized (float4) loads and stores", 0.4),
    ],
}


class Intent(BaseModel):
    id: str
    description: str
    parent: str | None = None
    priority: float = 0.5
    status: IntentStatus = "open"
    origin: IntentOrigin = "model"
    candidates: int = 0  # model replies spent on it: evaluated candidates and unusable replies
    attempts: int = 0  # attempts ended (each an implementation and its repairs)
    correct: int = 0  # correct candidates
    improved: int = 0  # attempts that made progress
    failed_in_row: int = 0
    stale_in_row: int = 0  # attempts in a row without progress (failed or no faster)
    best_speedup: float | None = None
    base: str | None = None  # the candidate its next attempt starts from: its best version
    first_correct_at: int | None = None  # its candidate count at its first correct candidate
    profile: str = ""  # the critic's view of its best candidate

    @property
    def live(self) -> bool:
        return self.status in LIVE


# ---- the model's operations on the tree ----------------------------------------------------


class InsertOp(BaseModel):
    op: Literal["insert"]
    description: str = Field(min_length=3, max_length=400)
    parent: str | None = None
    priority: float = Field(default=0.5, ge=0, le=1)


class UpdateOp(BaseModel):
    op: Literal["update"]
    id: str
    priority: float = Field(ge=0, le=1)


class PruneOp(BaseModel):
    op: Literal["prune"]
    id: str
    reason: str = "pruned by the model"


TreeOp = Union[InsertOp, UpdateOp, PruneOp]
_OPS: TypeAdapter[list[TreeOp]] = TypeAdapter(list[Union[InsertOp, UpdateOp, PruneOp]])


def parse_ops(text: str) -> list[TreeOp] | None:
    """The operations in a planning reply; None when it holds none that validate.

    Accepted: a list of ops, {"ops": [...]}, or the plain intent list of the first version of
    the planning prompt ([{"description", "priority"}] or strings), read as inserts. Items
    that do not validate are dropped one by one; a reply with nothing valid is unusable.
    """
    value = extract_json(text)
    if isinstance(value, dict):
        value = value.get("ops", next((v for v in value.values() if isinstance(v, list)), None))
    if not isinstance(value, list):
        return None
    ops: list[TreeOp] = []
    for item in value:
        if isinstance(item, str):
            item = {"op": "insert", "description": item}
        elif isinstance(item, dict) and "op" not in item and "description" in item:
            item = {"op": "insert", **item}
        if isinstance(item, dict) and isinstance(item.get("priority"), str):
            item = {**item, "priority": _WORDS.get(item["priority"].strip().lower(), 0.5)}
        try:
            ops.extend(_OPS.validate_python([item]))
        except ValidationError:
            continue
    return ops or None


_WORDS = {"high": 0.8, "medium": 0.5, "low": 0.2}


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


class IntentTree:
    def __init__(
        self,
        log: Callable[..., Any] = lambda **fields: None,
        *,
        attempts_per_intent: int = 5,
        failed_attempts: int = 2,
        patience: int = 2,
        exploration: float = 0.3,
    ) -> None:
        self.log = log  # receives the fields of one `intent` event
        self.attempts_per_intent = attempts_per_intent
        self.failed_attempts = failed_attempts
        self.patience = patience
        self.exploration = exploration
        self.nodes: dict[str, Intent] = {}

    def __getitem__(self, intent_id: str) -> Intent:
        return self.nodes[intent_id]

    def live(self) -> list[Intent]:
        return [n for n in self.nodes.values() if n.live]

    def children(self, intent_id: str) -> list[Intent]:
        return [n for n in self.nodes.values() if n.parent == intent_id]

    def depth(self, intent_id: str) -> int:
        node, depth = self.nodes[intent_id], 0
        while node.parent is not None:
            node, depth = self.nodes[node.parent], depth + 1
        return depth

    def _emit(self, op: str, node: Intent, **extra: Any) -> None:
        fields = node.model_dump()
        fields["priority"] = round(node.priority, 3)
        self.log(op=op, **fields, **extra)

    def insert(self, description: str, *, parent: str | None = None, priority: float = 0.5,
               origin: IntentOrigin = "model") -> Intent | None:
        """Add an intent; None when the same idea is already in the tree (in any status)."""
        description = " ".join(description.split())
        if not description or any(_norm(n.description) == _norm(description) for n in self.nodes.values()):
            return None
        node = Intent(
            id=f"i{len(self.nodes) + 1}", description=description, parent=parent if parent in self.nodes else None,
            priority=min(max(float(priority), 0.0), 1.0), origin=origin,
        )
        self.nodes[node.id] = node
        self._emit("insert", node)
        return node

    def update(self, intent_id: str, reason: str | None = None, **changes: Any) -> Intent:
        node = self.nodes[intent_id]
        for key, value in changes.items():
            setattr(node, key, value)
        node.priority = min(max(node.priority, 0.0), 1.0)
        self._emit("update", node, **({"reason": reason} if reason else {}))
        return node

    def prune(self, intent_id: str, reason: str) -> list[Intent]:
        """Prune an intent and every live intent under it; the nodes pruned."""
        pruned = []
        stack = [intent_id]
        while stack:
            node = self.nodes[stack.pop()]
            stack += [c.id for c in self.children(node.id)]
            if node.live:
                node.status = "pruned"
                self._emit("prune", node, reason=reason if node.id == intent_id else f"under {intent_id}: {reason}")
                pruned.append(node)
        return pruned

    def apply(self, ops: list[TreeOp], origin: IntentOrigin = "model") -> list[str]:
        """Apply the model's operations; a line for each one that could not be applied."""
        problems = []
        for op in ops:
            if isinstance(op, InsertOp):
                if op.parent is not None and op.parent not in self.nodes:
                    problems.append(f"insert under unknown intent {op.parent}")
                elif self.insert(op.description, parent=op.parent, priority=op.priority, origin=origin) is None:
                    problems.append(f"insert of an idea already in the tree: {op.description[:60]}")
            elif op.id not in self.nodes:
                problems.append(f"{op.op} of unknown intent {op.id}")
            elif not self.nodes[op.id].live:
                problems.append(f"{op.op} of {op.id}, which is already {self.nodes[op.id].status}")
            elif isinstance(op, UpdateOp):
                self.update(op.id, priority=op.priority)
            else:
                self.prune(op.id, op.reason)
        return problems

    def fallback(self, ended: Intent) -> None:
        """Without a usable model reply: an ended intent's live descendants rise when it made
        progress and sink when it did not (fixed arithmetic)."""
        factor = 1.25 if ended.improved else 0.7
        stack = [c.id for c in self.children(ended.id)]
        while stack:
            node = self.nodes[stack.pop()]
            stack += [c.id for c in self.children(node.id)]
            if node.live:
                self.update(node.id, priority=node.priority * factor)

    def select(self, exclude: tuple[str, ...] = ()) -> Intent | None:
        """The live intent with the highest priority plus exploration bonus; None when none is live."""
        live = [n for n in self.live() if n.id not in exclude]
        if not live:
            return None
        total = sum(n.attempts for n in self.nodes.values())
        # Highest score wins; ties go to the older intent (the order the planner ranked them).
        best = max(live, key=lambda n: (n.priority + self.exploration * math.sqrt(math.log(total + 1) / (n.attempts + 1)),
                                        -int(n.id[1:])))
        if best.status == "open":
            self.update(best.id, status="active")
        return best

    def candidate(self, intent_id: str, correct: bool, speedup: float | None = None) -> None:
        """Account one model reply spent on an intent (evaluated or not)."""
        node = self.nodes[intent_id]
        node.candidates += 1
        if correct:
            node.correct += 1
            if node.first_correct_at is None:
                node.first_correct_at = node.candidates
            if speedup is not None and speedup > (node.best_speedup or 0.0):
                node.best_speedup = speedup

    def end_attempt(self, intent_id: str, end: AttemptEnd, *, base: str | None = None, profile: str = "") -> Intent:
        """An attempt of the intent ended; retire or prune it by the rules above."""
        node = self.nodes[intent_id]
        node.attempts += 1
        if end == "progress":
            node.improved += 1
            node.stale_in_row = node.failed_in_row = 0
            node.base = base or node.base
            node.profile = profile or node.profile
        else:
            node.stale_in_row += 1
            node.failed_in_row = node.failed_in_row + 1 if end == "failed" else 0
        if node.failed_in_row >= self.failed_attempts:
            self.prune(intent_id, f"{node.failed_in_row} failed attempts in a row")
        elif node.stale_in_row >= self.patience:
            self.update(intent_id, status="done", reason=f"stagnated: {node.stale_in_row} attempts without progress")
        elif node.attempts >= self.attempts_per_intent:
            self.update(intent_id, status="done", reason=f"{node.attempts} attempts")
        else:
            self.update(intent_id)
        return node

    def summary(self) -> str:
        """The tree for prompts: every intent under its parent, with ids and outcomes."""
        lines = []

        def add(parent: str | None, indent: int) -> None:
            for n in (n for n in self.nodes.values() if n.parent == parent):
                speed = f", best {n.best_speedup:.2f}x" if n.best_speedup else ""
                lines.append(f"{'  ' * indent}- {n.id} [{n.status}, priority {n.priority:.2f}] {n.description}: "
                             f"{n.attempts} attempts, {n.candidates} candidates, {n.correct} correct{speed}")
                add(n.id, indent + 1)

        add(None, 0)
        return "\n".join(lines)

    @classmethod
    def from_events(cls, events: list[Event], **options: Any) -> IntentTree:
        """The tree as a run's `intent` events left it (for --resume)."""
        tree = cls(**options)
        fields = set(Intent.model_fields)
        for e in events:
            if isinstance(e, IntentEvent) and e.id:
                tree.nodes[e.id] = Intent.model_validate(e.model_dump(include=fields & e.model_fields_set))
        for node in tree.nodes.values():
            if node.status == "active":  # it was being worked on when the run stopped: open again
                node.status = "open"
        return tree
