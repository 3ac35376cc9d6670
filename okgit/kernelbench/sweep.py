"""`okgit bench kernelbench`: run okgit on every selected problem and score the sweep.

Each problem runs in its own temporary git repository (the problem file copied in and
committed) through `okgit optimize` as a subprocess, whose result.json it reads, so one problem's crash cannot
take the sweep down, and with --parallel N up to N run at once, each pinned to its own GPU
(CUDA_VISIBLE_DEVICES) when there are GPUs. The eager and torch.compile baselines are
timed live next to okgit's winner on the same device.

Everything lands under --out: one state file per finished problem (a rerun with the same
--out skips those), the problem repositories with okgit's runs, logs, the winners, and
report.json / report.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from okgit.errors import OkgitError, UsageError
from okgit.eval.parent.device_pool import DevicePool, Slot
from okgit.fmt import fmt_speed
from okgit.git.repo import Repo, git
from okgit.git.rundir import RunDir
from okgit.kernelbench import crosscheck
from okgit.kernelbench.baselines import BaselineTimes
from okgit.kernelbench.reader import KBProblem, find_problems
from okgit.kernelbench.scoring import CrossCheck, ProblemResult, SweepReport, summarize
from okgit.status import CORRECT, RunStatus

# Times the baselines of (reference source, winner source or None) elsewhere (Modal's evaluator)
Timer = Callable[[str, str | None], BaselineTimes]

DEFAULT_TIMEOUT_S = 3600.0  # one problem's whole okgit run; a hang past it is recorded as `timeout`
HELPER_TIMEOUT_S = 1200.0  # baseline timing or cross-check of one winner
SETTINGS_FILE = "sweep.json"

class _Interrupted(Exception):
    """A problem's okgit run was interrupted: it is not finished, so no state is written."""


