"""Records the journal an older okgit writes: `python tests/journals/older/record.py COMMIT`.

The commit's okgit is checked out into a temporary worktree and runs `optimize` on a small op
(tests/ops/relu.py) in a temporary repository, with an in-memory evaluator and two proposals
(one correct, one incorrect); its journal.jsonl is copied here as COMMIT.jsonl.
tests/journal/test_journal_readers.py reads each file here through today's models and RunView:
journals recorded by older versions must still read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[2]

OP = ROOT / "tests" / "ops" / "relu.py"

# Runs in the older okgit's process (PYTHONPATH: its worktree); argv[1] the repository, argv[2] the copy.
RUN = '''
import shutil, sys
from pathlib import Path
from okgit.eval.base import InMemoryEvaluator
from okgit.eval.types import EvalError, EvalResult, Status
from okgit.run import optimize
try:
    from okgit.search.types import Proposal
except ImportError:
    from okgit.search.base import Proposal
root = Path(sys.argv[1])
good, bad = [(root / "ops/relu.py").read_text() + f"\\n# {n}\\n" for n in "ab"]

class Queue:
    name = "queue"
    def __init__(self):
        self.sources = [good, bad]
    def propose(self, ctx):
        return Proposal(source=self.sources.pop(0), origin="template:test", intent="try") if self.sources else None

def judge(source):
    if source == bad:
        return EvalResult(status=Status.incorrect, error=EvalError(gate="outputs", message="wrong"), wall_s=0.1)
    return EvalResult(status=Status.correct, correct=True, wall_s=0.1)

result = optimize(root / "ops/relu.py", flags={"device": "cpu", "iterations": 3}, evaluator=InMemoryEvaluator(judge),
                  proposers=[Queue()])
shutil.copy(Path(result.report).parent / "journal.jsonl", sys.argv[2])
'''


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=okgit", "-c", "user.email=okgit@localhost", *args], cwd=cwd, check=True,
                   capture_output=True)


def main(commit: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        older, repo = Path(tmp) / "okgit", Path(tmp) / "repo"
        git("worktree", "add", "--detach", str(older), commit, cwd=ROOT)
        try:
            (repo / "ops").mkdir(parents=True)
            shutil.copyfile(OP, repo / "ops" / "relu.py")
            git("init", "-q", "-b", "main", cwd=repo)
            git("add", ".", cwd=repo)
            git("commit", "-q", "-m", "an op", cwd=repo)
            env = {**os.environ, "PYTHONPATH": str(older), "HOME": tmp}
            subprocess.run([sys.executable, "-c", RUN, str(repo), str(HERE / f"{commit}.jsonl")], cwd=repo, env=env,
                           check=True)
        finally:
            shutil.rmtree(older, ignore_errors=True)
            git("worktree", "prune", cwd=ROOT)


if __name__ == "__main__":
    main(sys.argv[1])
