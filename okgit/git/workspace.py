"""A run's place in the repository: its worktree, branch, commits, tags and run directory.

Layout: worktree `.okgit/worktrees/<run>` on branch `okgit/<run>`, run directory
`.okgit/runs/<run>/` (journal.jsonl, traces.jsonl, reports). Candidates are committed on the
run's branch as a linear chain and tagged `okgit/<run>/<cand>`; the tags keep them reachable
after the worktree is removed. Nothing of the user's (HEAD, branch, index, working tree,
stash, hooks) is touched: the worktree has its own index and HEAD, and every commit is made
with okgit's identity and no hooks.

A live run holds the lock `<run dir>/.lock` (okgit.locks) for the life of its process, so `gc` and
`history` can tell a live run from one that died.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from filelock import FileLock

from okgit.errors import OkgitError
from okgit.git.repo import Repo
from okgit.git.rundir import RunDir
from okgit.journal.events import RunStarted
from okgit.journal.files import Journal, JsonlWriter
from okgit.journal.runview import RunView
from okgit.locks import is_held, try_hold
from okgit.status import RESUMABLE

# Environment for okgit's own commits: the identity variables win over any user config or
# GIT_AUTHOR_* of the caller; automatic gc stays off so a commit never repacks the user's repo.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "okgit", "GIT_AUTHOR_EMAIL": "okgit@localhost",
    "GIT_COMMITTER_NAME": "okgit", "GIT_COMMITTER_EMAIL": "okgit@localhost",
}
_COMMIT_CONFIG = ("-c", "commit.gpgsign=false", "-c", "gc.auto=0", "-c", "maintenance.auto=false")


def new_run_id() -> str:
    """UTC time plus 4 random hex digits: sorts by start time; start_run makes it unique."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def run_id_time(run_id: str) -> datetime | None:
    try:
        return datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


@dataclass
class RunSpace:
    run_id: str
    repo: Repo
    op: str  # repository-relative posix path of the op file
    worktree: Path
    run_dir: Path
    branch: str
    base_commit: str
    base_dirty: bool  # the base is the user's uncommitted working-tree version of the op
    journal: Journal
    traces: JsonlWriter
    _holder: FileLock | None = field(default=None, repr=False, compare=False)

    def started_fields(self) -> dict[str, Any]:
        """The workspace's part of the `run_started` event; `resume` reads it back."""
        return {
            "op": self.op,
            "base": self.base_commit,
            "base_dirty": self.base_dirty,
            "branch": self.branch,
            "worktree": self.worktree.relative_to(self.repo.root).as_posix(),
        }

    def hold(self) -> None:
        """Mark this run live for as long as this process lives (or until `close`)."""
        if self._holder is not None:
            return
        self._holder = try_hold(self.run_dir / ".lock")
        if self._holder is None:
            raise OkgitError(f"run {self.run_id} is in use by another okgit process")

    def accept(self, cand: str, source: str, message: str) -> tuple[str, str]:
        """Commit `source` as the op file on the run's branch and tag it; (tag, commit)."""
        (self.worktree / self.op).write_bytes(source.encode())
        tag = f"okgit/{self.run_id}/{cand}"
        with self.repo.lock():
            commit = self._commit(message)
            self.repo.git("update-ref", f"refs/tags/{tag}", commit, "")  # "": must not exist yet
        return tag, commit

    def diff(self, rev: str) -> str:
        """The op's diff from the run's base to `rev`, as `git apply` takes it at the root."""
        return op_diff(self.repo, self.base_commit, rev, self.op)

    def close(self, winner_commit: str | None = None, accepted: bool = True) -> None:
        """Remove the worktree (tags and branch keep the commits) and end the run's liveness.

        With a winner (a commit or a tag), the branch okgit/<run> is left pointing at it;
        a finished run that accepted nothing (`accepted` False) leaves no branch at all.
        """
        with self.repo.lock():
            remove_worktree(self.repo, self.worktree)
            if winner_commit:
                self.repo.git("update-ref", f"refs/heads/{self.branch}", f"{winner_commit}^{{commit}}")
            elif not accepted:
                self.repo.git("update-ref", "-d", f"refs/heads/{self.branch}", check=False)
        self._release()

    def discard(self) -> None:
        """Remove every trace of a run refused before its search began (a reference that
        cannot be run or judged, Ctrl-C while it is prepared): worktree, branch, run directory."""
        with self.repo.lock():
            remove_worktree(self.repo, self.worktree)
            self.repo.git("update-ref", "-d", f"refs/heads/{self.branch}", check=False)
            self._release()
            shutil.rmtree(self.run_dir, ignore_errors=True)
            for made in (self.repo.runs_dir, self.repo.worktrees_dir):  # by this run, if it was the first
                with contextlib.suppress(OSError):  # not empty: other runs live there
                    made.rmdir()

    def _release(self) -> None:
        if self._holder is not None:
            self._holder.release()
            self._holder = None

    def _commit(self, message: str) -> str:
        wt = self.worktree
        self.repo.git("add", "--", f":(top,literal){self.op}", cwd=wt)
        self.repo.git(*_COMMIT_CONFIG, "commit", "--quiet", "--no-verify", "--allow-empty",
                      "-m", message, cwd=wt, env=_IDENTITY)
        return self.repo.git("rev-parse", "HEAD", cwd=wt).strip()


