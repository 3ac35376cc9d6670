"""What a new user trips on with campaigns and runs (issue 33): a folder holding a file that
cannot be loaded, the interpreter's note after a CPU campaign, the campaign's first line, and a
fallback run's summary. Real repositories; the CLI as a subprocess where the terminal is the
point, the in-memory evaluator where it is not."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import OP, sh, variant

from okgit import run
from okgit.eval.base import InMemoryEvaluator
from okgit.eval.types import EvalError, EvalResult, Status
from okgit.search.types import Proposal
from okgit.status import RunStatus

BROKEN = "import torch\n\nclass Model(torch.nn.Module:\n    pass\n"


class Once:
    """One candidate, then nothing."""

    name = "once"

    def propose(self, ctx) -> Proposal | None:
        return None if ctx.attempts else Proposal(source=variant("torch.clamp(x, min=0.0)"), origin="test")


def test_a_fallback_run_names_no_diff_and_a_winner_s_run_does(git_repo: Path) -> None:
    wrong = EvalResult(status=Status.incorrect, correct=False, device="cpu",
                       error=EvalError(gate="correctness", message="mismatch"))
    right = EvalResult(status=Status.correct, correct=True, device="cpu")
    results = {}
    for name, judged in (("fallback", wrong), ("unverified", right)):
        results[name] = run.optimize(git_repo / OP, cwd=git_repo, flags={"iterations": 1},
                                     evaluator=InMemoryEvaluator(lambda source, judged=judged: judged),
                                     proposers=[Once()])
    fallback, found = results["fallback"], results["unverified"]
    assert fallback.status == RunStatus.fallback and Path(fallback.diff).read_text() == ""
    assert "diff:" not in fallback.summary() and "report:" in fallback.summary()
    assert found.status == RunStatus.unverified and f"diff:   {found.diff}" in found.summary()


@pytest.mark.slow  # the first line as a user's terminal reads it: okgit in a process, the real evaluator
def test_a_cpu_campaign_names_its_id_first_refuses_a_broken_file_and_says_how_to_run_the_kernels(cli, git_repo: Path) -> None:
    kernels = git_repo / "kernels"
    kernels.mkdir()
    (kernels / "relu.py").write_text(variant("torch.relu(x) * 2.0"))
    (kernels / "broken.py").write_text(BROKEN)  # committed: an op file the campaign cannot load
    sh(git_repo, "add", "kernels")
    sh(git_repo, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "kernels")

    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "okgit", "optimize", "kernels/", "--device", "cpu", "--iterations", "1"],
                            cwd=git_repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    first_s = time.monotonic() - started
    rest, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    lines = [first, *rest.splitlines()]
    # The id at once, before the evaluator starts and any reference is screened.
    campaign_id = first.split()[2].rstrip(":")
    assert first.startswith("okgit campaign ") and "starting the local evaluator" in first, first
    assert (git_repo / ".okgit" / "campaigns" / campaign_id).is_dir()
    print(f"first line after {first_s:.1f} s")
    refused = [line for line in lines if "kernels/broken.py" in line]
    assert any(line.strip().startswith("screen kernels/broken.py: refused: cannot be loaded: kernels/broken.py:3: syntax error")
               for line in refused), lines
    assert any(line.strip().startswith("kernels/broken.py: refused:") for line in refused), lines  # the summary

    report = (git_repo / ".okgit" / "campaigns" / campaign_id / "report.md").read_text()
    assert "| `kernels/broken.py` |" in report and "- kernels/broken.py: cannot be loaded:" in report
    assert "TRITON_INTERPRET=1" in report

    applied = cli("apply", "campaign:latest", cwd=git_repo)
    assert applied.returncode == 0, applied.stderr
    assert "kernels/relu.py" in applied.stdout and "set TRITON_INTERPRET=1 before Python starts" in applied.stdout