def run_sweep(
    dir: Path | str,
    *,
    level: int | None = None,
    problems: str | None = None,
    parallel: int = 1,
    flags: dict[str, Any] | None = None,
    cross_check: bool = False,
    out: Path | str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Callable[[str], None] | None = None,
) -> SweepReport:
    """`progress` is told one line per stage (the CLI prints them to stderr); None: silent."""
    if parallel < 1:
        raise UsageError("--parallel must be at least 1")
    selected = find_problems(Path(dir), level, problems)
    from okgit.config import RUN_FLAGS, load_config

    flags = {k: v for k, v in (flags or {}).items() if k in RUN_FLAGS and v is not None}

    config = load_config(None, flags)  # bad flags fail here, before any problem starts
    out_dir = _out_dir(out)
    _check_settings(out_dir, flags)
    say = progress or (lambda line: None)
    say(f"sweep state in {out_dir} (rerun with --out {out_dir} to resume)")

    modal = config.eval == "modal"
    pool = DevicePool.local(parallel, device="cpu" if modal or config.device == "cpu" else None)
    gpu = any(d.startswith("cuda") for d in pool.devices)
    timer: Timer | None = None
    extra_env: dict[str, str] = {}
    owned = contextlib.ExitStack()  # the evaluator made here, closed when the sweep ends
    if modal:
        from okgit.eval.modal.client import MAX_CONTAINERS_ENV, ModalEvaluator, max_containers_setting
        from okgit.eval.registry import make_evaluator

        # One container limit for the whole sweep: each problem's process, and the baselines
        # timed after it in the same slot, get an equal share of it (at least one each).
        share = max(1, max_containers_setting() // parallel)
        extra_env[MAX_CONTAINERS_ENV] = str(share)
        baselines = owned.enter_context(make_evaluator(config, max_containers=share))
        assert isinstance(baselines, ModalEvaluator)  # config.eval is "modal" here
        timer = functools.partial(baselines.time_baselines, backend=flags.get("backend") or "triton")
    check_note, checking = _cross_check_plan(cross_check, gpu=gpu, modal=modal)

    done = {r.key: r for r in (_load_state(out_dir, p) for p in selected) if r is not None}
    pending = [p for p in selected if p.key not in done]
    if done:
        say(f"{len(done)} of {len(selected)} problems already finished in {out_dir}; running {len(pending)}")
    started = time.monotonic()

    def job(problem: KBProblem, slot: Slot) -> ProblemResult:
        device = f"modal:{config.modal_gpu}" if modal else slot.name
        try:
            result = _run_problem(problem, slot, flags, out_dir, timeout_s, timer=timer, gpu=gpu,
                                  cross_check=checking, device=device, extra_env=extra_env)
        except OkgitError as e:  # e.g. git or Modal failing for this problem: recorded, the sweep goes on
            result = ProblemResult(key=problem.key, level=problem.level, id=problem.id, name=problem.name,
                                   status="error", device=device, error=str(e))
        _save_state(_state_path(out_dir, problem), result)
        speed = f"{fmt_speed(result.speedup_eager)} vs eager" if result.speedup_eager is not None else "untimed"
        say(f"{result.key}: {result.status}, {'correct' if result.correct else 'not correct'}, {speed} "
            f"({result.wall_s:.0f} s on {result.device})")
        return result

    reran: list[str] = []
    with owned:
        try:
            for r in pool.map(job, pending):
                done[r.key] = r
            # A problem that failed for the device's memory while others ran beside it is run
            # again alone, so that its verdict is never another problem's doing.
            if len(pool.slots) > 1:
                for p in [p for p in pending if _out_of_memory(done[p.key], out_dir, p)]:
                    say(f"{p.key}: out of memory with {len(pool.slots)} problems at once; running it again alone")
                    done[p.key] = job(p, pool.slots[0])
                    reran.append(p.key)
        except _Interrupted:
            raise KeyboardInterrupt from None
    report = SweepReport(
        dir=str(Path(dir).resolve()), out=str(out_dir),
        device="modal" if modal else ("cuda" if gpu else "cpu"),
        devices=[f"modal:{config.modal_gpu}"] if modal else sorted({s.name for s in pool.slots}),
        parallel=parallel, flags=flags, wall_s=round(time.monotonic() - started, 1),
        problems=[done[p.key] for p in selected], summary=summarize([done[p.key] for p in selected]),
        cross_check=check_note,
    )
    if not gpu and not modal:
        report.notes.append("no GPU: correctness is real; eager and torch.compile baselines are not timed")
    if reran:
        report.notes.append(f"ran again alone after an out-of-memory failure beside other problems: {', '.join(reran)}")
    (out_dir / "report.json").write_text(report.model_dump_json(indent=2) + "\n")
    (out_dir / "report.md").write_text(report.markdown())
    return report


# --- the sweep's directory ---------------------------------------------------------------------


def _out_dir(out: Path | str | None) -> Path:
    if out:
        path = Path(out).expanduser().resolve()
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        try:
            repo = Repo.find(Path.cwd())
            repo.ensure_excluded()
            path = repo.okgit_dir / "bench" / stamp
        except OkgitError:  # not in a git repository: leave the user's directory alone
            import tempfile

            path = Path(tempfile.mkdtemp(prefix=f"okgit-bench-{stamp}-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _check_settings(out_dir: Path, flags: dict[str, Any]) -> None:
    """A resumed sweep must run with the settings it started with, or its figures mix two sweeps."""
    path = out_dir / SETTINGS_FILE
    if path.exists():
        before = json.loads(path.read_text()).get("flags", {})
        if before != flags:
            raise OkgitError(f"{out_dir} holds a sweep run with other flags ({_flag_text(before)} vs "
                             f"{_flag_text(flags)}): resume with the same flags or choose another --out")
    else:
        path.write_text(json.dumps({"flags": flags}, indent=2) + "\n")


def _flag_text(flags: dict[str, Any]) -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(flags.items())) or "no flags"


def _slug(p: KBProblem) -> str:
    return f"level{p.level}_{p.id}_{p.name}"


def _state_path(out_dir: Path, p: KBProblem) -> Path:
    return out_dir / "state" / f"{_slug(p)}.json"


def _load_state(out_dir: Path, p: KBProblem) -> ProblemResult | None:
    path = _state_path(out_dir, p)
    if not path.exists():
        return None
    try:
        return ProblemResult.model_validate_json(path.read_text())
    except ValueError:  # a state file cut short: run the problem again
        return None


def _save_state(path: Path, result: ProblemResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(result.model_dump_json(indent=2) + "\n")
    tmp.replace(path)  # atomic: a state file is whole or absent


def _cross_check_plan(wanted: bool, *, gpu: bool, modal: bool) -> tuple[str | None, bool]:
    if not wanted:
        return None, False
    if not crosscheck.available():
        return "not run: the kernelbench package is not installed (pip install it, or install a KernelBench checkout)", False
    if modal:
        return "not run: --cross-check runs KernelBench's evaluation on a local GPU, not on Modal", False
    if not gpu:
        return "not run: KernelBench's evaluation needs a GPU", False
    return "KernelBench's eval_kernel_against_ref on each correct winner, same device", True


# --- one problem -------------------------------------------------------------------------------


def _run_problem(p: KBProblem, slot: Slot, flags: dict[str, Any], out_dir: Path, timeout_s: float, *,
                 timer: Timer | None, gpu: bool, cross_check: bool,
                 device: str, extra_env: dict[str, str] | None = None) -> ProblemResult:
    if p.level == 3:  # a whole model: one campaign over its top modules (okgit.kernelbench.models)
        from okgit.kernelbench.models import run_model_problem

        return run_model_problem(p, slot, flags, out_dir, timeout_s, timer=timer, gpu=gpu, device=device,
                                 extra_env=extra_env)
    started = time.monotonic()
    result = ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, status="error", device=device)
    work = out_dir / "repos" / _slug(p)
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)  # a problem cut short last time starts clean
    ref_source = p.path.read_text()
    _init_repo(work, p.file_name, ref_source)

    env = {**os.environ, **slot.env(), **(extra_env or {}), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "okgit", "optimize", p.file_name, "--json", *_flag_args(flags)]
    try:
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        (logs / f"{_slug(p)}.log").write_text(_text(e.stderr))
        return result.model_copy(update={"status": "timeout", "wall_s": round(time.monotonic() - started, 1),
                                         "error": f"okgit optimize ran past {timeout_s:.0f} s"})
    (logs / f"{_slug(p)}.log").write_text(proc.stderr)
    if proc.returncode in (130, -2):
        raise _Interrupted()
    run = _run_result(work) if proc.returncode == 0 else None
    if run is None:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {proc.returncode}"
        return result.model_copy(update={"wall_s": round(time.monotonic() - started, 1), "error": reason[:500]})
    if run.get("status") == RunStatus.interrupted:
        raise _Interrupted()

    events = _journal(work, run.get("run_id", ""))
    evaluated = [e for e in events if e.get("type") == "evaluated"]
    finished: dict[str, Any] = next((e for e in reversed(events) if e.get("type") == "run_finished"), {})
    best_cand = finished.get("best_cand")
    best_tag = run.get("best_tag")
    correct = run.get("status") in CORRECT and bool(best_tag)
    update: dict[str, Any] = {
        "status": run.get("status", "error"), "correct": correct, "run_id": run.get("run_id"), "best_tag": best_tag,
        "gpu_s": round(sum(float(e.get("wall_s") or 0.0) for e in evaluated), 3),
        "llm_usd": float(run.get("cost_usd") or 0.0), "iterations": len(evaluated),
        "best_iteration": int(best_cand[1:]) if best_cand and best_cand[1:].isdigit() else None,
    }
    if correct:
        winner_path = out_dir / "winners" / f"{_slug(p)}.py"
        winner_path.parent.mkdir(parents=True, exist_ok=True)
        winner_path.write_text(git("show", f"{best_tag}:{p.file_name}", cwd=work))
        update.update(_baselines(p.path, winner_path, env, timer=timer, gpu=gpu, backend=flags.get("backend") or "triton"))
        if cross_check:
            data = _helper("crosscheck", p.path, winner_path, env, extra=[flags.get("backend") or "triton"])
            update["cross_check"] = CrossCheck(error=data) if isinstance(data, str) else CrossCheck.model_validate(data)
    else:  # no kernel: the user keeps the reference; its two baselines still place the problem
        times = _baselines(p.path, None, env, timer=timer, gpu=gpu)
        update.update({k: times[k] for k in ("eager_us", "compile_us") if times.get(k) is not None})
    update["wall_s"] = round(time.monotonic() - started, 1)
    return result.model_copy(update=update)


OUT_OF_MEMORY = ("out of memory", "OutOfMemoryError", "does not fit in memory")


def _out_of_memory(result: ProblemResult, out_dir: Path, p: KBProblem) -> bool:
    """Whether a problem that found nothing failed for memory: its error, its okgit's stderr or
    its run's journal says the device (or the host) ran out."""
    if result.correct:
        return False
    files = [out_dir / "logs" / f"{_slug(p)}.log"]
    if result.run_id:
        files.append(RunDir(out_dir / "repos" / _slug(p) / ".okgit" / "runs" / result.run_id).journal)
    texts = [result.error or ""] + [f.read_text(errors="replace") for f in files if f.is_file()]
    return any(sign in text for text in texts for sign in OUT_OF_MEMORY)


def _init_repo(work: Path, file_name: str, source: str) -> None:
    work.mkdir(parents=True)
    (work / file_name).write_text(source)
    # The user's global git settings (signing, hooks, templates) must not break the sweep's commits.
    ident = ["-c", "user.name=okgit bench", "-c", "user.email=okgit-bench@localhost", "-c", "commit.gpgsign=false",
             "-c", f"core.hooksPath={os.devnull}"]
    git("init", "-q", cwd=work)
    git(*ident, "add", file_name, cwd=work)
    git(*ident, "commit", "-q", "-m", f"KernelBench problem {file_name}", cwd=work)


def _flag_args(flags: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for k, v in flags.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args


def _last_json(stdout: str) -> dict[str, Any] | None:
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


def _journal(work: Path, run_id: str) -> list[dict[str, Any]]:
    from okgit.git.repo import Repo
    try:
        return RunDir(Repo.find(work).run_dir(run_id)).events()
    except OkgitError:  # not a repository, or no such run
        return []


def _baselines(ref: Path, winner: Path | None, env: dict[str, str], *,
               timer: Timer | None, gpu: bool, backend: str = "triton") -> dict[str, Any]:
    """Eager, torch.compile and the winner's times (no winner: the first two only)."""
    if timer is not None:
        times = timer(ref.read_text(), winner.read_text() if winner else None)
    elif gpu:
        data = _helper("baselines", ref, winner, env, extra=[backend] if winner else None)
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


def _helper(module: str, ref: Path, winner: Path | None, env: dict[str, str], extra: list[str] | None = None) -> dict[str, Any] | str:
    """Run okgit.kernelbench.<module> REF [WINNER] in a process pinned like the problem's run.

    Returns the JSON object it printed, or a one-line reason when the helper itself failed.
    """
    cmd = [sys.executable, "-m", f"okgit.kernelbench.{module}", str(ref), *([str(winner)] if winner else []), *(extra or [])]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HELPER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{module} ran past {HELPER_TIMEOUT_S:.0f} s"
    data = _last_json(proc.stdout) if proc.returncode == 0 else None
    if data is None:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        return f"{module} failed: {lines[-1] if lines else f'exit status {proc.returncode}'}"[:300]
    return data


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
