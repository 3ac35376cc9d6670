"""`python -m okgit.kernelbench.solve OP.py FLAGS_JSON [RUN]`: one sweep problem in its own process:
its okgit run (`okgit.run.optimize`, a new run, or RUN resumed), then the sweep's own check of
the winner, by the evaluator's code (`check_winner`) with the run's own evaluator, so the check
reuses the reference the run prepared (its cases, tolerances and expected outputs) instead of
preparing it again in another process. Prints one JSON object (`Solved`) on stdout, the run's
progress on stderr; exit status 0, or 130 when a signal (SIGTERM, Ctrl-C) interrupted it, the
object then saying what it had (`optimize --resume` goes on from the run's state).

On Modal the baselines' own function checks the winner (okgit.eval.modal.remote), so no check
runs here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field

from okgit.config import load_config
from okgit.eval.base import Evaluator
from okgit.eval.parent.devices import stage
from okgit.eval.types import Reference
from okgit.git.repo import Repo, git
from okgit.journal.events import Event
from okgit.kernelbench.timeline import WALLS_ENV, StageClock
from okgit.problem import Problem, load_problem
from okgit.status import CORRECT


class Solved(BaseModel):
    """What the problem's process did: its run's result, the check of the winner, its stages' walls."""

    run: dict[str, Any] | None = None  # okgit.run.RunResult, as --json prints it; None: interrupted before it
    checked: bool = False
    disagreement: str | None = None  # the winner gives a wrong answer in the check
    check_error: str | None = None  # the check could not reach a verdict
    interrupted: bool = False
    walls: dict[str, float] = Field(default_factory=dict)  # stage -> wall seconds (okgit.kernelbench.timeline)


def solve(op: Path, flags: dict[str, Any], resume: str | None = None, *, evaluator: Evaluator | None = None,
          progress: Callable[[Event], None] | None = None) -> Solved:
    """The run, then the check of its winner; a signal ends it with `interrupted` (never raised)."""
    from okgit.eval.parent.one_shot import check_winner
    from okgit.eval.registry import make_evaluator
    from okgit.run import optimize

    repo = Repo.find(op.parent)
    config = load_config(repo.root, flags)
    # from here: starting the evaluator is part of preparing the reference
    clock = StageClock(Path(os.environ[WALLS_ENV]) if os.environ.get(WALLS_ENV) else None)
    solved = Solved()
    with contextlib.ExitStack() as owned:
        try:
            seen = _Remembering(evaluator or owned.enter_context(make_evaluator(config)))
            result = optimize(None if resume else op, flags=flags, resume=resume, on_event=_Events(clock, progress),
                              cwd=repo.root, evaluator=seen)
            solved.run = result.model_dump(mode="json")
            if config.eval == "modal" or result.status not in CORRECT or not result.best_tag:
                return solved
            started = time.monotonic()
            try:
                source = git("show", f"{result.best_tag}:{result.op}", cwd=repo.root)
                with stage("check"):
                    solved.disagreement, solved.check_error = check_winner(
                        seen, seen.problem or _problem(repo, result.op, flags), source, config.backend)
                solved.checked = True
            finally:
                clock.add("check", time.monotonic() - started)
        except KeyboardInterrupt:
            solved.interrupted = True
        finally:
            solved.walls = dict(clock.walls)
    return solved


class _Remembering:
    """The run's evaluator, remembering the problem the run prepared, so that the check asks the
    same evaluator about the same problem (and its prepared reference serves again)."""

    def __init__(self, inner: Evaluator) -> None:
        self._inner = inner
        self.problem: Problem | None = None

    def reference(self, problem: Problem) -> Reference:
        self.problem = problem
        return self._inner.reference(problem)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Events:
    """The run's events to the stage clock and the progress lines (which fold a resumed run's
    earlier events in first)."""

    def __init__(self, clock: StageClock, progress: Callable[[Event], None] | None) -> None:
        self.clock, self.progress = clock, progress
        self.preload = getattr(progress, "preload", None)

    def __call__(self, event: Event) -> None:
        self.clock(event)
        if self.progress:
            self.progress(event)


def _problem(repo: Repo, op: str, flags: dict[str, Any]) -> Problem:
    """The op as a run of it loads it (a resumed run that had finished prepared nothing here)."""
    path = repo.root / op
    problem = load_problem(op, source=path.read_text(), root=str(path.parent))
    return replace(problem, **load_config(repo.root, flags).problem_settings(problem.path))


def main(argv: list[str] | None = None) -> int:
    from okgit.errors import OkgitError
    from okgit.views.progress import printer

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print("usage: python -m okgit.kernelbench.solve OP.py FLAGS_JSON [RUN]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C: the run writes what it has
    op = Path(args[0]).resolve()
    try:
        solved = solve(op, json.loads(args[1]), args[2] if len(args) == 3 else None, progress=printer(sys.stderr, op.name))
    except OkgitError as e:
        print(f"okgit: {e}", file=sys.stderr)
        return e.exit_code
    print(solved.model_dump_json())
    return 130 if solved.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
