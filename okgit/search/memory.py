"""The outer loop: a skill library of strategies that later runs retrieve for similar problems.

A strategy is a reusable idea ("fused epilogue") with its history across runs: attempts,
correct candidates, best speedup, attempts needed to reach a correct candidate, one-line
lessons, and evidence: per run, the problem's signature, the backend, the hardware, the
speedup reached and optionally the winning code (a template for the next run). Strategies on
the Pareto frontier of (speedup, correctness rate, iterations to converge) rank first; a
strategy dominated after `PRUNE_AFTER_RUNS` runs is pruned. At the end of a run a reflection
step (the reflection prompt, or a deterministic summary without a model) turns the run's
intents into strategy updates, and the model may breed new strategies from the frontier
(mutation of one, crossover of two) that later runs retrieve before anyone has tried them.
Retrieval needs a problem at least `SIMILARITY_THRESHOLD` alike.

The library is one JSON file: Config.skills_path, else $OKGIT_DATA_DIR/skills.json, else
$XDG_DATA_HOME/okgit/skills.json (okgit.paths.skills_path). `update` changes it under a lock,
re-reading it first, so runs finishing at the same time each add what they learned.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from okgit.eval.types import Reference
from okgit.llm import prompt_messages
from okgit.locks import exclusive
from okgit.problem import Problem
from okgit.search.critic import Ask
from okgit.search.extract import extract_json
from okgit.search.intents import IntentTree

MAX_STRATEGIES = 200
MAX_EVIDENCE = 10  # runs' evidence kept per strategy
MAX_LESSONS = 5
MAX_OFFSPRING = 3  # new strategies a reflection may breed
PRUNE_AFTER_RUNS = 2  # a strategy dominated after this many runs is dropped
SIMILARITY_THRESHOLD = 0.5  # retrieval ignores strategies tried only on problems less alike


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
    try:
        tree = ast.parse(problem.source)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    ops = {op for cls in tree.body if isinstance(cls, ast.ClassDef) and cls.name in ("Model", "ModelNew")
           for op in _calls(cls)}
    sizes = [v for v in problem.knobs.values() if v > 0]
    profile = reference.profile if reference else None
    return Signature(
        ops=sorted(ops),
        bottleneck=profile.bottleneck_type if profile else "unknown",
        log2_size=round(math.log2(math.prod(sizes)), 2) if sizes else 0.0,
        backend=backend,
    )


def _calls(cls: ast.ClassDef) -> set[str]:
    """The names a model class calls, lower-cased, noise and its own submodules left out."""
    # `self.lin(x)` calls the submodule whose construction (nn.Linear) already names the op.
    members = {t.attr for n in ast.walk(cls) if isinstance(n, ast.Assign) for t in n.targets
               if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    ops = set()
    for node in ast.walk(cls):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" and func.attr in members:
            continue
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name and name.lower() not in _NOISE:
            ops.add(name.lower())
    return ops


def similarity(a: Signature, b: Signature) -> float:
    """In [0, 1]: mostly shared ops, then bottleneck, size and backend."""
    union = set(a.ops) | set(b.ops)
    ops = len(set(a.ops) & set(b.ops)) / len(union) if union else 0.0
    bottleneck = 1.0 if a.bottleneck == b.bottleneck != "unknown" else 0.0
    size = max(0.0, 1.0 - abs(a.log2_size - b.log2_size) / 10)
    return 0.6 * ops + 0.2 * bottleneck + 0.1 * size + 0.1 * (a.backend == b.backend)


class Evidence(BaseModel):
    """One run's word on a strategy."""

    signature: Signature
    hardware: str = ""
    speedup: float | None = None
    code: str | None = None  # the winning candidate, when it beat the reference


