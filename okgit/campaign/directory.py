"""`okgit optimize DIR/`: every op file under DIR as one campaign in the user's repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from okgit.campaign import core
from okgit.campaign.result import CampaignResult, write_outputs
from okgit.config import load_config
from okgit.errors import OkgitError
from okgit.fmt import fmt_count
from okgit.git.repo import Repo
from okgit.journal.events import Event
from okgit.paths import given_path


def optimize_dir(directory: Path, *, flags: dict[str, Any] | None = None, cwd: Path | None = None,
                 on_event: Callable[[Event], None] | None = None) -> CampaignResult:
    repo = Repo.working_in(cwd or Path.cwd(), directory)
    path = given_path(directory, cwd)
    if not path.is_dir():
        raise OkgitError(f"{directory}: no such directory")
    config = load_config(repo.root, flags)
    ops, skipped = core.find_ops(repo, path, config)
    if not ops:
        why = f" ({'; '.join(skipped)})" if skipped else ""
        raise OkgitError(f"{directory}: no op file found (KernelBench format: Model, get_inputs, get_init_inputs){why}")
    space = core.start_campaign(repo)
    space.announce(on_event, f"{fmt_count(len(ops), 'op file')} under {repo.relpath(path) or '.'}; "
                             f"starting the {config.eval} evaluator, then each reference is screened")
    dirty = [op for op in ops if repo.is_dirty(op)]
    outcome = core.run_problems(space, repo, ops, dict(flags or {}), on_event=on_event,
                                notes=tuple(f"skipped {line}" for line in skipped))
    diff = core.combined_diff(outcome.rows)
    if diff and not dirty:  # a dirty op's run started from its working-tree version, not from HEAD
        from okgit.git.patch import validate

        validate(repo, diff, space.base)
    result = CampaignResult(
        campaign_id=space.campaign_id, kind="ops", status=core.overall_status(outcome), device=outcome.device,
        backend=outcome.backend, ordered_by=outcome.ordered_by, problems=outcome.rows, skipped=skipped,
        report=str(space.dir / "report.md"), diff=str(space.dir / "report.diff"))
    write_outputs(space, result, diff)
    if outcome.interrupted:
        raise KeyboardInterrupt
    return result
