"""A run's worktree, commits and tags, against real repositories: the user's state must not move."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import OP, OP_SOURCE, crashed_run, record_run, sh, snapshot, variant

from okgit.errors import OkgitError
from okgit.git.gc import gc
from okgit.git.repo import Repo
from okgit.git.workspace import is_live, new_run_id, resume, start_run


def test_run_id_sorts_by_time() -> None:
    ids = [new_run_id() for _ in range(50)]
    assert all(len(i) == 20 and i[8] == "-" and i[15] == "-" for i in ids)
    assert ids == sorted(ids, key=lambda i: i[:15])


def test_runs_started_in_one_second_get_distinct_ids(git_repo: Path, monkeypatch) -> None:
    """4 random hex digits collide now and then within a second: start_run draws again."""
    import okgit.git.workspace as ws

    draws = iter(["aaaa", "aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr(ws.secrets, "token_hex", lambda n: next(draws))
    monkeypatch.setattr(ws, "datetime", _FrozenClock)
    first = start_run(Repo.find(git_repo), git_repo / OP)
    second = start_run(Repo.find(git_repo), git_repo / OP)
    try:
        assert first.run_id.endswith("-aaaa") and second.run_id.endswith("-bbbb")
        assert first.run_id[:15] == second.run_id[:15]
    finally:
        first.close(winner_commit=None)
        second.close(winner_commit=None)


class _FrozenClock:
    @staticmethod
    def now(tz=None):
        from datetime import datetime

        return datetime(2026, 11, 29, 12, 0, 0, tzinfo=tz)


def test_run_lifecycle_leaves_the_user_untouched(git_repo: Path) -> None:
    before = snapshot(git_repo)
    space, tags = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp"), ("x.clamp(min=0)", "method clamp")])
    assert snapshot(git_repo) == before

    assert tags == [f"okgit/{space.run_id}/c001", f"okgit/{space.run_id}/c002"]
    # A linear chain on the run's branch, made by okgit, not by the user's identity.
    c1, c2 = (sh(git_repo, "rev-parse", t).strip() for t in tags)
    assert sh(git_repo, "rev-parse", f"{c2}^").strip() == c1
    assert sh(git_repo, "rev-parse", f"{c1}^").strip() == space.base_commit == before["head_commit"].strip()
    okgit_identity = "okgit <okgit@localhost>|okgit <okgit@localhost>"
    assert sh(git_repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", c2).strip() == okgit_identity
    assert sh(git_repo, "show", f"{c2}:{OP}") == variant("x.clamp(min=0)")
    # Closed: worktree gone, branch at the winner, .okgit hidden through info/exclude only.
    assert not space.worktree.exists()
    assert sh(git_repo, "rev-parse", space.branch).strip() == c2
    assert "/.okgit/" in (git_repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert ".okgit" not in sh(git_repo, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all")
    assert not is_live(space.run_dir)


def test_diff_is_reviewable_whatever_the_users_diff_settings(git_repo: Path) -> None:
    space, tags = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])
    diff = space.diff(tags[0])
    assert diff.startswith(f"diff --git a/{OP} b/{OP}\nindex ")  # despite diff.noprefix and color.ui
    assert "\x1b[" not in diff
    assert "-        return torch.relu(x)\n+        return torch.clamp_min(x, 0.0)\n" in diff


def test_dirty_op_file_becomes_the_base(git_repo: Path) -> None:
    dirty = OP_SOURCE.replace("dim = 64", "dim = 128")
    (git_repo / OP).write_text(dirty)
    before = snapshot(git_repo)
    space = start_run(Repo.find(git_repo), git_repo / OP)
    assert space.base_dirty
    assert sh(git_repo, "rev-parse", f"{space.base_commit}^").strip() == before["head_commit"].strip()
    assert sh(git_repo, "show", f"{space.base_commit}:{OP}") == dirty
    assert sh(git_repo, "log", "-1", "--format=%s", space.base_commit).strip() == f"okgit: base = working-tree version of {OP}"
    space.accept("c001", dirty.replace("torch.relu(x)", "x.clamp(min=0)"), "okgit: c001")
    space.close()
    assert snapshot(git_repo) == before


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("ops/missing.py", "ops/missing.py: no such file"),
        ("notes.txt", "notes.txt: not tracked by git"),
        # its patch would be against HEAD, which lacks it (okgit verify would not find it)
        ("ops/staged.py", r"ops/staged.py: staged but never committed \(commit it first"),
        ("ops", "ops: not a file"),
        ("../outside.py", "outside the repository"),
    ],
)
def test_start_run_refuses(git_repo: Path, monkeypatch: pytest.MonkeyPatch, path: str, message: str) -> None:
    (git_repo.parent / "outside.py").write_text(OP_SOURCE)
    (git_repo / "ops" / "staged.py").write_text(OP_SOURCE)
    sh(git_repo, "add", "ops/staged.py")
    monkeypatch.chdir(git_repo)
    before = snapshot(git_repo)
    with pytest.raises(OkgitError, match=message) as err:
        start_run(Repo.find(git_repo), path)
    assert "\n" not in str(err.value)
    assert snapshot(git_repo) == before
    assert not (git_repo / ".okgit" / "runs").exists() or not any((git_repo / ".okgit" / "runs").iterdir())


def test_interrupted_run_is_collected_then_resumed(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    live, _ = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")], finish=None)
    assert is_live(live.run_dir) and live.worktree.exists()
    assert gc(repo).removed == []  # a live run keeps its worktree
    assert gc(repo).kept == [f"run {live.run_id}: running"]
    live.close()

    run_id = crashed_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])
    worktree = repo.worktrees_dir / run_id
    assert worktree.exists() and not is_live(repo.runs_dir / run_id)  # the flock died with the process
    report = gc(repo)
    assert report.removed == [f"worktree {run_id}"]  # an interrupted run keeps its branch, for --resume
    assert f"branch okgit/{run_id}: the run was interrupted (okgit optimize {OP} --resume {run_id} continues it)" in report.kept
    assert not worktree.exists()

    again = resume(repo, run_id)
    head = snapshot(git_repo)["head_commit"].strip()
    assert (again.op, again.base_commit, again.base_dirty, again.branch) == (OP, head, False, f"okgit/{run_id}")
    assert again.worktree == worktree and (worktree / OP).read_text() == variant("torch.clamp_min(x, 0.0)")
    assert is_live(again.run_dir)
    with pytest.raises(OkgitError, match="in use by another okgit process"):
        resume(repo, run_id)
    tag, _ = again.accept("c002", variant("x.clamp(min=0)"), "okgit: c002")
    again.close()
    assert sh(git_repo, "rev-parse", f"{tag}^").strip() == sh(git_repo, "rev-parse", f"okgit/{run_id}/c001").strip()


def test_gc_removes_old_runs_with_their_refs(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    old, old_tags = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])
    new, _ = record_run(git_repo, [("x.clamp(min=0)", "method clamp")])
    live, _ = record_run(git_repo, [], finish=None)
    before = snapshot(git_repo)

    report = gc(repo, keep=1, runs=True)
    assert report.removed == [f"run {old.run_id}: its directory, branch and 1 tag",
                              f"branch okgit/{new.run_id} (finished; its tags keep the candidates)"]
    assert report.kept == [f"run {live.run_id}: running", "the newest finished run (--keep 1)"]
    assert not old.run_dir.exists() and new.run_dir.exists() and live.run_dir.exists() and live.worktree.exists()
    assert sh(git_repo, "tag", "--list", f"okgit/{old.run_id}/*") == ""
    assert sh(git_repo, "branch", "--list", old.branch) == ""
    assert sh(git_repo, "branch", "--list", new.branch) == ""  # finished: its tags keep its candidates
    assert sh(git_repo, "tag", "--list", f"okgit/{new.run_id}/*").strip()
    assert snapshot(git_repo) == before
    live.close()


_WORKER = textwrap.dedent(
    """
    import sys
    from okgit.git.repo import Repo
    from okgit.git.workspace import start_run
    sys.path.insert(0, sys.argv[2])
    from conftest import variant
    space = start_run(Repo.find(sys.argv[1]), sys.argv[1] + "/ops/relu.py")
    for i in range(4):
        space.accept(f"c{i:03d}", variant(f"torch.relu(x) * {i + 1}"), f"okgit: c{i:03d}")
    space.close()
    print(space.run_id)
    """
)


def test_two_concurrent_runs_in_separate_processes(git_repo: Path) -> None:
    before = snapshot(git_repo)
    tests_dir = str(Path(__file__).parents[1])
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(git_repo), tests_dir], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    run_ids = [out.strip() for out, _ in outs]
    assert len(set(run_ids)) == 2
    for run_id in run_ids:
        assert len(sh(git_repo, "tag", "--list", f"okgit/{run_id}/*").split()) == 4
    assert sh(git_repo, "worktree", "list").count("\n") == 1
    assert snapshot(git_repo) == before


def test_gc_runs_keeps_an_interrupted_run_unless_it_is_named(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    stopped = crashed_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])  # oldest: past --keep 1
    record_run(git_repo, [("x.clamp(min=0)", "method clamp")])
    newest, _ = record_run(git_repo, [("torch.relu(x) * 1.0", "scaled")])

    report = gc(repo, keep=1, runs=True)
    assert any(k.startswith(f"run {stopped}: interrupted; okgit optimize ops/relu.py --resume {stopped}")
               for k in report.kept), report.kept
    assert repo.run_dir(stopped).exists() and sh(git_repo, "branch", "--list", f"okgit/{stopped}").strip()
    resume(repo, stopped).close()  # still resumable: its branch and candidates are there

    named = gc(repo, runs=True, names=[stopped])
    assert named.removed[0] == f"run {stopped} (interrupted: it can no longer resume): its directory, branch and 1 tag"
    assert not (repo.runs_dir / stopped).exists() and newest.run_dir.exists()
    assert sh(git_repo, "tag", "--list", f"okgit/{stopped}/*") == ""
