"""history, show, apply, revert, gc and doctor through the `okgit` command: in this process (`cli`,
okgit.cli.main as `python -m okgit` runs it), doctor in a process of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import OP, OP_SOURCE, crashed_run, okgit, record_run, sh, snapshot, variant

from okgit.errors import OkgitError
from okgit.git.gc import gc
from okgit.git.repo import Repo

UNKNOWN = "20990101-000000-dead"


def _one_line_error(proc, message: str, code: int = 1) -> None:
    assert proc.returncode == code, proc
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("okgit: "), proc.stderr
    assert message in proc.stderr, proc.stderr


def test_history_show_apply_revert(cli, git_repo: Path) -> None:
    space, tags = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp"), ("x.clamp(min=0)", "method clamp")])
    before = snapshot(git_repo)

    runs = cli("history", cwd=git_repo / "ops")
    assert runs.returncode == 0 and space.run_id in runs.stdout and "optimized" in runs.stdout
    listed = json.loads(cli("history", "--json", cwd=git_repo).stdout)
    assert [(r["run_id"], r["status"], r["best_tag"]) for r in listed] == [(space.run_id, "optimized", tags[1])]
    detail = json.loads(cli("history", space.run_id, "--json", cwd=git_repo).stdout)
    rows = [(c["cand"], c["tag"], c["parent"]) for c in detail["candidates"]]
    assert rows == [("c001", tags[0], None), ("c002", tags[1], "c001")]
    assert "method clamp" in cli("history", space.run_id, cwd=git_repo).stdout

    shown = cli("show", space.run_id, cwd=git_repo)
    assert shown.returncode == 0 and shown.stdout == (space.run_dir / "report.diff").read_text()
    shown = cli("show", tags[0], cwd=git_repo)
    assert shown.returncode == 0 and "+        return torch.clamp_min(x, 0.0)" in shown.stdout

    checked = cli("apply", space.run_id, "--check", cwd=git_repo)
    assert checked.returncode == 0 and checked.stdout.strip() == f"{space.run_id} applies cleanly to {OP}"
    assert snapshot(git_repo) == before  # every command so far only read

    applied = cli("apply", space.run_id, cwd=git_repo / "ops")
    assert applied.returncode == 0, applied.stderr
    assert (git_repo / OP).read_text() == variant("x.clamp(min=0)")
    _one_line_error(cli("apply", space.run_id, cwd=git_repo), "is already applied")
    reverted = cli("revert", space.run_id, "--json", cwd=git_repo)
    assert reverted.returncode == 0 and json.loads(reverted.stdout)["files"] == [OP]
    assert snapshot(git_repo) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["history", UNKNOWN], f"okgit: unknown run: {UNKNOWN}"),
        (["show", UNKNOWN], f"okgit: unknown run, tag or diff file: {UNKNOWN}"),
        (["show", f"okgit/{UNKNOWN}/c001"], f"okgit: unknown run, tag or diff file: okgit/{UNKNOWN}/c001"),
        (["apply", UNKNOWN], f"okgit: unknown run, tag or diff file: {UNKNOWN}"),
        (["apply", "--check", "no.diff"], "okgit: unknown run, tag or diff file: no.diff"),
        (["revert", UNKNOWN], f"okgit: unknown run, tag or diff file: {UNKNOWN}"),
    ],
)
def test_unknown_refs(cli, git_repo: Path, args: list[str], message: str) -> None:
    before = snapshot(git_repo)
    _one_line_error(cli(*args, cwd=git_repo), message)
    assert snapshot(git_repo) == before


def test_outside_a_repository(cli, tmp_path: Path) -> None:
    for args in (["history"], ["show", UNKNOWN], ["apply", UNKNOWN], ["revert", UNKNOWN], ["gc"]):
        _one_line_error(cli(*args, cwd=tmp_path), f"okgit: not inside a git repository: {tmp_path.resolve()}")


def test_usage_error_exits_2(cli, git_repo: Path) -> None:
    proc = cli("show", cwd=git_repo)
    assert proc.returncode == 2 and proc.stderr == "okgit show: the following arguments are required: REF (see okgit show --help)\n"


def test_apply_refusals(cli, git_repo: Path) -> None:
    space, _ = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    (git_repo / "winner.diff").write_text((space.run_dir / "report.diff").read_text())

    (git_repo / OP).write_text(OP_SOURCE.replace("torch.relu(x)", "torch.relu(x)  # mine"))
    before = snapshot(git_repo)
    for args in (["apply", space.run_id], ["apply", "--check", "winner.diff"]):
        _one_line_error(cli(*args, cwd=git_repo), f"okgit: {OP} has uncommitted changes")
    assert snapshot(git_repo) == before

    # The user commits another version: the diff file no longer applies, and says where.
    sh(git_repo, "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", "commit", "-q", "-am", "mine")
    proc = cli("apply", "--check", "winner.diff", cwd=git_repo)
    _one_line_error(proc, f"okgit: winner.diff does not apply to the working tree: patch failed: {OP}:")


def test_revert_refuses_after_drift(cli, git_repo: Path) -> None:
    space, _ = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    assert cli("apply", space.run_id, cwd=git_repo).returncode == 0
    (git_repo / OP).write_text("# rewritten by hand\n")
    _one_line_error(cli("revert", space.run_id, cwd=git_repo), f"okgit: cannot revert {space.run_id}: ")
    assert (git_repo / OP).read_text() == "# rewritten by hand\n"


def test_gc(cli, git_repo: Path) -> None:
    old, _ = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    died = crashed_run(git_repo, [("x.clamp(min=0)", "clamp")])
    before = snapshot(git_repo)
    proc = cli("gc", cwd=git_repo)
    kept = ("kept 2 finished runs: their directories and 2 tags (gc --runs removes all but the newest 20)\n"
            f"kept branch okgit/{died}: the run was interrupted (okgit optimize {OP} --resume {died} continues it)\n")
    assert (proc.returncode, proc.stdout) == (0, f"removed worktree {died}\n"
                                                 f"removed branch okgit/{old.run_id} (finished; its tags keep the candidates)\n" + kept)
    assert cli("gc", cwd=git_repo).stdout == kept
    assert json.loads(cli("gc", "--json", cwd=git_repo).stdout)["kept"] == kept.replace("kept ", "").splitlines()
    proc = cli("gc", "--runs", "--keep", "-1", cwd=git_repo)  # once clamped to 0: every finished run removed
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", "okgit gc: argument --keep: must be 0 or more, not -1 (see okgit gc --help)\n")
    with pytest.raises(OkgitError, match="--keep -1: a number of runs to keep, 0 or more"):
        gc(Repo.find(git_repo), keep=-1, runs=True)
    assert len(json.loads(cli("history", "--json", cwd=git_repo).stdout)) == 2
    proc = cli("gc", "--runs", "--keep", "1", "--json", cwd=git_repo)
    assert json.loads(proc.stdout)["removed"] == [f"run {old.run_id}: its directory, branch and 1 tag"]
    assert [r["run_id"] for r in json.loads(cli("history", "--json", cwd=git_repo).stdout)] == [died]
    assert snapshot(git_repo) == before


@pytest.mark.slow  # doctor looks at what a fresh okgit process finds: a process of its own
def test_doctor_always_exits_0(git_repo: Path) -> None:
    proc = okgit("doctor", "--json", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    found = {c["name"]: c for c in json.loads(proc.stdout)}
    assert {"python", "torch", "cuda gpu", "nvcc", "triton", "triton interpreter", "modal", "model keys"} <= set(found)
    assert found["python"]["ok"] and found["torch"]["ok"]


def test_outside_a_repository_the_op_files_repository_is_named(cli, git_repo: Path) -> None:
    """okgit works in the current directory's repository, as git does; run from outside one with a
    file or folder that lies in one, the refusal says where to run it."""
    outside = git_repo.parent
    for args, given in ((["optimize", f"{git_repo.name}/{OP}"], f"{git_repo.name}/{OP}"),
                        (["optimize", f"{git_repo.name}/ops/"], f"{git_repo.name}/ops"),
                        (["optimize", f"{git_repo.name}/{OP}", "--campaign"], f"{git_repo.name}/{OP}")):
        _one_line_error(cli(*args, cwd=outside), f"okgit: not inside a git repository: {outside.resolve()}; "
                                                 f"{given} is in the repository {git_repo.resolve()}: run okgit from there")
