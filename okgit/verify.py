"""`okgit verify`: re-run every gate on a diff against the current HEAD, trusting nothing else.

A reviewer or a CI job holds a diff (a run's report.diff, a tag, a run id). The diff is
applied in a scratch worktree of HEAD; every op file it touches is evaluated with HEAD's
version as the reference. The machine that produced the diff is never consulted.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel

from okgit.errors import OkgitError
from okgit.eval.types import Comparison, EvalResult
from okgit.git.repo import Repo
from okgit.problem import REQUIRED, load_problem, top_level_names


class OpVerdict(BaseModel):
    op: str
    ok: bool
    reason: str
    result: EvalResult
    comparison: Comparison | None = None


class VerifyReport(BaseModel):
    """What `okgit verify --json` prints (stable; see docs/json.md)."""

    ref: str
    head: str
    ok: bool
    ops: list[OpVerdict]
    skipped: list[str] = []  # touched files that are not op files

    def text(self) -> str:
        rows = [f"verify {self.ref} against HEAD {self.head[:12]}: {'OK' if self.ok else 'FAILED'}"]
        for v in self.ops:
            r = v.result
            speed = f"{v.comparison.speedup:.2f}x (noise {v.comparison.noise * 100:.1f}%)" if v.comparison else "untimed"
            rows.append(f"  {v.op}: {r.status.value} on {r.device}, {speed}: {v.reason}")
        rows += [f"  {f}: not evaluated (not an op file in HEAD, or new or deleted)" for f in self.skipped]
        return "\n".join(rows)


def backend_of(source: str) -> str:
    return "cuda" if "load_inline" in source or "cpp_extension" in source else "triton"


@contextmanager
def scratch_worktree(repo: Repo) -> Iterator[Path]:
    """A detached worktree of HEAD outside the user's tree, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="okgit-verify-")) / "tree"
    with repo.lock():
        repo.git("worktree", "add", "--detach", str(path), "HEAD")
    try:
        yield path
    finally:
        with repo.lock():
            repo.git("worktree", "remove", "--force", str(path), check=False)
            repo.git("worktree", "prune", check=False)
        shutil.rmtree(path.parent, ignore_errors=True)


def verify(repo: Repo, ref: str, *, eval: str | None = None, device: str | None = None, mode: str = "thorough",
           require_speedup: float | None = None) -> VerifyReport:
    """Settings come as for `optimize`: okgit.toml, then OKGIT_* (e.g. OKGIT_DEVICE=cpu in CI),
    then the arguments given here (None: not given)."""
    from okgit.config import load_config
    from okgit.eval.registry import make_evaluator
    from okgit.git import patch

    diff = patch.resolve_diff(repo, ref)
    try:
        found = patch.changes(diff)
    except OkgitError as e:
        raise OkgitError(f"{ref}: {e}") from None
    head = repo.head()
    config = load_config(repo.root, {"eval": eval, "device": device})
    verdicts, skipped = [], []
    # The reference imports its siblings from HEAD, the candidate from the patched tree, so a
    # diff that also changes a helper module cannot change the reference with it.
    with make_evaluator(config) as evaluator, scratch_worktree(repo) as base, scratch_worktree(repo) as tree:
        try:
            repo.git("apply", "--whitespace=nowarn", "-", cwd=tree, input=diff)
        except OkgitError as e:
            raise OkgitError(f"{ref} does not apply to HEAD {head[:12]}: {str(e).removeprefix('git apply: ')}") from None
        for c in found:
            # The op as HEAD has it is the reference; the diff's version of it (renamed or not)
            # the candidate. New and deleted files are listed as not evaluated.
            base_source = _op_source(repo, c.source) if c.source and c.target else None
            if base_source is None or not (c.source and c.target):
                skipped += [p for p in (c.source, c.target) if p and p not in skipped]
                continue
            problem = load_problem(c.source, source=base_source, root=str((base / c.source).parent))
            problem = replace(problem, candidate_root=str((tree / c.target).parent))
            problem = replace(problem, **config.problem_settings(c.source))  # okgit.toml's tolerances
            candidate = (tree / c.target).read_text()
            verdicts.append(_judge(evaluator, problem, candidate, mode, require_speedup))
    if not verdicts:
        raise OkgitError(f"{ref} changes no op file in place ({', '.join(skipped)}: new, deleted or not "
                         f"op files); nothing to verify")
    return VerifyReport(ref=ref, head=head, ok=all(v.ok for v in verdicts), ops=verdicts, skipped=skipped)


def _op_source(repo: Repo, path: str) -> str | None:
    """HEAD's version of `path` if it is an op file (a Python file defining the contract's names)."""
    if not path.endswith(".py"):
        return None
    source = repo.git("show", f"HEAD:{path}")
    try:
        return source if set(REQUIRED) <= top_level_names(source, path) else None
    except OkgitError:  # not valid Python in HEAD: not an op file
        return None


def _judge(evaluator, problem, candidate: str, mode: str, require_speedup: float | None) -> OpVerdict:
    backend = backend_of(candidate)
    reference = evaluator.reference(problem)
    if reference.degenerate:
        raise OkgitError(f"{problem.path}: the reference cannot tell right from wrong: {reference.degenerate}")
    result = evaluator.evaluate(problem, candidate, mode=mode, backend=backend)
    if not result.correct:
        gate = result.error.gate if result.error else "?"
        message = result.error.message if result.error else result.status.value
        return OpVerdict(op=problem.path, ok=False, reason=f"gate {gate} failed: {message}", result=result)
    if not result.timed:
        if require_speedup:
            return OpVerdict(op=problem.path, ok=False, result=result,
                             reason=f"correct, but --require-speedup {require_speedup} needs timing, impossible on {result.device}")
        return OpVerdict(op=problem.path, ok=True, result=result, reason=f"correct (all gates); timing not possible on {result.device}")
    comparison = evaluator.compare(problem, candidate, rounds=10 if mode == "thorough" else 5, backend=backend)
    if comparison.slower:
        reason, ok = f"slower than HEAD beyond the noise ({comparison.speedup:.3f}x)", False
    elif require_speedup and comparison.speedup < require_speedup:
        reason, ok = f"speedup {comparison.speedup:.2f}x below the required {require_speedup}x", False
    else:
        reason, ok = f"correct; {comparison.speedup:.2f}x over {comparison.rounds} interleaved rounds", True
    return OpVerdict(op=problem.path, ok=ok, reason=reason, result=result, comparison=comparison)
