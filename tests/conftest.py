"""Real git repositories in tmp_path, the CLI as a real subprocess (or in this process, where a
process of its own adds nothing), the real evaluator shared by the session, and a snapshot of
everything of the user's that okgit promises not to touch."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import ClassVar

import pytest

# `python -m okgit` in a subprocess runs this checkout, whichever one pip installed in editable mode.
ROOT = Path(__file__).resolve().parent.parent
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
# One torch thread per process (this one, and through the environment every worker, judge and okgit
# process a test starts: the evaluator keeps OMP_*): the suite runs two test processes on two
# cores, each with its children, so a pool of threads waits at every op for a thread whose core
# is taken (as okgit.campaign.probe says of a shared CPU): the judges' float64 checks cost twice
# the CPU that way. Set before torch is imported anywhere; a value of the caller's stands.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Inductor compiles in the process that asks (okgit.inductor's child, a sweep's baseline), not in a
# pool of compile processes it starts first, each importing torch: what is compiled does not
# change (docs/kernelbench.md).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

OP = "ops/relu.py"
OP_SOURCE = '''import torch
import torch.nn as nn

batch_size = 16
dim = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''
# Hooks okgit must never run: each leaves a mark and fails.
HOOKS = ("pre-commit", "commit-msg", "post-commit", "post-checkout", "reference-transaction", "pre-auto-gc")
USER = {"GIT_AUTHOR_NAME": "User", "GIT_AUTHOR_EMAIL": "user@example.com",
        "GIT_COMMITTER_NAME": "User", "GIT_COMMITTER_EMAIL": "user@example.com"}


def variant(expr: str) -> str:
    """The op file with another forward body: a small, real candidate."""
    return OP_SOURCE.replace("return torch.relu(x)", f"return {expr}")


def sh(cwd: Path, *args: str) -> str:
    """git as the user runs it (setup and assertions only)."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def okgit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "okgit", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


