"""Finding the repository, reading it without writing the index, the exclude file, the lock."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import OP, sh

from okgit.errors import OkgitError
from okgit.git.repo import Repo, git


def test_find_from_a_subdirectory(git_repo: Path) -> None:
    repo = Repo.find(git_repo / "ops")
    assert repo.root == git_repo.resolve()
    assert repo.common_dir == (git_repo / ".git").resolve()
    assert repo.okgit_dir == git_repo.resolve() / ".okgit"


def test_find_in_a_linked_worktree_shares_the_common_dir(git_repo: Path, tmp_path: Path) -> None:
    sh(git_repo, "-c", "core.hooksPath=/dev/null", "worktree", "add", "-q", "--detach", str(tmp_path / "linked"))
    repo = Repo.find(tmp_path / "linked")
    assert repo.root == (tmp_path / "linked").resolve()
    assert repo.common_dir == (git_repo / ".git").resolve()


def test_find_outside_a_repository(tmp_path: Path) -> None:
    with pytest.raises(OkgitError, match=f"^not inside a git repository: {tmp_path.resolve()}$"):
        Repo.find(tmp_path)


def test_git_errors_are_one_line(git_repo: Path) -> None:
    with pytest.raises(OkgitError, match=r"^git rev-parse: [^\n]+$"):
        git("rev-parse", "--verify", "no-such-ref", cwd=git_repo)


def test_relpath(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Repo.find(git_repo)
    monkeypatch.chdir(git_repo / "ops")
    assert repo.relpath("relu.py") == OP
    assert repo.relpath(git_repo / "lib" / "util.py") == "lib/util.py"
    with pytest.raises(OkgitError, match="outside the repository"):
        repo.relpath(git_repo.parent / "elsewhere.py")


def test_reads_never_rewrite_the_index(git_repo: Path) -> None:
    """Plain `git status` refreshes stale stat data in .git/index; okgit's reads must not."""
    repo = Repo.find(git_repo)
    future = time.time() + 100
    for rel in (OP, "README.md", "lib/util.py"):
        os.utime(git_repo / rel, (future, future))  # stale stat data, same content
    index = (git_repo / ".git" / "index").read_bytes()
    assert repo.is_tracked(OP) and repo.is_tracked("lib/util.py") and not repo.is_tracked("notes.txt")
    assert repo.uncommitted(OP) is None and repo.uncommitted("lib/util.py") is None  # committed, then staged
    assert repo.uncommitted("notes.txt") == "not tracked by git"
    assert not repo.is_dirty(OP)
    assert repo.is_dirty("README.md") and repo.is_dirty("lib/util.py")  # modified; staged
    assert repo.blob_of(OP) == sh(git_repo, "rev-parse", f"HEAD:{OP}").strip()
    assert repo.blob_of("ops/none.py") is None
    assert (git_repo / ".git" / "index").read_bytes() == index
    sh(git_repo, "status", "--porcelain")  # the control: the user's own status does rewrite it
    assert (git_repo / ".git" / "index").read_bytes() != index


def test_head_of_an_empty_repository(tmp_path: Path) -> None:
    sh(tmp_path, "init", "-q", str(tmp_path / "empty"))
    with pytest.raises(OkgitError, match="no commits yet"):
        Repo.find(tmp_path / "empty").head()


def test_ensure_excluded_once_and_never_gitignore(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    gitignore = (git_repo / ".gitignore").read_bytes()
    repo.ensure_excluded()
    repo.ensure_excluded()
    lines = (git_repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert lines.count("/.okgit/") == 1
    assert (git_repo / ".gitignore").read_bytes() == gitignore


def test_run_dir_of_an_unknown_run(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    for bad in ("20990101-000000-dead", "..", "", "a/b"):
        with pytest.raises(OkgitError, match="^unknown run: "):
            repo.run_dir(bad)
