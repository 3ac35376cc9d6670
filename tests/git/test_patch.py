"""Validating, resolving, applying and reverting diffs in real repositories."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import OP, OP_SOURCE, record_run, sh, snapshot, variant

from okgit.errors import OkgitError
from okgit.git import patch
from okgit.git.repo import Repo
from okgit.git.workspace import start_run


def _user_commit(root: Path, source: str) -> None:
    """The user moves on: commits a new version of the op (their hooks and signing aside)."""
    (root / OP).write_text(source)
    sh(root, "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "edit op", "--", OP)


def test_validate(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    space, tags = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    diff = space.diff(tags[0])
    index = (git_repo / ".git" / "index").read_bytes()
    patch.validate(repo, diff, space.base_commit)
    assert (git_repo / ".git" / "index").read_bytes() == index  # checked in a throwaway index
    with pytest.raises(OkgitError, match="^empty diff"):
        patch.validate(repo, "", space.base_commit)
    with pytest.raises(OkgitError, match="^not a valid diff"):
        patch.validate(repo, "@@ -1 +1 @@\n-a\n+b\n", space.base_commit)
    _user_commit(git_repo, OP_SOURCE.replace("return torch.relu(x)", "return torch.relu(x)  # edited"))
    with pytest.raises(OkgitError, match=f"^the diff does not apply to HEAD: patch failed: {OP}:"):
        patch.validate(repo, diff, "HEAD")


def test_touched_files() -> None:
    diff = (
        "diff --git a/new.py b/new.py\nnew file mode 100644\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+x\n"
        "diff --git a/old.py b/old.py\ndeleted file mode 100644\nindex 2222222..0000000\n"
        "--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-y\n"
    )
    assert patch.touched_files(diff) == ["new.py", "old.py"]
    new, old = patch.changes(diff)
    assert (new.source, new.target, new.pre, new.post) == (None, "new.py", "0000000", "1111111")
    assert (old.source, old.target) == ("old.py", None)


def test_resolve_diff(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Repo.find(git_repo)
    space, tags = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp"), ("x.clamp(min=0)", "method")])
    report = (space.run_dir / "report.diff").read_text()
    assert patch.resolve_diff(repo, space.run_id) == report == space.diff(tags[1])
    assert patch.resolve_diff(repo, tags[0]) == space.diff(tags[0])
    monkeypatch.chdir(git_repo.parent)
    (git_repo.parent / "x.diff").write_text(report)
    assert patch.resolve_diff(repo, "x.diff") == report
    for bad in ("20990101-000000-dead", f"okgit/{space.run_id}/c999", "nothing.diff"):
        with pytest.raises(OkgitError, match=f"^unknown run, tag or diff file: {bad}$"):
            patch.resolve_diff(repo, bad)


def test_resolve_diff_of_an_unfinished_run(git_repo: Path) -> None:
    space, _ = record_run(git_repo, [("x.clamp(min=0)", "clamp")], finish=None)
    with pytest.raises(OkgitError, match=f"run {space.run_id} has no report.diff"):
        patch.resolve_diff(Repo.find(git_repo), space.run_id)
    space.close()


def test_apply_check_apply_revert(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    space, tags = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    before = snapshot(git_repo)

    assert patch.apply(repo, space.run_id, check=True) == [OP]
    assert snapshot(git_repo) == before
    assert patch.apply(repo, space.run_id) == [OP]
    assert (git_repo / OP).read_text() == variant("x.clamp(min=0)")
    after = snapshot(git_repo)
    assert after["index"] == before["index"]  # the working tree only, never the index
    with pytest.raises(OkgitError, match=f"^{space.run_id} is already applied"):
        patch.apply(repo, space.run_id)

    assert patch.revert(repo, tags[0]) == [OP]  # the tag's diff is the run's: same application
    assert snapshot(git_repo) == before
    with pytest.raises(OkgitError, match="is not applied in the working tree"):
        patch.revert(repo, space.run_id)


def test_apply_refuses_a_dirty_touched_file(git_repo: Path) -> None:
    space, _ = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    (git_repo / OP).write_text(OP_SOURCE + "# mine\n")
    before = snapshot(git_repo)
    with pytest.raises(OkgitError, match=f"^{OP} has uncommitted changes"):
        patch.apply(Repo.find(git_repo), space.run_id, check=True)
    assert snapshot(git_repo) == before


def test_apply_onto_the_dirty_version_the_run_started_from(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    dirty = OP_SOURCE.replace("dim = 64", "dim = 128")
    (git_repo / OP).write_text(dirty)
    space = start_run(repo, git_repo / OP)
    tag, commit = space.accept("c001", dirty.replace("torch.relu(x)", "x.clamp(min=0)"), "okgit: c001")
    (space.run_dir / "report.diff").write_text(space.diff(commit))
    space.close(commit)
    assert patch.apply(repo, space.run_id) == [OP]
    assert (git_repo / OP).read_text() == dirty.replace("torch.relu(x)", "x.clamp(min=0)")
    patch.revert(repo, space.run_id)
    assert (git_repo / OP).read_text() == dirty


def test_revert_keeps_an_unrelated_edit_made_since(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    space, _ = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    patch.apply(repo, space.run_id)
    (git_repo / OP).write_text(variant("x.clamp(min=0)") + "# tuned by hand\n")
    assert patch.revert(repo, space.run_id) == [OP]  # its reverse still applies: git apply -R --check agrees
    assert (git_repo / OP).read_text() == OP_SOURCE + "# tuned by hand\n"


def test_revert_refuses_when_its_lines_were_edited(git_repo: Path) -> None:
    repo = Repo.find(git_repo)
    space, _ = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    patch.apply(repo, space.run_id)
    edited = variant("x.clamp(min=0.5)")
    (git_repo / OP).write_text(edited)
    with pytest.raises(OkgitError, match=f"^cannot revert {space.run_id}: .*okgit show {space.run_id} \\| git apply -R --reject$"):
        patch.revert(repo, space.run_id)
    assert (git_repo / OP).read_text() == edited


def test_a_diff_file_that_no_longer_applies(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Repo.find(git_repo)
    space, _ = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    (git_repo / "winner.diff").write_text(patch.resolve_diff(repo, space.run_id))
    _user_commit(git_repo, OP_SOURCE.replace("return torch.relu(x)", "return torch.nn.functional.relu(x)"))
    monkeypatch.chdir(git_repo)
    with pytest.raises(OkgitError, match=f"^winner.diff does not apply to the working tree: patch failed: {OP}:\\d+$"):
        patch.apply(repo, "winner.diff", check=True)