class Lent:
    """The session's evaluator lent to one okgit command run in this process: the command's
    close() closes only the references it prepared (each holds a judge process), and the
    workers stay warm for the next command."""

    def __init__(self, shared) -> None:
        self._shared = shared
        self._before = set(shared._prepared)

    def __getattr__(self, name: str):
        return getattr(self._shared, name)

    def close(self) -> None:
        for key in set(self._shared._prepared) - self._before:
            self._shared._prepared.pop(key).close()

    def __enter__(self) -> Lent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def cli(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """`cli(*args, cwd=..., env=...)`: `okgit ARGS` in this process (okgit.cli.main), its exit
    code, stdout and stderr as `okgit(...)` returns them, without a Python and torch start of its
    own. A command that evaluates on the CPU borrows the session's evaluator (its workers warm),
    so the test must be marked slow, as for the `evaluator` fixture."""
    import torch

    from okgit.cli import main
    from okgit.eval.registry import EVALUATORS
    from okgit.registry import Entry

    local = EVALUATORS.get("local")

    def lend(config, **options):
        on_cpu = config.device == "cpu" or (config.device is None and not torch.cuda.is_available())
        if not on_cpu or options or config.reference_timeout_s is not None:
            return local.factory(config, **options)
        if request.node.get_closest_marker("slow") is None:
            pytest.fail(f"{request.node.nodeid} evaluates through `cli`: mark it slow")
        return Lent(request.getfixturevalue("_cpu_evaluator"))

    monkeypatch.setitem(EVALUATORS._entries, "local", Entry(local.name, lend, local.order))

    def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        out, err = io.StringIO(), io.StringIO()
        with monkeypatch.context() as scoped, redirect_stdout(out), redirect_stderr(err):
            scoped.chdir(cwd)
            for key, value in (env or {}).items():
                scoped.setenv(key, value)
            code = main(list(args))
        return subprocess.CompletedProcess(["okgit", *args], code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def git_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's repository caught mid-work: a committed op, a modified and a staged file, an
    untracked and an ignored file, a stash entry, failing hooks, signing turned on and
    porcelain diff settings that would break a naive patch."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no global git config of the machine
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for key, value in USER.items():  # okgit's own identity must win over these
        monkeypatch.setenv(key, value)

    root = tmp_path / "proj"
    (root / "ops").mkdir(parents=True)
    (root / "lib").mkdir()
    sh(tmp_path, "init", "-q", "-b", "main", str(root))
    (root / OP).write_text(OP_SOURCE)
    (root / "README.md").write_text("# project\n")
    (root / "lib" / "util.py").write_text("X = 1\n")
    (root / ".gitignore").write_text("*.log\n__pycache__/\n")
    sh(root, "add", ".")
    sh(root, "commit", "-q", "-m", "initial")
    (root / "README.md").write_text("# project\nstashed work\n")
    sh(root, "stash", "-q")
    (root / "README.md").write_text("# project\nwork in progress\n")
    (root / "lib" / "util.py").write_text("X = 2\n")
    sh(root, "add", "lib/util.py")
    (root / "notes.txt").write_text("untracked notes\n")
    (root / "build.log").write_text("ignored\n")

    make_hostile(root, tmp_path / "hook-ran", HOOKS, {"commit.gpgsign": "true", "tag.gpgsign": "true",
                                                        "diff.noprefix": "true", "color.ui": "always", "gc.auto": "1"})
    return root


def make_hostile(root: Path, marker: Path, hooks: tuple[str, ...], settings: dict[str, str]) -> None:
    """Hooks that fail and leave `marker`, and git settings that would break a naive okgit."""
    for hook in hooks:
        path = root / ".git" / "hooks" / hook
        path.write_text(f'#!/bin/sh\necho "{hook}" >> "{marker}"\nexit 1\n')
        path.chmod(0o755)
    for key, value in settings.items():
        sh(root, "config", key, value)


def snapshot(root: Path) -> dict[str, object]:
    """Everything of the user's that must stay byte-identical (okgit's own refs excluded)."""
    git_dir = root / ".git"
    index = (git_dir / "index").read_bytes()  # first, before any git command could touch it
    refs = [line for line in sh(root, "--no-optional-locks", "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
            if not line.startswith(("refs/heads/okgit/", "refs/tags/okgit/"))]
    files = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] not in (".git", ".okgit")
    }
    return {
        "HEAD": (git_dir / "HEAD").read_bytes(),
        "head_commit": sh(root, "--no-optional-locks", "rev-parse", "HEAD"),
        "refs": refs,
        "index": index,
        "files": files,
        "stash": sh(root, "--no-optional-locks", "stash", "list"),
        "hooks": {p.name: p.read_bytes() for p in sorted((git_dir / "hooks").iterdir())},
        "config": (git_dir / "config").read_bytes(),
        "hooks_ran": (root.parent / "hook-ran").exists(),
    }


def record_run(root: Path, candidates: list[tuple[str, str]], finish: str | None = "optimized"):
    """A run made through the workspace API, with the journal events the orchestrator writes.

    `candidates`: (forward expression, intent) pairs, accepted in order with speedups 1.1,
    1.2, ...; the last one wins. `finish`: the final status, or None to leave the run open.
    Returns the RunSpace and the tags.
    """
    from okgit.git.patch import validate
    from okgit.git.repo import Repo
    from okgit.git.workspace import start_run

    repo = Repo.find(root)
    space = start_run(repo, root / OP)
    space.journal.write("run_started", **space.started_fields(), backend="triton", device="cpu",
                        mode="fast", model=None, eval="local", iterations=len(candidates))
    tags, parent, commit = [], None, space.base_commit
    for i, (expr, intent) in enumerate(candidates, 1):
        cand, speedup = f"c{i:03d}", round(1 + i / 10, 2)
        space.journal.write("proposal", cand=cand, origin="template:test", intent=intent, parent=parent, backend="triton")
        space.journal.write("evaluated", cand=cand, status="correct", correct=True, timed=True, speedup=speedup,
                            runtime_us=100 / speedup, ref_runtime_us=100.0, error=None, profile=None, wall_s=1.0)
        tag, commit = space.accept(cand, variant(expr), f"okgit: {cand} {intent} (correct, {speedup}x)")
        space.journal.write("accepted", cand=cand, tag=tag, commit=commit, speedup=speedup)
        space.journal.write("best", cand=cand, speedup=speedup)
        tags.append(tag)
        parent = cand
    if finish:
        if tags:
            diff = space.diff(commit)
            validate(repo, diff, space.base_commit)
            (space.run_dir / "report.diff").write_text(diff)
        space.close(winner_commit=commit if tags else None)
        space.journal.write("run_finished", status=finish, speedup=round(1 + len(tags) / 10, 2), baseline_us=None,
                            best_us=None, best_tag=tags[-1] if tags else None, best_cand=parent,
                            report=str(space.run_dir / "report.md"), diff=str(space.run_dir / "report.diff"),
                            iterations=len(tags), cost_usd=0.0)
    return space, tags


def crashed_run(root: Path, candidates: list[tuple[str, str]]) -> str:
    """A run whose process died mid-way (no run_finished, worktree left behind); its id."""
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from conftest import record_run\n"
        f"space, _ = record_run(__import__('pathlib').Path({str(root)!r}), {candidates!r}, finish=None)\n"
        "print(space.run_id, flush=True)\n"
        "os._exit(1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout.strip(), proc.stderr
    return proc.stdout.strip()


OPS = Path(__file__).parent / "ops"


@pytest.fixture(scope="session")
def _cpu_evaluator():
    from okgit.eval.parent.local import LocalEvaluator

    ev = LocalEvaluator(device="cpu")
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def evaluator(_cpu_evaluator):
    """The real evaluator on the CPU (Triton under its interpreter), one for the whole session:
    its workers start once, and the reference of each op of tests/ops is prepared once for every
    module that judges against it. Sharing leaks nothing between tests: every candidate runs in
    a fresh worker. Any other reference (an op a test wrote to its tmp_path, a tests/ops op with
    settings of its own) is closed with its module, since each holds a judge process."""
    from okgit.problem import load_problem

    yield _cpu_evaluator
    ops = [load_problem(p, root=str(OPS)) for p in OPS.glob("*.py") if "def get_inputs" in p.read_text()]
    shared = {_cpu_evaluator._key(problem) for problem in ops}
    for key, prep in list(_cpu_evaluator._prepared.items()):
        if key not in shared or not prep.judge.alive():
            del _cpu_evaluator._prepared[key]
            prep.close()


@pytest.fixture(scope="module")
def gpu_evaluator():
    """The real evaluator on the first CUDA GPU (the gpu-marked tests skip without one)."""
    from okgit.eval.parent.local import LocalEvaluator

    ev = LocalEvaluator(device="cuda")
    yield ev
    ev.close()


# Slowness is marked per test (`@pytest.mark.slow`: a test that starts real evaluator workers,
# runs the Triton interpreter or okgit as a subprocess, roughly > 3 s), so `python -m pytest -m
# "not slow"` (the README's fast subset) keeps every fast test. CI runs everything (.ci/run).
# A test that asks for the real evaluator starts workers: it must say it is slow (or need a GPU).
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items if {"evaluator", "gpu_evaluator"} & set(getattr(item, "fixturenames", ()))
                and item.get_closest_marker("slow") is None and item.get_closest_marker("gpu") is None]
    if unmarked:
        raise pytest.UsageError(f"tests using the real evaluator must be marked slow: {', '.join(unmarked)}")
    items[:] = slow_modules_first(items)


