"""Diffs between okgit and the user: validate one, resolve a REF to one, apply, revert.

A REF is a run id (its report.diff), a tag `okgit/<run>/<cand>` (that candidate against the
run's base) or a diff file. Applying touches the working tree only (never the index), and
refuses when it would mix with the user's uncommitted work; each application is recorded
under .okgit/applied/ so `revert` can tell whether the files drifted since.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from okgit.errors import OkgitError
from okgit.git.campaigns import PREFIX, campaign_checked_on, campaign_diff, is_campaign_ref, resolve_campaign
from okgit.git.repo import Repo
from okgit.git.rundir import RunDir
from okgit.git.workspace import op_diff, resolve_run, started_event
from okgit.journal.events import Evaluated
from okgit.journal.runview import RunView

_TAG = re.compile(r"okgit/([^/]+)/([^/]+)")
_INDEX_LINE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)")
ABSENT = "0" * 40  # git's id for "no file": the preimage of a new file, the postimage of a deleted one


@dataclass(frozen=True)
class FileChange:
    source: str | None  # repository-relative path before (None: the diff creates the file)
    target: str | None  # after (None: the diff deletes it)
    pre: str | None  # blob id from the `index a..b` line, maybe abbreviated; None: no index line
    post: str | None


def changes(diff: str) -> list[FileChange]:
    """The files a diff touches, with the blob ids it expects before and after."""
    try:
        patch = PatchSet(diff)
    except UnidiffParseError as e:
        raise OkgitError(f"not a valid diff: {e}") from None
    if not len(patch):
        # unidiff skips lines it cannot read: colour codes or plain text leave no file at all
        raise OkgitError("empty diff: nothing to apply" if not diff.strip() else "not a diff (no file changes found)")
    out = []
    for f in patch:
        blobs = next((m.groups() for m in map(_INDEX_LINE.match, str(f.patch_info).splitlines()) if m), (None, None))
        out.append(FileChange(
            source=None if f.is_added_file else _strip(f.source_file),
            target=None if f.is_removed_file else _strip(f.target_file),
            pre=blobs[0], post=blobs[1],
        ))
    return out


def touched_files(diff: str) -> list[str]:
    paths = [p for c in changes(diff) for p in (c.source, c.target) if p]
    return list(dict.fromkeys(paths))


def validate(repo: Repo, diff: str, base: str) -> None:
    """Check that `diff` parses and applies to commit `base`, in a throwaway index."""
    changes(diff)
    with tempfile.TemporaryDirectory(prefix="okgit-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        repo.git("read-tree", base, env=env)
        _git_apply(repo, diff, "--check", "--cached", env=env, failure=f"the diff does not apply to {base[:12]}")


def resolve_ref(repo: Repo, ref: str) -> str:
    """REF as okgit records it: a run (its id, a unique prefix, `latest`, `latest~N`) becomes
    the full id, a tag `okgit/<run>/<cand>` gets its run's full id, a diff file stays as given.
    An unknown REF is returned as it is, for `resolve_diff` to refuse in its own words.
    A campaign (`campaign:<id>`, `campaign:latest`, ...) becomes `campaign:<full id>`."""
    if is_campaign_ref(ref):
        return PREFIX + resolve_campaign(repo, ref)
    tag = _TAG.fullmatch(ref)
    if tag and not Path(ref).is_file():
        try:
            return f"okgit/{resolve_run(repo, tag.group(1))}/{tag.group(2)}"
        except OkgitError:
            return ref
    if _is_run(repo, ref) or Path(ref).is_file():
        return ref
    try:
        return resolve_run(repo, ref)
    except OkgitError as e:
        if "ambiguous" in str(e):
            raise
        return ref


def resolve_diff(repo: Repo, ref: str) -> str:
    """The diff REF names: a tag's candidate against its run's base, a run's report.diff,
    or a diff file's text (see `resolve_ref` for the spellings of a run)."""
    ref = resolve_ref(repo, ref)
    if is_campaign_ref(ref):  # its combined patch
        return campaign_diff(repo, ref)
    tag = _TAG.fullmatch(ref)
    if tag and repo.git("rev-parse", "--verify", "--quiet", f"refs/tags/{ref}^{{commit}}", check=False).strip():
        started = started_event(repo, tag.group(1))
        return op_diff(repo, started.base, f"refs/tags/{ref}", started.op)
    if _is_run(repo, ref):
        return RunDir(repo.run_dir(ref)).winner_diff(
            f"run {ref}", f"run {ref} has no report.diff (still running or interrupted); "
            f"pick a candidate tag from: okgit history {ref}", lambda: _no_winner(repo, ref))
    if Path(ref).is_file():
        try:
            diff = Path(ref).read_text()
        except UnicodeDecodeError:
            raise OkgitError(f"{ref}: not a diff (not UTF-8 text)") from None
        try:
            changes(diff)  # `show` prints only what apply and verify would accept
        except OkgitError as e:
            raise OkgitError(f"{ref}: {e}") from None
        return diff
    raise OkgitError(f"unknown run, tag or diff file: {ref}")