class Strategy(BaseModel):
    name: str
    description: str  # an intent that carried it, as an example to start from
    origin: Literal["reflection", "mutation", "crossover"] = "reflection"
    parents: list[str] = Field(default_factory=list)  # the strategies a bred one came from
    lessons: list[str] = Field(default_factory=list)
    runs: int = 0
    attempts: int = 0
    correct: int = 0
    improved: int = 0  # runs in which it produced an improvement
    best_speedup: float | None = None
    converge: list[int] = Field(default_factory=list)  # attempts to the first correct candidate, per run
    evidence: list[Evidence] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _problems(cls, data: Any) -> Any:
        """A library written before evidence kept bare signatures under "problems"."""
        if isinstance(data, dict) and "problems" in data:
            data = {**data, "evidence": [{"signature": p} for p in data["problems"]] + list(data.get("evidence", []))}
            del data["problems"]
        return data

    @property
    def backends(self) -> list[str]:
        return sorted({e.signature.backend for e in self.evidence})

    @property
    def hardware(self) -> list[str]:
        return sorted({e.hardware for e in self.evidence if e.hardware})

    @property
    def problem_types(self) -> list[str]:
        return sorted({op for e in self.evidence for op in e.signature.ops})

    @property
    def template(self) -> str | None:
        """The code of its fastest evidence, if any run kept one."""
        coded = [e for e in self.evidence if e.code]
        return max(coded, key=lambda e: e.speedup or 0.0).code if coded else None

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
        if not self.runs:
            return f"- {self.name} (untried, a {self.origin} of {' and '.join(self.parents)}): {self.description}"
        speed = f", best {self.best_speedup:.2f}x" if self.best_speedup else ""
        where = f" on {', '.join(self.hardware)}" if self.hardware else ""
        lesson = f"; {self.lessons[-1]}" if self.lessons else ""
        return f"- {self.name} ({self.runs} runs, {self.correct_rate:.0%} correct{speed}{where}): {self.description}{lesson}"


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
    code: str | None = None  # its best candidate, when it beat the reference


class Offspring(BaseModel):
    """A strategy the reflection bred from the library's frontier."""

    strategy: str = Field(min_length=3, max_length=80)
    description: str = Field(min_length=3, max_length=400)
    parents: list[str] = Field(min_length=1, max_length=2)
    how: Literal["mutation", "crossover"]


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
        self.prune()
        data = {"version": 2, "strategies": [s.model_dump(mode="json") for s in self.strategies]}
        text = json.dumps(data, indent=1)
        # Write then rename: a crash or a concurrent reader never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".skills-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, self.path)

    def update(self, sig: Signature, outcomes: list[Outcome], offspring: list[Offspring], hardware: str = "") -> SkillLibrary:
        """Record a run into the file as it is now, under its lock: another run's update made
        meanwhile is kept, not overwritten. The library as saved."""
        with exclusive(self.path.with_name(self.path.name + ".lock")):
            fresh = SkillLibrary.load(self.path)
            if fresh.load_error:  # a damaged file is set aside, not merged into
                fresh = SkillLibrary(self.path)
            fresh.record(sig, outcomes, hardware)
            fresh.breed(sig, offspring)
            fresh.save()
        self.strategies = fresh.strategies
        return fresh

    def prune(self) -> None:
        """Drop strategies dominated after enough runs, then the least tried past MAX_STRATEGIES."""
        front = {id(s) for s in self.pareto()}
        self.strategies = [s for s in self.strategies if id(s) in front or s.runs < PRUNE_AFTER_RUNS]
        if len(self.strategies) > MAX_STRATEGIES:
            keep = sorted(self.strategies, key=lambda s: (id(s) in front, s.runs, s.attempts), reverse=True)
            self.strategies = keep[:MAX_STRATEGIES]

    def pareto(self) -> list[Strategy]:
        """Strategies no other strategy beats or equals in every objective while beating in one."""
        tried = [s for s in self.strategies if s.attempts]
        objs = {id(s): s.objectives() for s in tried}

        def dominated(s: Strategy) -> bool:
            a = objs[id(s)]
            return any(all(x >= y for x, y in zip(objs[id(t)], a, strict=True)) and objs[id(t)] != a for t in tried)

        return [s for s in tried if not dominated(s)]

    def retrieve(self, sig: Signature, k: int = 3) -> list[tuple[Strategy, float]]:
        """The k strategies most worth seeding a problem with, and their scores in [0, 1]:
        among those seen on a problem at least SIMILARITY_THRESHOLD alike, the ones that
        produced a correct candidate, and bred ones nobody has tried yet (ranked below)."""
        front = {id(s) for s in self.pareto()}
        scored = []
        for s in self.strategies:
            if s.attempts and not s.correct:
                continue  # tried and never correct: it seeds nothing
            alike = max((similarity(sig, e.signature) for e in s.evidence), default=0.0)
            if alike < SIMILARITY_THRESHOLD:
                continue
            score = 0.7 * alike + 0.2 * (id(s) in front) + 0.1 * s.correct_rate if s.attempts else 0.5 * alike
            scored.append((score, s))
        scored.sort(key=lambda x: x[0], reverse=True)
        return [(s, round(score, 3)) for score, s in scored[:k]]

    def find(self, name: str) -> Strategy | None:
        return next((s for s in self.strategies if _same(s.name, name)), None)

    def record(self, sig: Signature, outcomes: list[Outcome], hardware: str = "") -> list[Strategy]:
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
            s.evidence = (s.evidence + [Evidence(signature=sig, hardware=hardware, speedup=o.best_speedup, code=o.code)])[-MAX_EVIDENCE:]
            touched.append(s)
        return touched

    def breed(self, sig: Signature, offspring: list[Offspring]) -> list[Strategy]:
        """Add the strategies a reflection bred, untried, with this problem as where they came from."""
        added = []
        for o in offspring[:MAX_OFFSPRING]:
            if self.find(o.strategy) is not None:
                continue
            s = Strategy(name=o.strategy, description=o.description, origin=o.how, parents=o.parents,
                         evidence=[Evidence(signature=sig)])
            self.strategies.append(s)
            added.append(s)
        return added


