"""One problem of a sweep: okgit run as a subprocess in the problem's own small git repository
(the problem file copied in and committed), its outcome read back from what it left there,
and the baselines timed beside its winner.

A level-1 or level-2 problem is one run and the check of its winner, in one process
(okgit.kernelbench.solve: `run_problem`); a level-3 problem, a whole model, is one model campaign
(okgit.kernelbench.models), set up and timed the same way.

A problem stopped in flight (the sweep's time limit, SIGTERM) keeps its repository: its run was
interrupted cleanly and wrote its state, and `in_flight/<problem>.json` keeps what the calls so
far spent on it; the next sweep resumes that run (`optimize --resume`) instead of starting over.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from okgit.errors import OkgitError
from okgit.eval.parent.device_pool import Slot
from okgit.eval.parent.rounds import far_off
from okgit.eval.parent.sandbox import die_with_parent
from okgit.eval.protocol.ledger import LEDGER_ENV
from okgit.git.repo import Repo, git
from okgit.git.rundir import RunDir
from okgit.journal.runview import RUNNING, RunView
from okgit.kernelbench.baselines import BaselineTimes
from okgit.kernelbench.reader import KBProblem
from okgit.kernelbench.scoring import CrossCheck, ProblemResult
from okgit.kernelbench.timeline import WALLS_ENV, combine, evaluation_phases, ledger_holds, read_walls
from okgit.status import CORRECT

# Times the baselines of (reference source, winner source or None) elsewhere (Modal's evaluator)
Timer = Callable[[str, str | None], BaselineTimes]

HELPER_TIMEOUT_S = 1200.0  # baseline timing or cross-check of one winner
STOP_GRACE_S = 45.0  # a stopped problem's run writes its state in this time, or is killed
OUT_OF_MEMORY = ("out of memory", "OutOfMemoryError", "does not fit in memory")


class ProblemInterrupted(Exception):
    """A problem's okgit run was interrupted: it is not finished, so no state is written."""


class InFlight(BaseModel):
    """What the sweep calls so far spent on a problem they did not finish (`in_flight/<problem>.json`)."""

    calls: int = 0
    wall_s: float = 0.0
    walls: dict[str, float] = Field(default_factory=dict)  # stage -> wall seconds

    def plus(self, wall_s: float, walls: dict[str, float]) -> InFlight:
        merged = dict(self.walls)
        for k, v in walls.items():
            merged[k] = round(merged.get(k, 0.0) + v, 3)
        return InFlight(calls=self.calls + 1, wall_s=round(self.wall_s + wall_s, 1), walls=merged)