def apply(repo: Repo, ref: str, check: bool = False) -> list[str]:
    """Apply REF's diff to the working tree (`check`: only tell whether it would)."""
    ref = resolve_ref(repo, ref)
    diff, found = _load(repo, ref)
    if _applies(repo, diff, "-R") and not _applies(repo, diff):
        raise OkgitError(f"{ref} is already applied to the working tree")
    for c in found:
        # A dirty file is fine only when it is exactly the diff's preimage: a run started
        # from the user's uncommitted version of the op.
        if c.source and repo.is_dirty(c.source) and not _same(repo.blob_of(c.source), c.pre):
            raise OkgitError(f"{c.source} has uncommitted changes; commit or stash them, then apply {ref}")
    _git_apply(repo, diff, "--check", failure=f"{ref} does not apply to the working tree")
    files = touched_files(diff)
    if not check:
        _git_apply(repo, diff, failure=f"{ref} does not apply to the working tree")
        _record(repo, ref, diff, found)
    return files


def checked_on(repo: Repo, ref: str) -> tuple[str, str] | None:
    """(device, backend) of the run or campaign REF names, as its first event says; None for a diff file."""
    ref = resolve_ref(repo, ref)
    if is_campaign_ref(ref):
        return campaign_checked_on(repo, ref)
    tag = _TAG.fullmatch(ref)
    run = tag.group(1) if tag else ref
    if not _is_run(repo, run):
        return None
    try:
        started = started_event(repo, run)
    except OkgitError:
        return None
    return started.device, started.backend


def _named_candidate(repo: Repo, ref: str) -> tuple[RunDir, str] | None:
    """The run directory and the candidate REF names (a tag, or a run's winner); None for a diff
    file or a run without a winner."""
    ref = resolve_ref(repo, ref)
    tag = _TAG.fullmatch(ref)
    run = tag.group(1) if tag else ref
    if not _is_run(repo, run):
        return None
    run_dir = RunDir(repo.run_dir(run))
    if tag:
        return run_dir, tag.group(2)
    try:
        best = json.loads(run_dir.result.read_text()).get("best_tag") or ""
    except (OSError, ValueError):
        return None
    return (run_dir, best.rsplit("/", 1)[-1]) if best else None


def kernel_shapes(repo: Repo, ref: str) -> list[dict[str, Any]]:
    """Where the candidate REF names (a tag, or a run's winner) ran its own kernels, as its
    evaluation recorded (okgit.eval.types.KernelShape); [] for a diff file or an older run."""
    named = _named_candidate(repo, ref)
    if named is None:
        return []
    run_dir, cand = named
    found = [e for e in run_dir.events() if isinstance(e, Evaluated) and e.cand == cand]
    return list(found[-1].kernel_shapes or []) if found else []


