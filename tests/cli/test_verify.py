"""`okgit verify`, `apply` and `revert` on a diff, tried as a new user would: one clone runs
`okgit optimize`, its report.diff travels as a file to another clone of the same repository
and is checked, applied and reverted there. Real repositories, real Triton kernels under the
interpreter (`--device cpu`: every gate but timing); the producing run through okgit.run and
the CLI in this process (`cli`), both on the session's evaluator (`okgit verify` of a diff file
as a process of its own, its JSON on stdout: tests/cli/test_ci_steps.py, as CI runs it)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import OP, OP_SOURCE, USER, Lent, make_hostile, sh, snapshot

# The fields docs/json.md promises for `okgit verify --json`.
REPORT_FIELDS = {"ref", "head", "ok", "ops", "skipped"}
OP_FIELDS = {"op", "ok", "reason", "result", "comparison"}
RESULT_FIELDS = {"status", "correct", "speedup", "runtime_us", "ref_runtime_us", "timed", "device", "mode",
                 "profile", "error", "gates", "max_abs_error", "max_rel_error", "shapes", "flags", "wall_s"}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory, evaluator):
    """The producing clone: a committed op and one finished `okgit optimize` run on it, on the
    session's evaluator as `cli` lends it (every test that takes it is marked slow)."""
    from okgit.run import optimize

    tmp = tmp_path_factory.mktemp("verify")
    with pytest.MonkeyPatch.context() as mp:
        home = tmp / "home"
        home.mkdir()
        mp.setenv("HOME", str(home))
        mp.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        for key, value in USER.items():
            mp.setenv(key, value)
        origin = tmp / "origin"
        (origin / "ops").mkdir(parents=True)
        sh(tmp, "init", "-q", "-b", "main", str(origin))
        (origin / OP).write_text(OP_SOURCE)
        (origin / "README.md").write_text("# project\n")
        sh(origin, "add", ".")
        sh(origin, "commit", "-q", "-m", "initial")
        with Lent(evaluator) as lent:  # its reference closed with the run, as the CLI's own evaluator would be
            result = optimize(origin / OP, cwd=origin, flags={"device": "cpu", "iterations": 1}, evaluator=lent)
        assert result.best_tag and Path(result.diff).is_file(), result
        yield {"origin": origin, "run": result.run_id, "tag": result.best_tag,
               "diff": Path(result.diff).read_text(), "winner": sh(origin, "show", f"{result.best_tag}:{OP}")}


def user_clone(made: dict, tmp_path: Path, diff: str | None = None) -> Path:
    """Another clone of the repository, mid-work like a user's (dirty, staged and untracked
    files, failing hooks, settings that break naive diffs), with `diff` saved as pr.diff in it."""
    root = tmp_path / "clone"
    sh(tmp_path, "clone", "-q", str(made["origin"]), str(root))
    (root / "README.md").write_text("# project\nwork in progress\n")
    (root / "notes.txt").write_text("untracked notes\n")
    (root / "lib").mkdir()
    (root / "lib" / "util.py").write_text("X = 2\n")
    sh(root, "add", "lib/util.py")
    make_hostile(root, tmp_path / "hook-ran", ("pre-commit", "post-checkout", "reference-transaction"),
                 {"diff.noprefix": "true", "color.ui": "always", "apply.whitespace": "error", "gc.auto": "1",
                  "commit.gpgsign": "true"})
    (root / "pr.diff").write_text(made["diff"] if diff is None else diff)
    return root


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("okgit: "), (proc.returncode, proc.stderr)
    return lines[0]