def op_diff(repo: Repo, base: str, rev: str, op: str) -> str:
    """Diff of one file between two commits: a/ b/ paths from the root, full `index` lines.

    Plumbing (`diff-tree`) ignores the user's porcelain diff settings (noprefix, colour,
    external diff tools), so the text is the same on every machine.
    """
    return repo.git("diff-tree", "-p", "--full-index", "--no-renames", base, rev, "--", f":(top,literal){op}")


def check_op(repo: Repo, op_path: Path | str) -> str:
    """The op file's repository-relative path, or a one-line refusal: missing, outside, not committed."""
    path = Path(op_path)
    if not path.exists():
        raise OkgitError(f"{op_path}: no such file")
    if not path.is_file():
        raise OkgitError(f"{op_path}: not a file")
    rel = repo.relpath(path)
    why = repo.uncommitted(rel)
    if why:
        raise OkgitError(f"{op_path}: {why} (commit it first; okgit optimizes committed files)")
    return rel


def start_run(repo: Repo, op_path: Path | str) -> RunSpace:
    """Create a run: its directory, its worktree on okgit/<run> from HEAD, its base commit."""
    rel = check_op(repo, op_path)
    head = repo.head()
    dirty = repo.is_dirty(rel)
    with repo.lock():  # concurrent runs draw their ids under it: the check below cannot race
        repo.ensure_excluded()
        run_id = new_run_id()
        while (repo.runs_dir / run_id).exists():  # two runs in one second share their first 15 characters
            run_id = new_run_id()
        run_dir = repo.runs_dir / run_id
        worktree = repo.worktrees_dir / run_id
        branch = f"okgit/{run_id}"
        run_dir.mkdir(parents=True)
        space = RunSpace(
            run_id=run_id, repo=repo, op=rel, worktree=worktree, run_dir=run_dir, branch=branch,
            base_commit=head, base_dirty=dirty,
            journal=Journal(RunDir(run_dir).journal, run_id),
            traces=JsonlWriter(RunDir(run_dir).traces, run_id),
        )
        try:
            space.hold()
            repo.git("worktree", "add", "--quiet", "-b", branch, str(worktree), head)
        except BaseException:
            space._release()
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
    if dirty:
        # The user's uncommitted version is what they want faster: it becomes the base,
        # committed on the run's branch only.
        shutil.copyfile(repo.root / rel, worktree / rel)
        with repo.lock():
            space.base_commit = space._commit(f"okgit: base = working-tree version of {rel}")
    return space


def started_event(repo: Repo, run_id: str) -> RunStarted:
    """The run's `run_started` journal event (the first one: a resume does not change it)."""
    events = RunDir(repo.run_dir(run_id)).events()
    for event in events:
        if isinstance(event, RunStarted):
            return event
    raise OkgitError(f"run {run_id} has no run_started event in its journal")


