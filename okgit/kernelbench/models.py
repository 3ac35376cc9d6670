"""Level-3 problems (whole models) in a sweep: each one a model campaign, not a single run.

`okgit optimize MODEL.py --campaign` runs in the problem's own small repository (as a level-1
or level-2 problem's run does); its patch (the winners' package and the two lines in the model
file) is applied there, and eager, torch.compile and the patched model are timed by the same
baselines helper as every other problem, with the repository on the helper's import path so
the patched model finds its package. The campaign's own end-to-end figure (interleaved rounds)
is in its result.json, under the problem's repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from okgit.eval.parent.device_pool import Slot
from okgit.eval.types import BaselineTimes
from okgit.git.repo import git
from okgit.kernelbench.reader import KBProblem
from okgit.kernelbench.scoring import ProblemResult
from okgit.status import RunStatus

CAMPAIGN_TOP = 4  # modules optimized per model


def run_model_problem(p: KBProblem, slot: Slot, flags: dict[str, Any], out_dir: Path, timeout_s: float, *,
                      timer: Callable[[str, str | None], BaselineTimes] | None, gpu: bool, device: str,
                      extra_env: dict[str, str] | None = None) -> ProblemResult:
    from okgit.kernelbench import sweep

    started = time.monotonic()
    result = ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, status="error", device=device)
    work = out_dir / "repos" / sweep._slug(p)
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    import shutil

    shutil.rmtree(work, ignore_errors=True)  # a problem cut short last time starts clean
    sweep._init_repo(work, p.file_name, p.path.read_text())
    env = {**os.environ, **slot.env(), **(extra_env or {}), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "okgit", "optimize", p.file_name, "--campaign", "--top", str(CAMPAIGN_TOP), "--json",
           *sweep._flag_args(flags)]
    try:
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        (logs / f"{sweep._slug(p)}.log").write_text(sweep._text(e.stderr))
        return result.model_copy(update={"status": "timeout", "wall_s": round(time.monotonic() - started, 1),
                                         "error": f"okgit optimize --campaign ran past {timeout_s:.0f} s"})
    (logs / f"{sweep._slug(p)}.log").write_text(proc.stderr)
    if proc.returncode in (130, -2):
        raise KeyboardInterrupt
    campaign = sweep._last_json(proc.stdout) if proc.returncode == 0 else None
    if campaign is None:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {proc.returncode}"
        return result.model_copy(update={"wall_s": round(time.monotonic() - started, 1), "error": reason[:500]})
    end = campaign.get("end_to_end") or {}
    swapped = bool(end.get("ok") and end.get("swapped"))
    update: dict[str, Any] = {
        "status": campaign.get("status", "error"), "correct": swapped, "run_id": campaign.get("campaign_id"),
        "best_tag": f"campaign:{campaign.get('campaign_id')}" if swapped else None,
        "iterations": sum(int(r.get("iterations") or 0) for r in campaign.get("problems") or []),
    }
    if swapped:
        git("apply", campaign["diff"], cwd=work)  # the winners' package beside the patched model file
        winner = out_dir / "winners" / f"{sweep._slug(p)}.py"
        winner.parent.mkdir(parents=True, exist_ok=True)
        winner.write_text((work / p.file_name).read_text())
        if timer is not None:  # Modal times sources, and the patched model needs its package beside it
            update["untimed_reason"] = "a whole model's winners are timed locally only (they import their package)"
        else:
            with_package = {**env, "PYTHONPATH": os.pathsep.join([str(work), env.get("PYTHONPATH", "")])}
            update.update(sweep._baselines(p.path, work / p.file_name, with_package, timer=None, gpu=gpu))
    else:
        times = sweep._baselines(p.path, None, env, timer=timer, gpu=gpu)
        update.update({k: times[k] for k in ("eager_us", "compile_us") if times.get(k) is not None})
        if campaign.get("status") == RunStatus.interrupted:
            raise KeyboardInterrupt
    update["wall_s"] = round(time.monotonic() - started, 1)
    (logs / f"{sweep._slug(p)}.campaign.json").write_text(json.dumps(campaign, indent=1))
    return result.model_copy(update=update)
