"""`okgit gc`: worktrees of runs no process holds, branches of finished runs and, when asked,
old runs removed, keeping what a live run, `okgit revert` or `--resume` still needs (and every
campaign: it says so)."""

from __future__ import annotations

import shutil

from pydantic import BaseModel

from okgit.errors import OkgitError
from okgit.fmt import fmt_count
from okgit.git.campaigns import campaign_ids
from okgit.git.patch import applied
from okgit.git.repo import Repo
from okgit.git.workspace import is_live, remove_worktree, resolve_run, resumable, run_ids, started_event


class GcReport(BaseModel):
    """What `okgit gc` removed and what it kept, with the reason for each kept thing."""

    removed: list[str] = []
    kept: list[str] = []

    def text(self) -> str:
        lines = [f"removed {r}" for r in self.removed] + [f"kept {k}" for k in self.kept]
        return "\n".join(lines) or "nothing to remove"


def gc(repo: Repo, keep: int = 20, runs: bool = False, names: list[str] | None = None,
       interrupted: bool = False) -> GcReport:
    """Remove worktrees of runs no process holds and the branches of finished runs (their
    tags keep the candidates); with `runs`, also all but the newest `keep` finished runs
    (directory, tags, branch). Runs whose diff is applied to the working tree are kept, so
    `okgit revert` still works; interrupted runs keep their branch, so `--resume` does, and
    `runs` never removes one unless it is named (`names`: exactly these runs) or `interrupted`."""
    if keep < 0:  # not clamped to 0: that would remove every finished run
        raise OkgitError(f"--keep {keep}: a number of runs to keep, 0 or more")
    report = GcReport()
    with repo.lock():
        _remove_worktrees(repo, report)
        ids = run_ids(repo)
        live = {r for r in ids if is_live(repo.runs_dir / r)}
        report.kept += [f"run {r}: running" for r in ids if r in live]
        in_use = applied(repo) if runs else {}
        for run_id, (ref, files) in in_use.items():
            report.kept.append(f"run {run_id}: its diff is applied to {', '.join(files)} (okgit revert {ref} undoes it)")
        finished = [r for r in ids if r not in live and r not in in_use]
        named = [resolve_run(repo, n) for n in names or []]
        if runs:
            _remove_runs(repo, report, finished, live, named, keep=keep, interrupted=interrupted)
        elif finished:
            tags = sum(t.split("/")[1] in finished for t in repo.git("tag", "--list", "okgit/*/*").split())
            report.kept.append(f"{fmt_count(len(finished), 'finished run')}: their directories and "
                               f"{fmt_count(tags, 'tag')} (gc --runs removes all but the newest {keep})")
        _remove_branches(repo, report, finished[:keep] if runs else finished)
        campaigns = len(campaign_ids(repo))
        if campaigns:
            report.kept.append(f"{fmt_count(campaigns, 'campaign')}: {'its directory' if campaigns == 1 else 'their directories'} under "
                               ".okgit/campaigns (gc never removes a campaign; its report.diff does not need its runs)")
    return report


def _remove_worktrees(repo: Repo, report: GcReport) -> None:
    """The worktrees of runs no process holds."""
    if repo.worktrees_dir.is_dir():
        for worktree in sorted(repo.worktrees_dir.iterdir()):
            if not is_live(repo.runs_dir / worktree.name):
                remove_worktree(repo, worktree)
                report.removed.append(f"worktree {worktree.name}")
    repo.git("worktree", "prune")


def _remove_runs(repo: Repo, report: GcReport, finished: list[str], live: set[str], named: list[str], *,
                 keep: int, interrupted: bool) -> None:
    """`--runs`: the named runs, or all finished runs but the newest `keep`; an interrupted
    one only when named or `interrupted` (it could resume)."""
    doomed = [r for r in named if r in finished] if named else finished[keep:]
    for run_id in named:
        if run_id not in finished:
            report.kept.append(f"run {run_id}: {'running' if run_id in live else 'its diff is applied'}")
    for run_id in doomed:
        can_resume = resumable(repo, run_id)
        if can_resume and not (interrupted or named):
            report.kept.append(f"run {run_id}: interrupted; okgit optimize {_op(repo, run_id)} --resume {run_id} "
                               "continues it (gc --runs --interrupted, or naming it, removes it)")
            continue
        tags = len(repo.git("tag", "--list", f"okgit/{run_id}/*").split())
        _delete_refs(repo, run_id)
        shutil.rmtree(repo.runs_dir / run_id)
        report.removed.append(f"run {run_id}" + (" (interrupted: it can no longer resume)" if can_resume else "")
                              + f": its directory, branch and {fmt_count(tags, 'tag')}")
    if finished[:keep] and not named:
        n = len(finished[:keep])
        report.kept.append(f"the newest finished run (--keep {keep})" if n == 1
                           else f"the {n} newest finished runs (--keep {keep})")


def _remove_branches(repo: Repo, report: GcReport, finished: list[str]) -> None:
    """The branches of these finished runs (their tags keep the candidates), but an interrupted
    run's, which `--resume` needs."""
    for run_id in finished:
        branch = f"refs/heads/okgit/{run_id}"
        if not repo.git("rev-parse", "--verify", "--quiet", branch, check=False).strip():
            continue
        if resumable(repo, run_id):
            report.kept.append(f"branch okgit/{run_id}: the run was interrupted "
                               f"(okgit optimize {_op(repo, run_id)} --resume {run_id} continues it)")
        else:
            repo.git("update-ref", "-d", branch)
            report.removed.append(f"branch okgit/{run_id} (finished; its tags keep the candidates)")


def _op(repo: Repo, run_id: str) -> str:
    try:
        return started_event(repo, run_id).op
    except (OkgitError, KeyError):
        return "PATH"


def _delete_refs(repo: Repo, run_id: str) -> None:
    refs = repo.git("for-each-ref", "--format=%(refname)", f"refs/tags/okgit/{run_id}",
                    f"refs/heads/okgit/{run_id}").split()
    if refs:
        repo.git("update-ref", "--stdin", input="".join(f"delete {ref}\n" for ref in refs))