@pytest.mark.slow  # the real evaluator
def test_copied_diff_is_verified_applied_and_reverted_in_another_clone(cli, made: dict, tmp_path: Path) -> None:
    root = user_clone(made, tmp_path)
    before = snapshot(root)
    proc = cli("verify", "pr.diff", "--device", "cpu", "--json", cwd=root)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert REPORT_FIELDS <= report.keys() and report["ok"] is True
    assert report["ref"] == "pr.diff" and report["head"] == sh(root, "rev-parse", "HEAD").strip()
    assert [v["op"] for v in report["ops"]] == [OP] and report["skipped"] == []
    verdict = report["ops"][0]
    assert OP_FIELDS <= verdict.keys() and RESULT_FIELDS <= verdict["result"].keys()
    assert verdict["ok"] and verdict["result"]["status"] == "correct" and verdict["result"]["device"] == "cpu"
    assert verdict["comparison"] is None and "timing not possible" in verdict["reason"]  # a CPU claims no speed
    assert snapshot(root) == before  # verify touched nothing of the user's
    assert len(sh(root, "worktree", "list").splitlines()) == 1

    check = cli("apply", "pr.diff", "--check", cwd=root)
    assert check.returncode == 0 and (root / OP).read_text() == OP_SOURCE, check.stderr
    applied = cli("apply", "pr.diff", cwd=root)
    assert applied.returncode == 0, applied.stderr
    assert (root / OP).read_text() == made["winner"] != OP_SOURCE
    assert "@triton.jit" in made["winner"]
    reverted = cli("revert", "pr.diff", cwd=root)
    assert reverted.returncode == 0, reverted.stderr
    assert (root / OP).read_text() == OP_SOURCE
    assert sh(root, "status", "--porcelain", "--", OP) == ""


@pytest.mark.slow  # the real evaluator
def test_run_id_and_tag_verify_in_the_producing_clone(cli, made: dict) -> None:
    for ref in (made["run"], made["tag"]):
        proc = cli("verify", ref, "--device", "cpu", cwd=made["origin"])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"verify {ref} against HEAD ") and ": OK" in proc.stdout.splitlines()[0]
        assert f"{OP}: correct on cpu" in proc.stdout


@pytest.mark.slow  # the real evaluator
def test_tampered_kernel_fails_with_the_failing_gate_named(cli, made: dict, tmp_path: Path) -> None:
    # The stored value of the Triton kernel changed: same lines, so the hunks still fit.
    tampered, n = re.subn(r"^(\+\s*tl\.store\([^,]+, )(\w+)(, mask=)", r"\1\2 * 2.0 + 1.0\3", made["diff"],
                          count=1, flags=re.MULTILINE)
    assert n == 1, made["diff"]
    root = user_clone(made, tmp_path, tampered)
    before = snapshot(root)
    assert subprocess.run(["git", "apply", "--check", "pr.diff"], cwd=root, check=False).returncode == 0

    proc = cli("verify", "pr.diff", "--device", "cpu", "--json", cwd=root)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    verdict = report["ops"][0]
    assert report["ok"] is False and verdict["ok"] is False
    assert verdict["result"]["status"] == "incorrect" and not verdict["result"]["correct"]
    gate = verdict["result"]["error"]["gate"]
    assert gate and f"gate {gate} failed" in verdict["reason"]
    assert any(g["name"] == gate and not g["passed"] for g in verdict["result"]["gates"])

    text = cli("verify", "pr.diff", "--device", "cpu", cwd=root)
    assert text.returncode == 1 and "FAILED" in text.stdout.splitlines()[0]
    assert f"{OP}: incorrect on cpu" in text.stdout and f"gate {gate} failed" in text.stdout
    assert snapshot(root) == before


@pytest.mark.slow  # the module's optimize run (`made`)
def test_diff_that_no_longer_applies_is_refused_in_one_line(cli, made: dict, tmp_path: Path) -> None:
    root = user_clone(made, tmp_path)
    (root / OP).write_text(OP_SOURCE.replace("return torch.relu(x)", "return torch.clamp(x, min=0)"))
    sh(root, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "op changed", "--", OP)
    before = snapshot(root)

    check = cli("apply", "--check", "pr.diff", cwd=root)
    assert "pr.diff does not apply to the working tree" in one_line(check) and check.stdout == ""
    assert OP in check.stderr  # the reason names the file that changed
    proc = cli("verify", "pr.diff", "--device", "cpu", cwd=root)
    head = sh(root, "rev-parse", "HEAD")[:12]
    assert f"pr.diff does not apply to HEAD {head}" in one_line(proc) and proc.stdout == ""
    assert snapshot(root) == before and len(sh(root, "worktree", "list").splitlines()) == 1


