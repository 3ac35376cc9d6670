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
from pathlib import Path
from typing import Any

from okgit.eval.parent.device_pool import Slot
from okgit.git.repo import git
from okgit.kernelbench.reader import KBProblem
from okgit.kernelbench.runs import ProblemInterrupted, Timer, Workspace, baselines, flag_args, last_json, slug
from okgit.kernelbench.scoring import ProblemResult
from okgit.status import RunStatus

CAMPAIGN_TOP = 4  # modules optimized per model


def run_model_problem(p: KBProblem, slot: Slot, flags: dict[str, Any], out_dir: Path, timeout_s: float, *,
                      timer: Timer | None, gpu: bool, device: str, extra_env: dict[str, str] | None = None) -> ProblemResult:
    result = ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, status="error", device=device)
    space = Workspace(p, out_dir, {**os.environ, **slot.env(), **(extra_env or {}), "PYTHONUNBUFFERED": "1"})
    space.create()
    proc = space.okgit(["optimize", p.file_name, "--campaign", "--top", str(CAMPAIGN_TOP), "--json", *flag_args(flags)],
                       timeout_s, "okgit optimize --campaign")
    if isinstance(proc, dict):
        return result.model_copy(update=proc)
    campaign = last_json(proc.stdout) if proc.returncode == 0 else None
    if campaign is None:
        return result.model_copy(update=space.failed(proc))
    end = campaign.get("end_to_end") or {}
    swapped = bool(end.get("ok") and end.get("swapped"))
    update: dict[str, Any] = {
        "status": campaign.get("status", "error"), "correct": swapped, "run_id": campaign.get("campaign_id"),
        "best_tag": f"campaign:{campaign.get('campaign_id')}" if swapped else None,
        "iterations": sum(int(r.get("iterations") or 0) for r in campaign.get("problems") or []),
    }
    if swapped:
        update.update(_swapped(space, campaign["diff"], timer, gpu))
    else:
        times = baselines(p.path, None, space.env, timer=timer, gpu=gpu)
        update.update({k: times[k] for k in ("eager_us", "compile_us") if times.get(k) is not None})
        if campaign.get("status") == RunStatus.interrupted:
            raise ProblemInterrupted()
    update["wall_s"] = space.wall_s()
    (space.logs / f"{slug(p)}.campaign.json").write_text(json.dumps(campaign, indent=1))
    return result.model_copy(update=update)


def _swapped(space: Workspace, diff: str, timer: Timer | None, gpu: bool) -> dict[str, Any]:
    """The campaign's patch applied in the problem's repository (the winners' package beside the
    patched model file), kept as the winner, and timed where it can be."""
    p = space.problem
    git("apply", diff, cwd=space.work)
    space.winner_path().write_text((space.work / p.file_name).read_text())
    if timer is not None:  # Modal times sources, and the patched model needs its package beside it
        return {"untimed_reason": "a whole model's winners are timed locally only (they import their package)"}
    with_package = {**space.env, "PYTHONPATH": os.pathsep.join([str(space.work), space.env.get("PYTHONPATH", "")])}
    return baselines(p.path, space.work / p.file_name, with_package, timer=None, gpu=gpu)