def reflect(ask: Ask | None, tree: IntentTree, problem_summary: str, library: SkillLibrary | None = None,
            codes: dict[str, str] | None = None) -> tuple[list[Outcome], list[Offspring]]:
    """The run's tried intents as library outcomes, and new strategies to try. The model, when
    there is one, names the strategies, writes the lessons and breeds offspring from the
    library's frontier; else each intent stands as its own strategy and nothing is bred."""
    tried = [n for n in tree.nodes.values() if n.attempts]
    outcomes = {
        n.id: Outcome(
            strategy=n.description[:80], description=n.description, attempts=n.attempts, correct=n.correct,
            improved=n.improved > 0, best_speedup=n.best_speedup, first_correct_at=n.first_correct_at,
            lesson=f"{n.correct}/{n.attempts} correct" + (f", best {n.best_speedup:.2f}x" if n.best_speedup else "") + f", ended {n.status}",
            code=(codes or {}).get(n.id),
        )
        for n in tried
    }
    if ask is None or not outcomes:
        return list(outcomes.values()), []
    lines = [
        f"- {n.id}: {n.description} | {n.attempts} attempts, {n.correct} correct, status {n.status}"
        + (f", best {n.best_speedup:.2f}x" if n.best_speedup else "") + (f" | profile: {n.profile}" if n.profile else "")
        for n in tried
    ]
    frontier = "\n".join(s.text() for s in (library.pareto() if library else []))
    messages = prompt_messages("reflection.v2", problem_summary=problem_summary, outcomes="\n".join(lines),
                               frontier=frontier, count=MAX_OFFSPRING)
    _, reply = ask("reflection", messages, None, _parse_reflection)
    lessons, bred = reply or ([], [])
    for item in lessons:
        o = outcomes.get(str(item.get("intent", "")))
        if o is not None:
            o.strategy = str(item.get("strategy") or o.strategy)[:80]
            o.lesson = str(item.get("lesson") or o.lesson)[:300]
    return list(outcomes.values()), bred


def _parse_reflection(text: str) -> tuple[list[dict], list[Offspring]] | None:
    """({lessons}, [offspring]) from {"lessons": [...], "new": [...]}, or a bare list of lessons."""
    value = extract_json(text)
    lessons, new = (value.get("lessons"), value.get("new")) if isinstance(value, dict) else (value, [])
    items = [v for v in lessons if isinstance(v, dict)] if isinstance(lessons, list) else []
    bred = []
    for item in new if isinstance(new, list) else []:
        try:
            bred.append(Offspring.model_validate(item))
        except ValidationError:
            continue
    return (items, bred) if items or bred else None
