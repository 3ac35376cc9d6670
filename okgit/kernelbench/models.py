"""Level-3 problems (whole models) in a sweep: each one a model campaign, not a single run.

`okgit optimize MODEL.py --campaign --top N` runs in the problem's own small repository (as a
level-1 or level-2 problem's run does). The campaign itself times eager, torch.compile and the
patched model of the whole model in one process, interleaved, with each arm's noise
(okgit.campaign.model, through okgit.kernelbench.baselines); the sweep takes those figures, so
the model is not timed twice. Its patch (the winners' package and the two lines in the model
file) is applied in the problem's repository and the patched model kept as the winner. Without
a winner, eager and torch.compile are timed by the baselines helper as for every other problem.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from okgit.eval.parent.device_pool import Slot
from okgit.git.repo import git
from okgit.git.rundir import RunDir
from okgit.journal.events import Evaluated
from okgit.kernelbench.reader import KBProblem
from okgit.kernelbench.runs import ProblemInterrupted, Timer, Workspace, baselines, flag_args, last_json, slug
from okgit.kernelbench.scoring import ProblemResult
from okgit.status import RunStatus


def run_model_problem(p: KBProblem, slot: Slot, flags: dict[str, Any], out_dir: Path, timeout_s: float, *,
                      timer: Timer | None, gpu: bool, device: str, extra_env: dict[str, str] | None = None,
                      top: int = 4, stop: threading.Event | None = None) -> ProblemResult:
    """A whole model: one campaign over its top modules and chains. Stopped (`stop`): the campaign
    is interrupted and ProblemInterrupted raised; the next sweep starts it over."""
    result = ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, status="error", device=device)
    space = Workspace(p, out_dir, {**os.environ, **slot.env(), **(extra_env or {}), "PYTHONUNBUFFERED": "1"}, stop)
    space.create()
    proc = space.okgit(["optimize", p.file_name, "--campaign", "--top", str(top), "--json", *flag_args(flags)],
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
        "modules_swapped": int(end.get("modules_swapped") or 0) if swapped else 0,
        "gpu_s": _evaluations_s(Path(campaign["ops_repo"])) if campaign.get("ops_repo") else 0.0,
    }
    if swapped:
        update.update(_swapped(space, campaign["diff"], end))
    else:
        times = baselines(p.path, None, space.env, timer=timer, gpu=gpu, stop=space.stop)
        update.update({k: times[k] for k in ("eager_us", "compile_us") if times.get(k) is not None})
        if campaign.get("status") == RunStatus.interrupted:
            raise ProblemInterrupted()
    update["wall_s"] = space.wall_s()
    (space.logs / f"{slug(p)}.campaign.json").write_text(json.dumps(campaign, indent=1))
    return result.model_copy(update=update)


def _swapped(space: Workspace, diff: str, end: dict[str, Any]) -> dict[str, Any]:
    """The campaign's patch applied in the problem's repository (the winners' package beside the
    patched model file), kept as the winner; its times are the campaign's own (EndToEnd)."""
    p = space.problem
    git("apply", diff, cwd=space.work)
    space.winner_path().write_text((space.work / p.file_name).read_text())
    return _end_to_end(end)


def _end_to_end(end: dict[str, Any]) -> dict[str, Any]:
    """The sweep's figures from the campaign's own timing of the whole model (EndToEnd)."""
    if end.get("patched_us") is None:
        return {"untimed_reason": end.get("untimed") or "the campaign timed no whole model"}
    fields: dict[str, Any] = {"eager_us": end.get("eager_us"), "compile_us": end.get("compile_us"),
                              "okgit_us": end["patched_us"], "timed": True, "noise": end.get("arm_noise") or {}}
    if fields["eager_us"]:
        fields["speedup_eager"] = fields["eager_us"] / end["patched_us"]
    if fields["compile_us"]:
        fields["speedup_compile"] = fields["compile_us"] / end["patched_us"]
    if end.get("untimed"):
        fields["untimed_reason"] = end["untimed"]
    return fields


def _evaluations_s(ops_repo: Path) -> float:
    """Wall seconds of every candidate evaluation of the campaign's runs (their journals)."""
    return round(sum(e.wall_s or 0.0 for journal in ops_repo.glob(".okgit/runs/*/journal.jsonl")
                     for e in RunDir(journal.parent).events() if isinstance(e, Evaluated)), 3)