def slow_modules_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The modules with the most slow tests first, each module's tests in their own order.
    pytest-xdist (`--dist loadscope --no-loadscope-reorder`, pyproject.toml) hands whole modules
    to its two processes in this order: the long modules start at once and the fast ones, last,
    fill whichever process finishes first. (By test count, xdist's own order, a module of one
    40 s test came last and the other process idled while it ran.)"""
    slow: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        slow[module] = slow.get(module, 0) + (item.get_closest_marker("slow") is not None)
    return sorted(items, key=lambda item: -slow[item.nodeid.split("::")[0]])  # stable: ties keep their order


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Two (start, end) spans share some time."""
    return a[0] < b[1] and b[0] < a[1]


class TimedSlot:
    """One slot's real LocalEvaluator, recording when each of its evaluations ran."""

    spans: ClassVar[list[tuple[str, float, float]]] = []  # (slot device, start, end)

    def __init__(self, device: str) -> None:
        from okgit.eval.parent.local import LocalEvaluator

        self.slot = device
        self.inner = LocalEvaluator(device="cpu")
        self.device = self.inner.device

    def reference(self, problem):
        return self.inner.reference(problem)

    def evaluate(self, problem, source, *, mode="fast", backend="triton"):
        start = time.monotonic()
        try:
            return self.inner.evaluate(problem, source, mode=mode, backend=backend)
        finally:
            TimedSlot.spans.append((self.slot, start, time.monotonic()))

    def close(self) -> None:
        self.inner.close()