def resume(repo: Repo, run_id: str) -> RunSpace:
    """Reopen a run, re-creating its worktree from branch okgit/<run> if it was removed."""
    run_dir = repo.run_dir(run_id)
    started = started_event(repo, run_id)
    worktree = repo.worktrees_dir / run_id
    space = RunSpace(
        run_id=run_id, repo=repo, op=started.op, worktree=worktree, run_dir=run_dir,
        branch=started.branch, base_commit=started.base, base_dirty=started.base_dirty,
        journal=Journal(RunDir(run_dir).journal, run_id),
        traces=JsonlWriter(RunDir(run_dir).traces, run_id),
    )
    with repo.lock():
        space.hold()
        if not (worktree / ".git").exists():
            repo.git("worktree", "prune")
            if not repo.git("rev-parse", "--verify", "--quiet", f"refs/heads/{space.branch}", check=False).strip():
                space._release()
                raise OkgitError(f"run {run_id} cannot be resumed: its branch {space.branch} is gone")
            repo.git("worktree", "add", "--quiet", str(worktree), space.branch)
    return space


def run_ids(repo: Repo) -> list[str]:
    """Every run, newest first: by the time of the journal's first event (run ids only have
    seconds), else by the time in the run id."""
    return newest_first(repo.runs_dir)


def newest_first(root: Path) -> list[str]:
    """The directories under `root` that hold a journal (runs, campaigns), newest first."""
    if not root.is_dir():
        return []

    def started(run_dir: Path) -> tuple[float, str]:
        try:
            with open(RunDir(run_dir).journal, "rb") as f:
                return float(json.loads(f.readline())["ts"]), run_dir.name
        except (OSError, ValueError, KeyError, TypeError):
            stamp = run_id_time(run_dir.name)
            return (stamp.timestamp() if stamp else 0.0), run_dir.name

    dirs = [d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")]
    return [d.name for d in sorted(dirs, key=started, reverse=True)]


_LATEST = re.compile(r"latest(?:~(\d+))?")


def resolve_run(repo: Repo, ref: str) -> str:
    """The run id a user means: the full id, `latest` (the newest run), `latest~N` (N runs
    before it), or a unique prefix of the id, with or without its date (`074318` names
    `20260101-074318-ab12`). Anything else is a one-line error."""
    return resolve_among(run_ids(repo), ref, "run", "no runs yet (start one with: okgit optimize PATH)")


def resolve_among(ids: list[str], ref: str, noun: str, none_yet: str) -> str:
    """`ref` among `ids` (newest first) with the spellings of `resolve_run`; campaigns share them."""
    latest = _LATEST.fullmatch(ref)
    if latest:
        n = int(latest.group(1) or 0)
        if n >= len(ids):
            raise OkgitError(f"{ref}: " + (f"there are only {len(ids)} {noun}s" if ids else none_yet))
        return ids[n]
    if ref in ids:
        return ref
    found = [r for r in ids if ref and "/" not in ref and (r.startswith(ref) or r[9:].startswith(ref))]
    if len(found) == 1:
        return found[0]
    if found:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise OkgitError(f"{noun} {ref} is ambiguous: {len(found)} {noun}s match ({shown}); type more of the id")
    raise OkgitError(f"unknown {noun}: {ref}")


def is_live(run_dir: Path) -> bool:
    """Whether a process holds the run (see RunSpace.hold)."""
    return is_held(run_dir / ".lock")


def resumable(repo: Repo, run_id: str) -> bool:
    """Whether a run can still go on: its journal ends without a final run_finished."""
    view = RunView()
    view.apply(RunDir(repo.runs_dir / run_id).events())
    return view.finished is None or view.finished.status in RESUMABLE


def remove_worktree(repo: Repo, worktree: Path) -> None:
    if worktree.exists():
        # --force: a candidate may have been written but not committed when the run died.
        repo.git("worktree", "remove", "--force", str(worktree), check=False)
        shutil.rmtree(worktree, ignore_errors=True)  # when git no longer knew it as a worktree
    repo.git("worktree", "prune")
