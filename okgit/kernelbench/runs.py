"""One problem of a sweep: okgit run as a subprocess in the problem's own small git repository
(the problem file copied in and committed), its outcome read back from what it left there,
and the baselines timed beside its winner.

A level-1 or level-2 problem is one `okgit optimize` (`run_problem`); a level-3 problem, a
whole model, is one model campaign (okgit.kernelbench.models), set up and timed the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from okgit.errors import OkgitError
from okgit.eval.parent.device_pool import Slot
from okgit.git.repo import Repo, git
from okgit.git.rundir import RunDir
from okgit.journal.runview import RUNNING, RunView
from okgit.kernelbench.baselines import BaselineTimes
from okgit.kernelbench.reader import KBProblem
from okgit.kernelbench.scoring import CrossCheck, ProblemResult
from okgit.status import CORRECT, RunStatus

# Times the baselines of (reference source, winner source or None) elsewhere (Modal's evaluator)
Timer = Callable[[str, str | None], BaselineTimes]

HELPER_TIMEOUT_S = 1200.0  # baseline timing or cross-check of one winner
OUT_OF_MEMORY = ("out of memory", "OutOfMemoryError", "does not fit in memory")


class ProblemInterrupted(Exception):
    """A problem's okgit run was interrupted: it is not finished, so no state is written."""