def profiles(repo: Repo, ref: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The profile of the candidate REF names and the reference's, as the run's journal holds
    them (a profiling pass's where one ran); (None, None) for a diff file."""
    named = _named_candidate(repo, ref)
    if named is None:
        return None, None
    run_dir, cand = named
    view = RunView()
    view.apply(run_dir.events())
    c = view.candidates.get(cand)
    return (c.profile if c else None), (view.reference.profile if view.reference else None)


def revert(repo: Repo, ref: str) -> list[str]:
    """Undo an applied REF in the working tree: whenever its reverse applies cleanly (other
    edits to the file since are kept). Otherwise refuse: "not applied" when okgit never applied
    it (no record under .okgit/applied/) or its forward diff still applies; "applied, then
    edited" naming the command that would try, when it was applied and its lines changed since."""
    ref = resolve_ref(repo, ref)
    diff, found = _load(repo, ref)
    record = _record_path(repo, diff)
    comparable = [(c.source, c.pre) for c in found if c.source and c.pre]
    if comparable and all(_same(repo.blob_of(source), pre) for source, pre in comparable):
        record.unlink(missing_ok=True)  # never applied, or undone by hand since
        raise OkgitError(f"{ref} is not applied in the working tree")
    try:
        _git_apply(repo, diff, "-R", "--check", failure=f"cannot revert {ref}")
    except OkgitError as e:
        if _applies(repo, diff) or not record.is_file():
            # Never applied by okgit (or undone since): the file's other edits are the user's own.
            record.unlink(missing_ok=True)
            raise OkgitError(f"{ref} is not applied in the working tree"
                             + ("" if _applies(repo, diff) else f" (okgit apply has no record of it, and its lines are "
                                f"not in {', '.join(touched_files(diff))})")) from None
        raise OkgitError(f"{e}: it was applied, then the lines it changed were edited; to revert what still fits "
                         f"and leave the rest in .rej files: okgit show {ref} | git apply -R --reject") from None
    _git_apply(repo, diff, "-R", failure=f"cannot revert {ref}")
    record.unlink(missing_ok=True)
    return touched_files(diff)


def applied(repo: Repo) -> dict[str, tuple[str, list[str]]]:
    """Runs whose diff (the winner's or a tag's) is applied to the working tree now, as
    run id -> (REF, files). A record whose diff is no longer there (committed over, undone
    by hand, its run gone) is stale: it is dropped, so it keeps nothing alive."""
    found: dict[str, tuple[str, list[str]]] = {}
    for record in sorted(repo.applied_dir.glob("*.json")) if repo.applied_dir.is_dir() else ():
        ref = json.loads(record.read_text()).get("ref", "")
        tag = _TAG.fullmatch(ref)
        run = tag.group(1) if tag else ref
        try:
            diff = resolve_diff(repo, ref)
        except OkgitError:
            diff = ""
        if not diff or not _applies(repo, diff, "-R") or _applies(repo, diff):
            record.unlink(missing_ok=True)
            continue
        if _is_run(repo, run):
            found[run] = (ref, touched_files(diff))
    return found


def _load(repo: Repo, ref: str) -> tuple[str, list[FileChange]]:
    diff = resolve_diff(repo, ref)
    try:
        return diff, changes(diff)
    except OkgitError as e:
        raise OkgitError(f"{ref}: {e}") from None


def _git_apply(repo: Repo, diff: str, *flags: str, env: dict[str, str] | None = None, failure: str) -> None:
    # At the root: from a subdirectory, git apply would skip paths outside it. nowarn: the
    # user's apply.whitespace=fix must not alter the lines (revert relies on exact blobs).
    try:
        repo.git("apply", "--whitespace=nowarn", *flags, input=diff, env=env)
    except OkgitError as e:
        reason = str(e).removeprefix("git apply: ")
        raise OkgitError(f"{failure}: {reason}") from None


def _applies(repo: Repo, diff: str, *flags: str) -> bool:
    try:
        _git_apply(repo, diff, *flags, "--check", failure="")
    except OkgitError:
        return False
    return True


def _record_path(repo: Repo, diff: str) -> Path:
    return repo.applied_dir / (hashlib.sha256(diff.encode()).hexdigest()[:16] + ".json")


def _record(repo: Repo, ref: str, diff: str, found: list[FileChange]) -> None:
    """Remember the blobs the application produced, for revert's drift check."""
    files = {}
    for c in found:
        path = c.target or c.source
        if path:
            files[path] = repo.blob_of(path) if c.target else ABSENT
    repo.ensure_excluded()
    repo.applied_dir.mkdir(parents=True, exist_ok=True)
    _record_path(repo, diff).write_text(json.dumps(
        {"ref": ref, "applied_at": round(time.time(), 3), "files": files}, indent=2) + "\n")


def _same(current: str | None, expected: str | None) -> bool:
    """Whether a file's blob (None: no file) matches an expected id (maybe abbreviated)."""
    if expected is None:  # the diff did not say: nothing to compare
        return True
    if set(expected) == {"0"}:
        return current is None
    return current is not None and current.startswith(expected)


def _is_run(repo: Repo, ref: str) -> bool:
    try:
        repo.run_dir(ref)
    except OkgitError:
        return False
    return True


def _strip(path: str) -> str:
    """`a/x.py` -> `x.py` (git's default prefixes; `git apply` strips one component too)."""
    return path.split("/", 1)[1] if "/" in path else path


def _no_winner(repo: Repo, run_id: str) -> str:
    """Why a finished run hands out nothing, from its result.json's status."""
    try:
        status = json.loads(RunDir(repo.run_dir(run_id)).result.read_text()).get("status")
    except (OSError, ValueError):
        status = None
    if status == "slower":
        return "its fastest correct candidate is slower than the baseline; the tag in okgit history keeps it"
    if status == "error":
        return "the final gate could not judge; okgit history says why"
    return "nothing passed every gate"