class Workspace:
    """A problem's repository under the sweep's directory, its log, its ledger, and its okgit subprocess."""

    def __init__(self, p: KBProblem, out_dir: Path, env: dict[str, str], stop: threading.Event | None = None) -> None:
        self.problem, self.out_dir = p, out_dir
        self.work = out_dir / "repos" / slug(p)
        self.logs = out_dir / "logs"
        self.ledger = out_dir / "ledgers" / f"{slug(p)}.jsonl"  # every call's device holds, kept across calls
        package = str(Path(__file__).resolve().parents[2])  # the problem's processes run this okgit, as the sweep does
        self.walls_file = self.logs / f"{slug(p)}.walls.json"  # this call's stage walls, as the run's process writes them
        self.env = {**env, LEDGER_ENV: str(self.ledger), WALLS_ENV: str(self.walls_file),
                    "PYTHONPATH": os.pathsep.join(x for x in (package, env.get("PYTHONPATH")) if x)}
        self.stop = stop or threading.Event()
        self.started = time.monotonic()
        self.walls: dict[str, float] = {}  # this call's stage walls (okgit.kernelbench.timeline)

    @property
    def in_flight_path(self) -> Path:
        return self.out_dir / "in_flight" / f"{slug(self.problem)}.json"

    def create(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.work, ignore_errors=True)  # a problem cut short last time starts clean
        init_repo(self.work, self.problem.file_name, self.problem.path.read_text())

    def resumable_run(self) -> str | None:
        """The run an earlier call left in the repository (interrupted, or finished before its
        baselines), to resume; None (and a clean repository) when there is none."""
        runs = sorted(d.name for d in (self.work / ".okgit" / "runs").glob("*") if d.is_dir()) if self.work.is_dir() else []
        if self.in_flight_path.is_file() and len(runs) == 1:
            self.logs.mkdir(parents=True, exist_ok=True)
            return runs[0]
        self.create()
        return None

    def earlier(self) -> InFlight:
        try:
            return InFlight.model_validate_json(self.in_flight_path.read_text())
        except (OSError, ValueError):
            return InFlight()

    def keep_in_flight(self) -> None:
        """This call stopped the problem: what it spent, added to the earlier calls'."""
        self.in_flight_path.parent.mkdir(parents=True, exist_ok=True)
        record = self.earlier().plus(self.wall_s(), self.walls)
        tmp = self.in_flight_path.with_suffix(".tmp")
        tmp.write_text(record.model_dump_json())
        tmp.replace(self.in_flight_path)

    def finished(self, result: ProblemResult) -> ProblemResult:
        """The result over every call: walls added up, the time by stage; the in-flight record gone."""
        earlier = self.earlier()
        total = earlier.plus(self.wall_s(), self.walls)
        self.in_flight_path.unlink(missing_ok=True)
        holds, footprint = ledger_holds(self.ledger)
        return result.model_copy(update={"wall_s": total.wall_s, "calls": total.calls,
                                         "time": combine(total.walls, holds), "footprint_bytes": footprint})

    def okgit(self, args: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess[str] | dict[str, Any]:
        """`okgit ARGS` in the repository, its stderr kept as the problem's log: the finished
        process, or a ProblemResult update when it ran past `timeout_s`. Interrupted: raised."""
        proc = self.process([sys.executable, "-m", "okgit", *args], timeout_s, what)
        if isinstance(proc, dict):
            return proc
        if self.stopped(proc):
            raise ProblemInterrupted()
        return proc

    def stopped(self, proc: subprocess.CompletedProcess[str]) -> bool:
        """Whether the process ended for a stop: interrupted (130, SIGINT), or killed by the
        sweep's SIGTERM before it could take the signal as Ctrl-C (still importing), so that a
        problem stopped as it started is resumed, never recorded as an error."""
        return proc.returncode in (130, -2) or (self.stop.is_set() and proc.returncode != 0)

    def process(self, cmd: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess[str] | dict[str, Any]:
        """CMD in the repository (stopped with the sweep), its stderr kept as the problem's log;
        a ProblemResult update when it ran past `timeout_s`."""
        proc = run_stoppable(cmd, self.work, self.env, timeout_s, self.stop)
        with open(self.logs / f"{slug(self.problem)}.log", "a") as f:
            f.write(proc.stderr or "")
        if proc.returncode == TIMED_OUT:
            return {"status": "timeout", "wall_s": self.wall_s(), "error": f"{what} ran past {timeout_s:.0f} s"}
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


TIMED_OUT = -1000  # run_stoppable's return code for a process that ran past its time


def run_stoppable(cmd: list[str], cwd: Path | None, env: dict[str, str], timeout_s: float,
                  stop: threading.Event) -> subprocess.CompletedProcess[str]:
    """CMD in a session of its own, so that a terminal's Ctrl-C reaches the sweep alone and the
    sweep relays a stop (its time limit, SIGTERM) once, as SIGTERM, which okgit takes as Ctrl-C:
    the run writes its state. Past `timeout_s` it is stopped the same way (return code
    TIMED_OUT); whatever still runs STOP_GRACE_S after the signal is killed, with what it started."""
    return wait_stoppable(_start(cmd, cwd, env), timeout_s, stop)


def _start(cmd: list[str], cwd: Path | None, env: dict[str, str], stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE if stdin else None, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=die_with_parent)


class Ahead:
    """A helper (okgit.kernelbench.MODULE) started before its arguments are known, with `--wait`:
    it imports torch, Inductor and okgit's timer beside the problem's run and touches no device
    until `helper` hands it its arguments on stdin. On an H100's sweep (2026-12-05) 12.6 s passed
    between a problem's run ending and its baselines holding the device, on nothing but starting
    processes. Closed unused, it ends."""

    def __init__(self, module: str, env: dict[str, str]) -> None:
        self.module = module
        self.proc = _start([sys.executable, "-m", f"okgit.kernelbench.{module}", "--wait"], None, env, stdin=True)

    def close(self) -> None:
        if self.proc.poll() is None:
            _kill_group(self.proc)


def wait_stoppable(proc: subprocess.Popen[str], timeout_s: float, stop: threading.Event,
                   line: str | None = None) -> subprocess.CompletedProcess[str]:
    """run_stoppable's wait, for a process started already (`line`: written to its stdin first, which is then closed)."""
    if line is not None and proc.stdin is not None:
        try:
            proc.stdin.write(line + "\n")
            proc.stdin.close()
        except OSError:  # it ended already: its exit status and stderr say why
            pass
        proc.stdin = None  # closed: communicate below must not flush it
    deadline, signalled, timed_out = time.monotonic() + timeout_s, None, False
    while True:
        try:
            out, err = proc.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if signalled is None and (stop.is_set() or now > deadline):
                signalled, timed_out = now, not stop.is_set()
                proc.send_signal(signal.SIGTERM)
            elif signalled is not None and now - signalled > STOP_GRACE_S:
                _kill_group(proc)
    _kill_group(proc)  # what it started and left behind
    return subprocess.CompletedProcess(proc.args, TIMED_OUT if timed_out else proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_problem(p: KBProblem, slot: Slot, flags: dict[str, Any], out_dir: Path, timeout_s: float, *,
                timer: Timer | None, gpu: bool, cross_check: bool, device: str,
                extra_env: dict[str, str] | None = None, stop: threading.Event | None = None) -> ProblemResult:
    """A level-1 or level-2 problem: one okgit run and the check of its winner
    (okgit.kernelbench.solve), resumed where an earlier call stopped it, then the baselines (and
    the cross-check) of its winner. Stopped (`stop`): its state kept, ProblemInterrupted raised."""
    space = Workspace(p, out_dir, {**os.environ, **slot.env(), **(extra_env or {}), "PYTHONUNBUFFERED": "1"}, stop)
    # the baselines' helper imports beside the run (on a GPU, timed here): it waits for its arguments
    ahead = Ahead("baselines", space.env) if gpu and timer is None else None
    try:
        return _solved(p, flags, space, timeout_s, timer=timer, gpu=gpu, cross_check=cross_check, device=device,
                       ahead=ahead)
    finally:
        if ahead is not None:
            ahead.close()


def _solved(p: KBProblem, flags: dict[str, Any], space: Workspace, timeout_s: float, *, timer: Timer | None,
            gpu: bool, cross_check: bool, device: str, ahead: Ahead | None) -> ProblemResult:
    result = ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, status="error", device=device)
    resume = space.resumable_run()
    space.walls_file.unlink(missing_ok=True)  # an earlier call's
    proc = space.process([sys.executable, "-m", "okgit.kernelbench.solve", str(space.work / p.file_name),
                          json.dumps(flags), *([resume] if resume else [])], timeout_s, "okgit optimize")
    if isinstance(proc, dict):
        return space.finished(result.model_copy(update=proc))
    solved = last_json(proc.stdout) or {}
    # what it said, or, killed before it could say it (a stop that outlasted its grace), what it wrote
    space.walls = dict(solved.get("walls") or read_walls(space.walls_file))
    run = solved.get("run")
    if space.stopped(proc) or solved.get("interrupted"):
        space.keep_in_flight()
        raise ProblemInterrupted()
    if not isinstance(run, dict):
        return space.finished(result.model_copy(update=space.failed(proc)))
    update = _outcome(run, _view(space.work, run.get("run_id", "")))
    backend = flags.get("backend") or "triton"
    started = time.monotonic()
    if update["correct"] and solved.get("disagreement"):  # the check of the winner: never scored as correct
        update.update(correct=False, status="incorrect",
                      error=f"winner disagrees with float64 eager at the default shapes: {solved['disagreement']}"[:500])
    if update["correct"] and not solved.get("check_error"):
        winner = space.winner_path()
        winner.write_text(git("show", f"{update['best_tag']}:{p.file_name}", cwd=space.work))
        update.update(baselines(p.path, winner, space.env, timer=timer, gpu=gpu, backend=backend,
                                checked=bool(solved.get("checked")), stop=space.stop, ahead=ahead))
        if cross_check:
            data = helper("crosscheck", p.path, winner, space.env, extra=[backend], stop=space.stop)
            update["cross_check"] = CrossCheck(error=data) if isinstance(data, str) else CrossCheck.model_validate(data)
    else:  # no kernel, or none the check could judge: the reference's two baselines still place the problem
        times = baselines(p.path, None, space.env, timer=timer, gpu=gpu, stop=space.stop, ahead=ahead)
        update.update({k: times[k] for k in ("eager_us", "compile_us", "compile_s", "compile_cache")
                       if times.get(k) is not None})
        if update["correct"]:
            update["untimed_reason"] = f"okgit: {solved['check_error']}"[:300]
    space.walls["baselines"] = round(time.monotonic() - started, 3)
    if space.stop.is_set():  # the run is done and kept; the baselines were cut short: the next call times them
        space.keep_in_flight()
        raise ProblemInterrupted()
    return space.finished(result.model_copy(update=update))


def _outcome(run: dict[str, Any], view: RunView) -> dict[str, Any]:
    """What the run's result.json and journal say of the problem."""
    best_cand = view.finished.best_cand if view.finished else None
    best_tag = run.get("best_tag")
    done = [c for c in view.candidates.values() if c.status != RUNNING]  # evaluated
    compared = [g for g in view.gates if g.baseline_us and g.candidate_us]  # the interleaved rounds
    return {
        "status": run.get("status", "error"), "correct": run.get("status") in CORRECT and bool(best_tag),
        "run_id": run.get("run_id"), "best_tag": best_tag,
        "gpu_s": round(sum(c.wall_s or 0.0 for c in done), 3),
        "eval_phase_s": evaluation_phases(c.phase_s for c in done),
        "llm_usd": float(run.get("cost_usd") or 0.0), "iterations": len(done),
        "best_iteration": int(best_cand[1:]) if best_cand and best_cand[1:].isdigit() else None,
        "gate_comparisons": len(compared),
        "gate_far_off": sum(far_off(g.baseline_us or []) or far_off(g.candidate_us or []) for g in compared),
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


def baselines(ref: Path, winner: Path | None, env: dict[str, str], *, timer: Timer | None, gpu: bool,
              backend: str = "triton", checked: bool = False, stop: threading.Event | None = None,
              ahead: Ahead | None = None) -> dict[str, Any]:
    """Eager, torch.compile and the winner's times (no winner: the first two only). `checked`:
    the winner was checked already, by the run's own evaluator (okgit.kernelbench.solve), so the
    baselines' helper does not check it again. `stop`: the sweep's, which stops the helper too;
    `ahead`: the helper started already (run_problem)."""
    if timer is not None:
        times = timer(ref.read_text(), winner.read_text() if winner else None)
    elif gpu:
        extra = ([backend] + (["--checked"] if checked else [])) if winner else None
        data = helper("baselines", ref, winner, env, extra=extra, stop=stop, ahead=ahead)
        if isinstance(data, str):  # the helper itself failed: no figures, and why
            return {"untimed_reason": data}
        times = BaselineTimes.model_validate(data)
    else:
        return {"untimed_reason": "no GPU: timing is not claimed"}
    fields: dict[str, Any] = {"eager_us": times.eager_us, "compile_us": times.compile_us, "okgit_us": times.okgit_us,
                              "timed": times.timed and times.okgit_us is not None,
                              "compile_s": times.compile_s, "compile_cache": times.compile_cache}
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


def helper(module: str, ref: Path, winner: Path | None, env: dict[str, str], extra: list[str] | None = None,
           stop: threading.Event | None = None, ahead: Ahead | None = None) -> dict[str, Any] | str:
    """Run okgit.kernelbench.<module> REF [WINNER] in a process pinned like the problem's run (or
    hand `ahead`, that helper started earlier, the same arguments).

    Returns the JSON object it printed, or a one-line reason when the helper itself failed.
    """
    args = [str(ref), *([str(winner)] if winner else []), *(extra or [])]
    if ahead is not None and ahead.module == module:
        proc = wait_stoppable(ahead.proc, HELPER_TIMEOUT_S, stop or threading.Event(), line=json.dumps(args))
    else:
        proc = run_stoppable([sys.executable, "-m", f"okgit.kernelbench.{module}", *args], None, env, HELPER_TIMEOUT_S,
                             stop or threading.Event())
    if proc.returncode == TIMED_OUT:
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