class Workspace:
    """A problem's repository under the sweep's directory, its log, and its okgit subprocess."""

    def __init__(self, p: KBProblem, out_dir: Path, env: dict[str, str]) -> None:
        self.problem, self.out_dir, self.env = p, out_dir, env
        self.work = out_dir / "repos" / slug(p)
        self.logs = out_dir / "logs"
        self.started = time.monotonic()

    def create(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.work, ignore_errors=True)  # a problem cut short last time starts clean
        init_repo(self.work, self.problem.file_name, self.problem.path.read_text())

    def okgit(self, args: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess[str] | dict[str, Any]:
        """`okgit ARGS` in the repository, its stderr kept as the problem's log: the finished
        process, or a ProblemResult update when it ran past `timeout_s`. Ctrl-C in it: raised."""
        cmd = [sys.executable, "-m", "okgit", *args]
        log = self.logs / f"{slug(self.problem)}.log"
        try:
            proc = subprocess.run(cmd, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            log.write_text(_text(e.stderr))
            return {"status": "timeout", "wall_s": self.wall_s(), "error": f"{what} ran past {timeout_s:.0f} s"}
        log.write_text(proc.stderr)
        if proc.returncode in (130, -2):
            raise ProblemInterrupted()
        return proc

    def failed(self, proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
        """The update of a run that left no result: the last line it said, or its exit status."""
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {proc.returncode}"
        return {"wall_s": self.wall_s(), "error": reason[:500]}

    def winner_path(self) -> Path:
        path = self.out_dir / "winners" / f"{slug(self.problem)}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def wall_s(self) -> float:
        return round(time.monotonic() - self.started, 1)


def run_problem(p: KBProblem, slot: Slot, flags: dict[str, Any], out_dir: Path, timeout_s: float, *,
                timer: Timer | None, gpu: bool, cross_check: bool,
                device: str, extra_env: dict[str, str] | None = None) -> ProblemResult:
    """A level-1 or level-2 problem: one `okgit optimize` run, then the baselines (and the
    cross-check) of its winner."""
    result = ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, status="error", device=device)
    space = Workspace(p, out_dir, {**os.environ, **slot.env(), **(extra_env or {}), "PYTHONUNBUFFERED": "1"})
    space.create()
    proc = space.okgit(["optimize", p.file_name, "--json", *flag_args(flags)], timeout_s, "okgit optimize")
    if isinstance(proc, dict):
        return result.model_copy(update=proc)
    run = _run_result(space.work) if proc.returncode == 0 else None
    if run is None:
        return result.model_copy(update=space.failed(proc))
    if run.get("status") == RunStatus.interrupted:
        raise ProblemInterrupted()
    update = _outcome(run, _view(space.work, run.get("run_id", "")))
    backend = flags.get("backend") or "triton"
    if update["correct"]:
        winner = space.winner_path()
        winner.write_text(git("show", f"{update['best_tag']}:{p.file_name}", cwd=space.work))
        update.update(baselines(p.path, winner, space.env, timer=timer, gpu=gpu, backend=backend))
        if cross_check:
            data = helper("crosscheck", p.path, winner, space.env, extra=[backend])
            update["cross_check"] = CrossCheck(error=data) if isinstance(data, str) else CrossCheck.model_validate(data)
    else:  # no kernel: the user keeps the reference; its two baselines still place the problem
        times = baselines(p.path, None, space.env, timer=timer, gpu=gpu)
        update.update({k: times[k] for k in ("eager_us", "compile_us") if times.get(k) is not None})
    update["wall_s"] = space.wall_s()
    return result.model_copy(update=update)


def _outcome(run: dict[str, Any], view: RunView) -> dict[str, Any]:
    """What the run's result.json and journal say of the problem."""
    best_cand = view.finished.best_cand if view.finished else None
    best_tag = run.get("best_tag")
    done = [c for c in view.candidates.values() if c.status != RUNNING]  # evaluated
    return {
        "status": run.get("status", "error"), "correct": run.get("status") in CORRECT and bool(best_tag),
        "run_id": run.get("run_id"), "best_tag": best_tag,
        "gpu_s": round(sum(c.wall_s or 0.0 for c in done), 3),
        "llm_usd": float(run.get("cost_usd") or 0.0), "iterations": len(done),
        "best_iteration": int(best_cand[1:]) if best_cand and best_cand[1:].isdigit() else None,
    }


def out_of_memory(result: ProblemResult, out_dir: Path, p: KBProblem) -> bool:
    """Whether a problem that found nothing failed for memory: its error, its okgit's stderr or
    its run's journal says the device (or the host) ran out."""
    if result.correct:
        return False
    files = [out_dir / "logs" / f"{slug(p)}.log"]
    if result.run_id:
        files.append(RunDir(out_dir / "repos" / slug(p) / ".okgit" / "runs" / result.run_id).journal)
    texts = [result.error or ""] + [f.read_text(errors="replace") for f in files if f.is_file()]
    return any(sign in text for text in texts for sign in OUT_OF_MEMORY)


def slug(p: KBProblem) -> str:
    return f"level{p.level}_{p.id}_{p.name}"


def init_repo(work: Path, file_name: str, source: str) -> None:
    work.mkdir(parents=True)
    (work / file_name).write_text(source)
    # The user's global git settings (signing, hooks, templates) must not break the sweep's commits.
    ident = ["-c", "user.name=okgit bench", "-c", "user.email=okgit-bench@localhost", "-c", "commit.gpgsign=false",
             "-c", f"core.hooksPath={os.devnull}"]
    git("init", "-q", cwd=work)
    git(*ident, "add", file_name, cwd=work)
    git(*ident, "commit", "-q", "-m", f"KernelBench problem {file_name}", cwd=work)


def flag_args(flags: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for k, v in flags.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args


def last_json(stdout: str) -> dict[str, Any] | None:
    """The JSON object a helper printed, even if a library printed lines before it."""
    starts = [i for i in range(len(stdout)) if stdout[i] == "{" and (i == 0 or stdout[i - 1] == "\n")]
    for i in reversed(starts):
        try:
            value = json.loads(stdout[i:])
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _run_result(work: Path) -> dict[str, Any] | None:
    """The run's result.json (what `--json` printed); the problem's repository holds this one run."""
    runs = work / ".okgit" / "runs"  # the problem's own repository, as Repo.runs_dir lays it out
    found = [RunDir(d).result for d in runs.glob("*") if RunDir(d).result.is_file()]
    if len(found) != 1:
        return None
    try:
        value = json.loads(found[0].read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _view(work: Path, run_id: str) -> RunView:
    """The run's journal, folded (empty when there is no such run)."""
    view = RunView()
    try:
        view.apply(RunDir(Repo.find(work).run_dir(run_id)).events())
    except OkgitError:  # not a repository, or no such run
        pass
    return view


def baselines(ref: Path, winner: Path | None, env: dict[str, str], *,
              timer: Timer | None, gpu: bool, backend: str = "triton") -> dict[str, Any]:
    """Eager, torch.compile and the winner's times (no winner: the first two only)."""
    if timer is not None:
        times = timer(ref.read_text(), winner.read_text() if winner else None)
    elif gpu:
        data = helper("baselines", ref, winner, env, extra=[backend] if winner else None)
        if isinstance(data, str):  # the helper itself failed: no figures, and why
            return {"untimed_reason": data}
        times = BaselineTimes.model_validate(data)
    else:
        return {"untimed_reason": "no GPU: timing is not claimed"}
    fields: dict[str, Any] = {"eager_us": times.eager_us, "compile_us": times.compile_us, "okgit_us": times.okgit_us,
                              "timed": times.timed and times.okgit_us is not None}
    if times.okgit_us:
        if times.eager_us:
            fields["speedup_eager"] = times.eager_us / times.okgit_us
        if times.compile_us:
            fields["speedup_compile"] = times.compile_us / times.okgit_us
    if times.disagreement:  # never scored as a correct kernel, whatever the evaluator said
        fields.update(correct=False, status="incorrect", error=f"winner disagrees with float64 eager at the default shapes: "
                                           f"{times.disagreement}"[:500])
    if times.errors:
        fields["untimed_reason"] = "; ".join(f"{arm}: {why}" for arm, why in times.errors.items())
    return fields


def helper(module: str, ref: Path, winner: Path | None, env: dict[str, str], extra: list[str] | None = None) -> dict[str, Any] | str:
    """Run okgit.kernelbench.<module> REF [WINNER] in a process pinned like the problem's run.

    Returns the JSON object it printed, or a one-line reason when the helper itself failed.
    """
    cmd = [sys.executable, "-m", f"okgit.kernelbench.{module}", str(ref), *([str(winner)] if winner else []), *(extra or [])]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HELPER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{module} ran past {HELPER_TIMEOUT_S:.0f} s"
    data = last_json(proc.stdout) if proc.returncode == 0 else None
    if data is None:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        return f"{module} failed: {lines[-1] if lines else f'exit status {proc.returncode}'}"[:300]
    return data


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
