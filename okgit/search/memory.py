"""The outer loop: a skill library of strategies that later runs retrieve for similar problems.

A strategy is a reusable idea ("fused epilogue") with its history across runs: attempts,
correct candidates, best speedup, attempts needed to reach a correct candidate, the problems
it was tried on, and one-line lessons. Strategies on the Pareto frontier of (speedup,
correctness rate, iterations to converge) rank first. At the end of a run a reflection step
(the reflection prompt, or a deterministic summary without a model) turns the run's intents
into strategy updates. The library is one JSON file: Config.skills_path, else
$OKGIT_DATA_DIR/skills.json, else $XDG_DATA_HOME/okgit/skills.json (okgit.paths.skills_path).
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from okgit.eval.types import Reference
from okgit.llm import prompt_messages
from okgit.problem import Problem
from okgit.search.critic import Ask
from okgit.search.extract import extract_json
from okgit.search.intents import IntentTree

MAX_STRATEGIES = 200
MAX_PROBLEMS = 10  # problem signatures kept per strategy
MAX_LESSONS = 5


class Signature(BaseModel):
    """What makes two problems alike: the ops they call, the bottleneck, the size, the backend."""

    ops: list[str] = Field(default_factory=list)
    bottleneck: str = "unknown"
    log2_size: float = 0.0
    backend: str = "triton"


# Calls that say nothing about the computation.
_NOISE = {"super", "__init__", "forward", "size", "shape", "view", "reshape", "contiguous", "to", "float", "half", "int",
          "len", "range", "print", "isinstance", "tuple", "list", "dict", "parameter", "module", "modulelist"}


def signature(problem: Problem, reference: Reference | None, backend: str) -> Signature:
    """The problem's signature, read from its source: calls made inside the Model class.

    A torch.fx trace would name ops more exactly but means importing and running the user's
    module in the orchestrator, which okgit keeps out of its own process.
    """
    ops: set[str] = set()
    try:
        tree = ast.parse(problem.source)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in ("Model", "ModelNew")):
        # `self.lin(x)` calls the submodule whose construction (nn.Linear) already names the op.
        members = {t.attr for n in ast.walk(cls) if isinstance(n, ast.Assign) for t in n.targets
                   if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
        for node in ast.walk(cls):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" and func.attr in members:
                    continue
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if name and name.lower() not in _NOISE:
                    ops.add(name.lower())
    sizes = [v for v in problem.knobs.values() if v > 0]
    profile = reference.profile if reference else None
    return Signature(
        ops=sorted(ops),
        bottleneck=profile.bottleneck_type if profile else "unknown",
        log2_size=round(math.log2(math.prod(sizes)), 2) if sizes else 0.0,
        backend=backend,
    )


def similarity(a: Signature, b: Signature) -> float:
    """In [0, 1]: mostly shared ops, then bottleneck, size and backend."""
    union = set(a.ops) | set(b.ops)
    ops = len(set(a.ops) & set(b.ops)) / len(union) if union else 0.0
    bottleneck = 1.0 if a.bottleneck == b.bottleneck != "unknown" else 0.0
    size = max(0.0, 1.0 - abs(a.log2_size - b.log2_size) / 10)
    return 0.6 * ops + 0.2 * bottleneck + 0.1 * size + 0.1 * (a.backend == b.backend)


class Strategy(BaseModel):
    name: str
    description: str  # an intent that carried it, as an example to start from
    lessons: list[str] = Field(default_factory=list)
    runs: int = 0
    attempts: int = 0
    correct: int = 0
    improved: int = 0  # runs in which it produced an improvement
    best_speedup: float | None = None
    converge: list[int] = Field(default_factory=list)  # attempts to the first correct candidate, per run
    problems: list[Signature] = Field(default_factory=list)

    @property
    def correct_rate(self) -> float:
        return self.correct / self.attempts if self.attempts else 0.0

    @property
    def iterations(self) -> float:
        return sum(self.converge) / len(self.converge) if self.converge else math.inf

    def objectives(self) -> tuple[float, float, float]:
        """Bigger is better in each: speedup (1.0 when correct but never timed), correctness, -iterations."""
        speed = self.best_speedup or (1.0 if self.correct else 0.0)
        return speed, self.correct_rate, -self.iterations

    def text(self) -> str:
        speed = f", best {self.best_speedup:.2f}x" if self.best_speedup else ""
        lesson = f"; {self.lessons[-1]}" if self.lessons else ""
        return f"- {self.name} ({self.runs} runs, {self.correct_rate:.0%} correct{speed}): {self.description}{lesson}"


class Outcome(BaseModel):
    """One intent of a finished run, as the library records it."""

    strategy: str
    description: str
    lesson: str = ""
    attempts: int
    correct: int
    improved: bool
    best_speedup: float | None = None
    first_correct_at: int | None = None


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _same(a: str, b: str) -> bool:
    ta, tb = _tokens(a), _tokens(b)
    return bool(ta and tb) and len(ta & tb) / len(ta | tb) >= 0.7


class SkillLibrary:
    def __init__(self, path: Path, strategies: list[Strategy] | None = None, load_error: str | None = None) -> None:
        self.path = Path(path)
        self.strategies = strategies or []
        self.load_error = load_error  # a damaged file is set aside, not fatal: a run needs no memory

    @classmethod
    def load(cls, path: Path) -> SkillLibrary:
        path = Path(path)
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(path, [Strategy.model_validate(s) for s in data.get("strategies", [])])
        except (OSError, ValueError, AttributeError, ValidationError) as e:
            return cls(path, load_error=f"{path}: unreadable skill library ({type(e).__name__}); starting empty")

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        front = {id(s) for s in self.pareto()}
        if len(self.strategies) > MAX_STRATEGIES:  # drop dominated strategies first, the least tried first
            keep = sorted(self.strategies, key=lambda s: (id(s) in front, s.runs, s.attempts), reverse=True)
            self.strategies = keep[:MAX_STRATEGIES]
        data = {"version": 1, "strategies": [s.model_dump(mode="json") for s in self.strategies]}
        text = json.dumps(data, indent=1)
        # Write then rename: a crash or a concurrent run never leaves half a file.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".skills-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, self.path)

    def pareto(self) -> list[Strategy]:
        """Strategies no other strategy beats or equals in every objective while beating in one."""
        tried = [s for s in self.strategies if s.attempts]
        objs = {id(s): s.objectives() for s in tried}

        def dominated(s: Strategy) -> bool:
            a = objs[id(s)]
            return any(all(x >= y for x, y in zip(objs[id(t)], a, strict=True)) and objs[id(t)] != a for t in tried)

        return [s for s in tried if not dominated(s)]

    def retrieve(self, sig: Signature, k: int = 3) -> list[tuple[Strategy, float]]:
        """The k strategies most worth seeding a problem with, and their scores in [0, 1]."""
        front = {id(s) for s in self.pareto()}
        scored = []
        for s in self.strategies:
            if not s.correct:
                continue  # a strategy that never produced a correct candidate seeds nothing
            alike = max((similarity(sig, p) for p in s.problems), default=0.0)
            score = 0.7 * alike + 0.2 * (id(s) in front) + 0.1 * s.correct_rate
            scored.append((score, s))
        scored.sort(key=lambda x: x[0], reverse=True)
        return [(s, round(score, 3)) for score, s in scored[:k]]

    def find(self, name: str) -> Strategy | None:
        return next((s for s in self.strategies if _same(s.name, name)), None)

    def record(self, sig: Signature, outcomes: list[Outcome]) -> list[Strategy]:
        touched = []
        for o in outcomes:
            s = self.find(o.strategy)
            if s is None:
                s = Strategy(name=o.strategy, description=o.description)
                self.strategies.append(s)
            s.runs += 1
            s.attempts += o.attempts
            s.correct += o.correct
            s.improved += int(o.improved)
            if o.best_speedup and o.best_speedup > (s.best_speedup or 0.0):
                s.best_speedup = o.best_speedup
                s.description = o.description  # the intent that did best is the best example
            if o.first_correct_at is not None:
                s.converge.append(o.first_correct_at)
            if o.lesson:
                s.lessons = (s.lessons + [o.lesson])[-MAX_LESSONS:]
            s.problems = (s.problems + [sig])[-MAX_PROBLEMS:]
            touched.append(s)
        return touched


def reflect(ask: Ask | None, tree: IntentTree, problem_summary: str) -> list[Outcome]:
    """The run's tried intents as library outcomes; the model, when there is one, names the
    strategies and writes the lessons, else each intent stands as its own strategy."""
    tried = [n for n in tree.nodes.values() if n.attempts]
    outcomes = {
        n.id: Outcome(
            strategy=n.description[:80], description=n.description, attempts=n.attempts, correct=n.correct,
            improved=n.improved > 0, best_speedup=n.best_speedup,
            first_correct_at=n.first_correct_at,
            lesson=f"{n.correct}/{n.attempts} correct" + (f", best {n.best_speedup:.2f}x" if n.best_speedup else "") + f", ended {n.status}",
        )
        for n in tried
    }
    if ask is None or not outcomes:
        return list(outcomes.values())
    lines = [
        f"- {n.id}: {n.description} | {n.attempts} tried, {n.correct} correct, status {n.status}"
        + (f", best {n.best_speedup:.2f}x" if n.best_speedup else "") + (f" | profile: {n.profile}" if n.profile else "")
        for n in tried
    ]
    messages = prompt_messages("reflection.v1", problem_summary=problem_summary, outcomes="\n".join(lines))
    _, items = ask("reflection", messages, None, _parse_reflection)
    for item in items or []:
        o = outcomes.get(str(item.get("intent", "")))
        if o is not None:
            o.strategy = str(item.get("strategy") or o.strategy)[:80]
            o.lesson = str(item.get("lesson") or o.lesson)[:300]
    return list(outcomes.values())


def _parse_reflection(text: str) -> list[dict] | None:
    value = extract_json(text)
    items = [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
    return items or None
