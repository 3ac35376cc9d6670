"""The shell steps of docs/ci.md, run with bash as CI runs them, in a scratch clone on the CPU.

The blocks are taken from the document by their markers, so the docs cannot drift from what is
tested. `okgit` on PATH is the package under test; OKGIT_DEVICE=cpu is how a CPU runner says
"no GPU here" (verify and optimize both read OKGIT_* settings).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import OP, OP_SOURCE, okgit, sh

DOC = Path(__file__).resolve().parents[2] / "docs" / "ci.md"
COMMIT = ("-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q")
# A Triton kernel that is not ReLU (max with 1, not 0), as a pull request might bring.
WRONG_KERNEL = OP_SOURCE.replace("import torch.nn as nn\n", '''import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 1.0), mask=mask)
''').replace("return torch.relu(x)", """out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out""")


def ci_steps() -> dict[str, str]:
    blocks = dict(re.findall(r"<!-- ci-steps:(\w+) -->\s*```bash\n(.*?)```", DOC.read_text(), re.DOTALL))
    assert set(blocks) == {"verify", "optimize"}, blocks.keys()
    return blocks


@pytest.fixture
def ci(git_repo: Path, tmp_path: Path):
    """A CI checkout (a clone whose main declares the op in okgit.toml) and a step runner."""
    root = tmp_path / "checkout"
    sh(tmp_path, "clone", "-q", str(git_repo), str(root))
    (root / "okgit.toml").write_text(f'[[op]]\npath = "{OP}"\n')
    sh(root, "add", "okgit.toml")
    sh(root, *COMMIT, "-m", "declare the op")
    for key, value in (("diff.noprefix", "true"), ("color.ui", "always")):  # a runner's odd git settings
        sh(root, "config", key, value)

    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "okgit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m okgit "$@"\n')
    (shims / "okgit").chmod(0o755)
    (shims / "python3").symlink_to(sys.executable)
    runner_temp = tmp_path / "runner"
    runner_temp.mkdir()
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}", "RUNNER_TEMP": str(runner_temp),
           "OKGIT_DEVICE": "cpu", "OKGIT_ITERATIONS": "1"}
    steps = ci_steps()

    def run(name: str, **extra: str) -> subprocess.CompletedProcess[str]:
        script = tmp_path / f"okgit-{name}.sh"
        script.write_text(steps[name])
        return subprocess.run(["bash", str(script)], check=False, cwd=root, env={**env, **extra}, capture_output=True,
                              text=True, timeout=300)

    return root, runner_temp, run


def pull_request(root: Path, branch: str, files: dict[str, str]) -> str:
    """Commit `files` on a new branch off main, as a pull request would; main's commit (BASE)."""
    sh(root, "checkout", "-q", "-b", branch, "main")
    for rel, text in files.items():
        (root / rel).write_text(text)
    sh(root, "add", *files)
    sh(root, *COMMIT, "-m", f"pull request {branch}")
    return sh(root, "rev-parse", "main").strip()


@pytest.mark.slow  # docs/ci.md's steps as a CI runner runs them: shell, okgit processes
def test_optimize_step_then_verify_step_on_its_pull_request(ci) -> None:
    root, runner_temp, run = ci
    proc = run("optimize")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.fullmatch(rf"{re.escape(OP)}: unverified \((\S+)\)", proc.stdout.strip())
    assert m, proc.stdout  # the loop ran; on a CPU no win is claimed, so no branch is made
    run_id = m.group(1)
    assert json.loads((runner_temp / "result.json").read_text())["status"] == "unverified"
    assert sh(root, "branch", "--list", "okgit/pr-*") == ""
    assert sh(root, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"

    # The run's winner, committed on a branch as the optimize step would have (with a GPU).
    sh(root, "checkout", "-q", "-b", "okgit/pr-" + run_id)
    assert okgit("apply", run_id, cwd=root).returncode == 0
    sh(root, "add", OP)
    sh(root, *COMMIT, "-m", f"okgit: faster {OP} ({run_id})")
    base = sh(root, "rev-parse", "main").strip()

    proc = run("verify", BASE=base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{OP}: ok - correct" in proc.stdout and proc.stdout.strip().endswith("verify: ok")
    report = json.loads((runner_temp / "verify.json").read_text())
    assert report["ok"] and report["head"] == base and report["ops"][0]["result"]["device"] == "cpu"


@pytest.mark.slow  # docs/ci.md's steps as a CI runner runs them: shell, okgit processes
def test_verify_step_fails_a_wrong_kernel_and_passes_a_pull_request_without_ops(ci) -> None:
    root, runner_temp, run = ci
    base = pull_request(root, "wrong-kernel", {OP: WRONG_KERNEL})
    proc = run("verify", BASE=base)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{OP}: FAILED - gate " in proc.stdout and proc.stdout.strip().endswith("verify: FAILED")
    assert json.loads((runner_temp / "verify.json").read_text())["ok"] is False

    (runner_temp / "verify.json").unlink()
    base = pull_request(root, "docs", {"README.md": "# project\nRun `okgit verify` in CI.\n"})
    proc = run("verify", BASE=base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "verify: no op of okgit.toml changed"
    assert not (runner_temp / "verify.json").exists()
