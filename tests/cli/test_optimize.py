"""`okgit optimize` end to end, as a user runs it: real repositories, real Triton kernels under
the interpreter (CPU mode: correctness real, timing not claimed); the CLI as a subprocess where
the process matters (the whole journey, signals, two runs at once), in this process (`cli`)
elsewhere."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import OP, sh, snapshot

POINTWISE = '''import torch
import torch.nn as nn

batch_size = 16
dim = 64


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.relu(x * 0.5 + self.bias) * 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''

OWN_KERNEL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

n_rows = 16
n_cols = 96


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 3.0 - 1.0, mask=mask)


class Model(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out


def get_inputs():
    return [torch.randn(n_rows, n_cols)]


def get_init_inputs():
    return []
'''


def commit_op(root: Path, source: str, rel: str = OP) -> None:
    (root / rel).write_text(source)
    sh(root, "add", rel)
    sh(root, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", f"add {rel}")


@pytest.mark.slow  # the whole journey as a user runs it: okgit in processes of their own, stdout only the JSON
def test_two_runs_at_once_each_give_the_pointwise_op_a_tagged_triton_kernel_and_nothing_of_the_user_changes(
        cli, git_repo: Path) -> None:
    # Two runs of one op in one repository at once, each checked as the whole journey a user sees.
    commit_op(git_repo, POINTWISE)
    before = snapshot(git_repo)
    procs = [subprocess.Popen([sys.executable, "-m", "okgit", "optimize", OP, "--device", "cpu", "--iterations", "3", "--json"],
                              cwd=git_repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert results[0]["run_id"] != results[1]["run_id"]
    assert snapshot(git_repo) == before
    assert "git worktree" not in sh(git_repo, "worktree", "list") and len(sh(git_repo, "worktree", "list").splitlines()) == 1

    for result in results:
        assert result["status"] == "unverified"  # correct kernel, and no speed claimed on a CPU
        assert result["speedup"] is None and result["best_tag"].startswith(f"okgit/{result['run_id']}/")
        run_dir = git_repo / ".okgit" / "runs" / result["run_id"]
        for name in ("journal.jsonl", "traces.jsonl", "report.md", "report.diff", "result.json"):
            assert (run_dir / name).is_file(), name
        diff = (run_dir / "report.diff").read_text()
        assert "@triton.jit" in diff
        check = subprocess.run(["git", "apply", "--check", str(run_dir / "report.diff")], cwd=git_repo, capture_output=True,
                               text=True)
        assert check.returncode == 0, check.stderr
        events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
        assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"

        history = json.loads(cli("history", result["run_id"], "--json", cwd=git_repo).stdout)
        assert any(c["tag"] == result["best_tag"] for c in history["candidates"])
        assert cli("show", result["best_tag"], cwd=git_repo).stdout.strip() == diff.strip()


@pytest.mark.slow  # a run with real evaluation
def test_own_triton_kernel_on_a_cpu_spends_no_iteration_on_autotune(cli, git_repo: Path) -> None:
    # Launch settings change only the speed, which a CPU does not time: the journal says so.
    commit_op(git_repo, OWN_KERNEL)
    proc = cli("optimize", OP, "--device", "cpu", "--iterations", "4", "--json", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    history = json.loads(cli("history", result["run_id"], "--json", cwd=git_repo).stdout)
    assert not [c for c in history["candidates"] if c["origin"].startswith("autotune")], history["candidates"]
    journal = (git_repo / ".okgit" / "runs" / result["run_id"] / "journal.jsonl").read_text()
    assert "autotune: skipped on cpu" in journal


BAD_OPS = {
    "syntax error": ("import torch\ndef get_inputs(:\n", "syntax error"),
    "no Model": ("import torch\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n", "missing Model"),
    "get_inputs raising": (POINTWISE.replace("return [torch.randn(batch_size, dim)]", "raise RuntimeError('no data here')"), "no data here"),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if "raising" in c else c  # its reference runs
                                  for c in sorted(BAD_OPS)])
def test_bad_op_files_get_one_line_and_change_nothing(cli, git_repo: Path, case: str) -> None:
    source, needle = BAD_OPS[case]
    commit_op(git_repo, source, "ops/bad.py")
    before = snapshot(git_repo)
    proc = cli("optimize", "ops/bad.py", "--device", "cpu", cwd=git_repo)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(git_repo) == before
    assert not (git_repo / ".okgit" / "runs").exists() or not any((git_repo / ".okgit" / "runs").iterdir())


def test_refusals(cli, git_repo: Path, tmp_path: Path) -> None:
    cases = [
        (cli("optimize", "ops/missing.py", "--device", "cpu", cwd=git_repo), 1, "no such file"),
        (cli("optimize", OP, "--backend", "fortran", cwd=git_repo), 2, "invalid choice"),
        (cli("optimize", "x.py", cwd=tmp_path), 1, "not inside a git repository"),
        (cli("history", "nope", cwd=git_repo), 1, "unknown run"),
    ]
    (git_repo / "ops" / "new.py").write_text(POINTWISE)
    cases.append((cli("optimize", "ops/new.py", "--device", "cpu", cwd=git_repo), 1, "not tracked"))
    for proc, code, needle in cases:
        assert proc.returncode == code, (proc.args, proc.stderr)
        assert needle in proc.stderr, (proc.args, proc.stderr)
        assert "Traceback" not in proc.stderr


@pytest.mark.slow  # a signal to a real okgit process, then a resume
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_run_is_consistent_and_resumes(cli, git_repo: Path, sig: int) -> None:
    """A signal mid-search: every process okgit started ends (test_interrupt.py's check), the
    journal says why, nothing of the user's changes, and --resume without the path finishes the
    run (in this process: the signal is the one okgit process's)."""
    from test_interrupt import assert_all_gone, children

    commit_op(git_repo, POINTWISE)
    before = snapshot(git_repo)
    proc = subprocess.Popen([sys.executable, "-m", "okgit", "optimize", OP, "--device", "cpu", "--iterations", "3"],
                            cwd=git_repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    journal = None
    started: dict[int, str] = {}
    while time.time() < deadline:
        started.update(children(proc.pid))
        found = list((git_repo / ".okgit" / "runs").glob("*/journal.jsonl")) if (git_repo / ".okgit").exists() else []
        if found and '"proposal"' in found[0].read_text():
            journal = found[0]
            break
        time.sleep(0.2)
    assert journal is not None, proc.communicate(timeout=60)
    started.update(children(proc.pid))
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    said = "SIGTERM" if sig == signal.SIGTERM else "Ctrl-C"
    assert proc.returncode == 130 and f"interrupted ({said}: " in err, err  # between candidates nothing may run
    assert_all_gone(started)
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [e["reason"] for e in events if e["type"] == "interrupted"] == ["Ctrl-C" if sig == signal.SIGINT else "SIGTERM"]
    assert snapshot(git_repo) == before
    assert len(sh(git_repo, "worktree", "list").splitlines()) == 1

    if sig == signal.SIGTERM:
        return  # the resume is the Ctrl-C case's: both signals take the same path (okgit.run: _Signalled, the
        # same `interrupted` event and _finish), which leaves the same run apart from the reason it names
    # resumed without the path, as `latest` (a PATH given must be the run's own op: okgit.run._resumed_run,
    # tests/cli/test_cli_edges.py; the run goes on the same way either way)
    run_id = journal.parent.name
    assert out.split("--resume ")[-1].strip() == run_id  # the line that says how to continue
    resumed = cli("optimize", "--resume", "latest", "--device", "cpu", "--iterations", "3", "--json", cwd=git_repo)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["run_id"] == run_id and result["status"] == "unverified", result
    assert "set TRITON_INTERPRET=1 before Python starts" in Path(result["report"]).read_text()
    assert snapshot(git_repo) == before
    assert cli("optimize", "--resume", run_id, cwd=git_repo).stdout.startswith(f"run {run_id}: ")  # finished now
