"""The middle loop: an intent tree deciding what to try next.

An intent is one optimization idea ("fuse the epilogue", "one program per row"). Intents come
from the model (intents prompt), from the skill library, or from built-in seeds, and may hang
under a parent intent they refine. Each evaluated candidate updates its intent:

- a correct candidate that improves raises the intent's priority; one that does not improve
  lowers it, and `patience` of those in a row retire it (stagnation: switch to another);
- a buggy candidate lowers the priority only a little and keeps the intent alive for a
  retry with the error in the prompt (a bad implementation of a good idea is not a bad
  idea), until `max_buggy` failures in a row prune it;
- `max_attempts` candidates retire an intent whatever they did.

Selection is by priority plus an exploration bonus for little-tried intents (UCB-like).
Every operation is logged as an `intent` journal event.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Literal

from pydantic import BaseModel

from okgit.eval.types import EvalResult
from okgit.search.extract import extract_json

IntentStatus = Literal["open", "active", "done", "pruned"]
IntentOrigin = Literal["model", "skill", "seed"]
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
    attempts: int = 0
    correct: int = 0
    improved: int = 0  # correct candidates that improved on what came before
    buggy_in_row: int = 0
    stale_in_row: int = 0  # correct candidates in a row that did not improve
    best_speedup: float | None = None
    first_correct_at: int | None = None  # its attempt count at its first correct candidate
    profile: str = ""  # profiler summary of its best candidate
    origin: IntentOrigin = "model"

    @property
    def live(self) -> bool:
        return self.status in LIVE


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


class IntentTree:
    def __init__(
        self,
        log: Callable[..., Any] = lambda **fields: None,
        *,
        max_attempts: int = 4,
        max_buggy: int = 3,
        patience: int = 2,
        exploration: float = 0.3,
    ) -> None:
        self.log = log  # receives the fields of one `intent` event
        self.max_attempts = max_attempts
        self.max_buggy = max_buggy
        self.patience = patience
        self.exploration = exploration
        self.nodes: dict[str, Intent] = {}

    def __getitem__(self, intent_id: str) -> Intent:
        return self.nodes[intent_id]

    def live(self) -> list[Intent]:
        return [n for n in self.nodes.values() if n.live]

    def _emit(self, op: str, node: Intent, **extra: Any) -> None:
        self.log(
            op=op, id=node.id, description=node.description, parent=node.parent, priority=round(node.priority, 3),
            status=node.status, attempts=node.attempts, best_speedup=node.best_speedup, **extra,
        )

    def insert(self, description: str, *, parent: str | None = None, priority: float = 0.5, origin: IntentOrigin = "model") -> Intent | None:
        """Add an intent; None when the same idea is already in the tree (in any status)."""
        description = " ".join(description.split())
        if not description or any(_norm(n.description) == _norm(description) for n in self.nodes.values()):
            return None
        node = Intent(
            id=f"i{len(self.nodes) + 1}", description=description, parent=parent if parent in self.nodes else None,
            priority=min(max(float(priority), 0.0), 1.0), origin=origin,
        )
        self.nodes[node.id] = node
        self._emit("insert", node, origin=origin)
        return node

    def update(self, intent_id: str, **changes: Any) -> Intent:
        node = self.nodes[intent_id]
        for key, value in changes.items():
            setattr(node, key, value)
        node.priority = min(max(node.priority, 0.0), 1.0)
        self._emit("update", node)
        return node

    def prune(self, intent_id: str, reason: str) -> Intent:
        node = self.nodes[intent_id]
        node.status = "pruned"
        self._emit("prune", node, reason=reason)
        return node

    def select(self) -> Intent | None:
        """The live intent with the highest priority plus exploration bonus; None when none is live."""
        live = self.live()
        if not live:
            return None
        total = sum(n.attempts for n in self.nodes.values())
        # Highest score wins; ties go to the older intent (the order the planner ranked them).
        best = max(live, key=lambda n: (n.priority + self.exploration * math.sqrt(math.log(total + 1) / (n.attempts + 1)), -int(n.id[1:])))
        if best.status == "open":
            self.update(best.id, status="active")
        return best

    def record(self, intent_id: str, result: EvalResult | None, improved: bool, profile: str = "") -> Intent:
        """Account one candidate of an intent. `result` None: the reply gave nothing to evaluate."""
        node = self.nodes[intent_id]
        node.attempts += 1
        if result is not None and result.correct:
            node.correct += 1
            node.buggy_in_row = 0
            if node.first_correct_at is None:
                node.first_correct_at = node.attempts
            if result.timed and result.speedup is not None and result.speedup > (node.best_speedup or 0.0):
                node.best_speedup = result.speedup
                node.profile = profile or node.profile
            if improved:
                node.improved += 1
                node.stale_in_row = 0
                node.priority += 0.2
            else:
                node.stale_in_row += 1
                node.priority *= 0.7
        else:
            node.buggy_in_row += 1
            node.priority *= 0.9
        if node.buggy_in_row >= self.max_buggy:
            return self.prune(intent_id, f"{node.buggy_in_row} failed implementations in a row")
        if node.stale_in_row >= self.patience:
            return self.update(intent_id, status="done")
        if node.attempts >= self.max_attempts:
            return self.update(intent_id, status="done")
        return self.update(intent_id)

    def summary(self) -> str:
        """The tried intents and their outcomes, for prompts."""
        lines = []
        for n in self.nodes.values():
            if n.attempts == 0 and n.live:
                continue
            speed = f", best {n.best_speedup:.2f}x" if n.best_speedup else ""
            lines.append(f"- [{n.status}] {n.description}: {n.attempts} tried, {n.correct} correct{speed}")
        return "\n".join(lines)


def parse_intents(text: str) -> list[tuple[str, float]] | None:
    """(description, priority) pairs from an intents reply; None when it holds no list of ideas."""
    value = extract_json(text)
    if isinstance(value, dict):  # {"intents": [...]}
        value = next((v for v in value.values() if isinstance(v, list)), None)
    if not isinstance(value, list):
        return None
    out = []
    for item in value:
        if isinstance(item, str):
            out.append((item, 0.5))
        elif isinstance(item, dict) and isinstance(item.get("description"), str):
            try:
                priority = float(item.get("priority", 0.5))
            except (TypeError, ValueError):
                priority = 0.5
            out.append((item["description"], priority))
    return out or None