@pytest.mark.slow  # the real evaluator
def test_require_speedup_fails_on_a_cpu_where_nothing_can_be_timed(cli, made: dict) -> None:
    proc = cli("verify", made["run"], "--device", "cpu", "--require-speedup", "1.1", cwd=made["origin"])
    assert proc.returncode == 1, proc.stderr
    assert "FAILED" in proc.stdout.splitlines()[0]
    assert "--require-speedup 1.1 needs timing, impossible on cpu" in proc.stdout


@pytest.mark.slow  # the module's optimize run (`made`)
def test_diff_without_an_op_file_and_bad_settings_are_one_line_errors(cli, made: dict, tmp_path: Path) -> None:
    readme = ("diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
              "@@ -1 +1,2 @@\n # project\n+Run `okgit verify` in CI.\n")  # not Python: not parsed as an op
    root = user_clone(made, tmp_path, readme)
    (root / "README.md").write_text("# project\n")  # clean, so the diff applies
    before = snapshot(root)
    line = one_line(cli("verify", "pr.diff", "--device", "cpu", cwd=root))
    assert "pr.diff changes no op file" in line and "README.md" in line
    line = one_line(cli("verify", "no-such.diff", cwd=root))
    assert "unknown run, tag or diff file: no-such.diff" in line
    # verify reads OKGIT_* like optimize does (CI sets OKGIT_DEVICE=cpu)
    proc = cli("verify", "pr.diff", cwd=root, env={"OKGIT_DEVICE": "tpu"})
    assert "OKGIT_" in one_line(proc) and "device" in proc.stderr
    assert snapshot(root) == before


@pytest.mark.slow  # the real evaluator
def test_the_ops_tolerance_in_okgit_toml_holds_in_verify(cli, made: dict, tmp_path: Path) -> None:
    off_by_a_little, n = re.subn(r"^(\+\s*tl\.store\([^,]+, )(\w+)(, mask=)", r"\1\2 + 1e-3\3", made["diff"],
                                 count=1, flags=re.MULTILINE)
    assert n == 1
    root = user_clone(made, tmp_path, off_by_a_little)
    assert cli("verify", "pr.diff", "--device", "cpu", cwd=root).returncode == 1  # default tolerance
    (root / "okgit.toml").write_text(f'[[op]]\npath = "{OP}"\natol = 0.01\n')
    proc = cli("verify", "pr.diff", "--device", "cpu", cwd=root)
    assert proc.returncode == 0 and f"{OP}: correct on cpu" in proc.stdout, proc.stdout + proc.stderr


HELPER_OP = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

from scaling import SCALE

n = 64


@triton.jit
def _scale(x_ptr, out_ptr, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


class Model(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _scale[(triton.cdiv(x.numel(), 128),)](x, out, SCALE, x.numel(), BLOCK=BLOCK_SIZE)
        return out


BLOCK_SIZE = 128


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow  # the real evaluator
def test_a_diff_cannot_move_the_reference_through_a_helper_module(cli, git_repo: Path) -> None:
    """Reference and candidate both import `scaling`; a diff that changes it with the op must be
    judged against HEAD's helper, not its own."""
    (git_repo / "ops" / "scaled.py").write_text(HELPER_OP)
    (git_repo / "ops" / "scaling.py").write_text("SCALE = 2.0\n")
    sh(git_repo, "add", "ops/scaled.py", "ops/scaling.py")
    sh(git_repo, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "scaled op")
    # A harmless launch change in the op, and the helper's constant changed with it.
    (git_repo / "ops" / "scaled.py").write_text(HELPER_OP.replace("BLOCK_SIZE = 128", "BLOCK_SIZE = 256"))
    (git_repo / "ops" / "scaling.py").write_text("SCALE = 3.0\n")
    bad = sh(git_repo, "diff", "--no-color", "--src-prefix=a/", "--dst-prefix=b/", "--", "ops/scaled.py", "ops/scaling.py")
    (git_repo / "ops" / "scaled.py").write_text(HELPER_OP)
    (git_repo / "ops" / "scaling.py").write_text("SCALE = 2.0\n")
    (git_repo.parent / "bad.diff").write_text(bad)
    proc = cli("verify", str(git_repo.parent / "bad.diff"), "--device", "cpu", "--json", cwd=git_repo)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and not report["ok"], proc.stderr
    assert report["ops"][0]["result"]["status"] == "incorrect"
