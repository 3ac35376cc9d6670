"""Edges a first-time user hit: resuming the wrong op, gc under an applied diff, closed
pipes, binary diff files, an apply undone by hand, bad flag values, unknown flags."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import OP, okgit, record_run, sh


def test_resume_refuses_another_op(cli, git_repo: Path) -> None:
    space, _ = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])
    (git_repo / "ops" / "other.py").write_text((git_repo / OP).read_text())
    proc = cli("optimize", "ops/other.py", "--resume", space.run_id, cwd=git_repo)
    assert proc.returncode == 1 and f"run {space.run_id} optimizes {OP}, not ops/other.py" in proc.stderr


def test_gc_keeps_a_run_whose_diff_is_applied(cli, git_repo: Path) -> None:
    space, _ = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])
    assert cli("apply", space.run_id, cwd=git_repo).returncode == 0
    assert cli("gc", "--runs", "--keep", "0", cwd=git_repo).returncode == 0
    assert (git_repo / ".okgit" / "runs" / space.run_id).is_dir()
    proc = cli("revert", space.run_id, cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert "removed run" in cli("gc", "--runs", "--keep", "0", cwd=git_repo).stdout  # reverted: collectable


def test_an_apply_undone_by_hand_is_not_called_drift(cli, git_repo: Path) -> None:
    space, _ = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])
    assert cli("apply", space.run_id, cwd=git_repo).returncode == 0
    sh(git_repo, "-c", "core.hooksPath=/dev/null", "checkout", "-q", "--", OP)
    proc = cli("revert", space.run_id, cwd=git_repo)
    assert proc.returncode == 1 and "is not applied in the working tree" in proc.stderr
    assert cli("apply", space.run_id, cwd=git_repo).returncode == 0


def test_a_closed_pipe_ends_quietly(git_repo: Path) -> None:
    record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])
    proc = subprocess.Popen([sys.executable, "-m", "okgit", "history", "--json"], cwd=git_repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before okgit writes
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == ""


def test_a_binary_file_is_not_a_diff(cli, git_repo: Path, tmp_path: Path) -> None:
    bad = tmp_path / "g.diff"
    bad.write_bytes(b"x\n\x00\xff\n")
    for command in (("show",), ("apply",), ("apply", "--check"), ("revert",), ("verify",)):
        proc = cli(*command, str(bad), cwd=git_repo)
        assert proc.returncode == 1 and "not a diff" in proc.stderr and "Traceback" not in proc.stderr, (command, proc.stderr)


def test_a_bad_flag_value_is_a_usage_error(cli, git_repo: Path) -> None:
    proc = cli("optimize", OP, "--iterations", "0", cwd=git_repo)
    assert (proc.returncode, proc.stderr) == (2, "okgit: --iterations 0: input should be greater than or equal to 1\n")
    proc = cli("optimize", OP, "--iterations", "abc", cwd=git_repo)
    assert (proc.returncode, proc.stderr) == (
        2, "okgit optimize: argument --iterations: invalid int value: 'abc' (see okgit optimize --help)\n")
    for args, command, message in ((["profile", OP, "--top", "0"], "profile", "--top: must be 1 or more, not 0"),
                                   (["verify", "latest", "--require-speedup", "-2"], "verify", "--require-speedup: must be above 0, not -2"),
                                   (["optimize", OP, "--campaign", "--top", "x"], "optimize", "--top: not a whole number: 'x'")):
        proc = cli(*args, cwd=git_repo)
        assert (proc.returncode, proc.stderr) == (2, f"okgit {command}: argument {message} (see okgit {command} --help)\n")


def test_an_unknown_flag_names_its_command_in_one_line(cli, git_repo: Path) -> None:
    for args, command, unknown in ((["history", "--bogus"], "history", "--bogus"),
                                   (["traces", "export", "--bogus"], "traces export", "--bogus"),
                                   (["show", "a", "b"], "show", "b")):
        proc = cli(*args, cwd=git_repo)
        assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
        assert proc.stderr == f"okgit {command}: unrecognized arguments: {unknown} (see okgit {command} --help)\n"


def test_show_prints_only_diffs(cli, git_repo: Path, tmp_path: Path) -> None:
    text = tmp_path / "notes.diff"
    text.write_text("just some notes\n")
    proc = cli("show", str(text), cwd=git_repo)
    assert proc.returncode == 1 and "not a diff" in proc.stderr
    space, _ = record_run(git_repo, [], finish="fallback")
    (space.run_dir / "report.diff").write_text("")
    for command in ("show", "apply"):
        proc = cli(command, space.run_id, cwd=git_repo)
        assert proc.returncode == 1 and "has no winner" in proc.stderr, (command, proc.stderr)


@pytest.mark.slow  # --debug lets a traceback out, as a process of its own shows it
def test_debug_is_taken_after_any_command(git_repo: Path) -> None:
    """--debug after a nested command as after a plain one: the command runs, nothing unrecognized."""
    for args in (["history", "--debug"], ["traces", "export", "--debug"], ["--debug", "traces", "export"],
                 ["bench", "kernelbench", "no-such-dir", "--debug"]):
        proc = okgit(*args, cwd=git_repo)
        assert "unrecognized arguments" not in proc.stderr, (args, proc.stderr)
        assert proc.returncode in (0, 1), (args, proc.returncode, proc.stderr)
