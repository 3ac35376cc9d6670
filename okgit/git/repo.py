"""The user's git repository, seen through the git CLI (the stable interface; no gitpython).

Promise kept here: okgit never writes the user's index, refs, working tree or hooks. Every
git call on the user's repository goes through `Repo.git`, which passes
`--no-optional-locks` (so reads such as `git status` do not refresh the index's stat data)
and disables hooks, so that okgit's own branch, tag and worktree operations run none of the
user's hooks. The bare `git` below serves only `Repo.find` (before there is a Repo) and
repositories okgit creates itself (the KernelBench sweep's, one per problem).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from okgit.errors import OkgitError
from okgit.locks import exclusive

# Variables that would point git at another repository or index than the one we name.
_LOCATION_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX")


def git(*args: str, cwd: Path | str | None = None, check: bool = True, input: str | None = None,
        env: dict[str, str] | None = None) -> str:
    """Run `git ARGS` and return its stdout; OkgitError with git's first stderr line on failure.

    `env` adds to (and overrides) a copy of the environment from which git's location
    variables were removed, so a call never lands in a repository or index by accident.
    """
    full_env = {k: v for k, v in os.environ.items() if k not in _LOCATION_VARS}
    full_env.update(env or {})
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, input=input, env=full_env,
                              capture_output=True, text=True)
    except FileNotFoundError:
        raise OkgitError("git is not installed (or not on PATH)") from None
    if check and proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        reason = lines[0] if lines else f"exit status {proc.returncode}"
        for prefix in ("fatal: ", "error: "):
            reason = reason.removeprefix(prefix)
        raise OkgitError(f"git {_command(args)}: {reason}")
    return proc.stdout


def _command(args: tuple[str, ...]) -> str:
    """The git subcommand among global options (`-c key=value`, `--no-optional-locks`)."""
    rest = iter(args)
    for arg in rest:
        if arg in ("-c", "-C"):
            next(rest, None)
        elif not arg.startswith("-"):
            return arg
    return ""


@dataclass(frozen=True)
class Repo:
    root: Path  # toplevel of the working tree the user is in
    common_dir: Path  # git's common dir (shared by all worktrees): exclude file, lock

    @classmethod
    def find(cls, cwd: Path | str) -> Repo:
        cwd = Path(cwd).resolve()
        try:
            out = git("rev-parse", "--show-toplevel", "--git-common-dir", cwd=cwd)
        except OkgitError:
            raise OkgitError(f"not inside a git repository: {cwd}") from None
        lines = out.splitlines()
        if len(lines) < 2 or not lines[0]:  # e.g. inside the .git directory or a bare repository
            raise OkgitError(f"not inside a git repository: {cwd}")
        root = Path(lines[0]).resolve()
        return cls(root=root, common_dir=(cwd / lines[1]).resolve())

    @classmethod
    def working_in(cls, cwd: Path | str, given: Path | str | None) -> Repo:
        """The current directory's repository, where okgit works (as git does); outside one, a
        refusal that also names the repository the `given` file or folder lies in, if any."""
        try:
            return cls.find(cwd)
        except OkgitError as outside:
            if given is None:
                raise
            path = Path(cwd, given)
            folder = path if path.is_dir() else path.parent
            if not folder.is_dir():
                raise
            try:
                theirs = cls.find(folder)
            except OkgitError:
                raise outside from None
            raise OkgitError(f"{outside}; {given} is in the repository {theirs.root}: run okgit from there") from None

    def git(self, *args: str, cwd: Path | None = None, check: bool = True, input: str | None = None,
            env: dict[str, str] | None = None) -> str:
        """`git` in this repository (default cwd: its root), with no optional locks and no hooks
        (core.hooksPath=/dev/null: git finds no hook there, and nothing is created for it)."""
        return git("--no-optional-locks", "-c", f"core.hooksPath={os.devnull}", *args,
                   cwd=cwd or self.root, check=check, input=input, env=env)

    # --- okgit's own places -------------------------------------------------------------

    @property
    def okgit_dir(self) -> Path:
        return self.root / ".okgit"

    @property
    def runs_dir(self) -> Path:
        return self.okgit_dir / "runs"

    @property
    def worktrees_dir(self) -> Path:
        return self.okgit_dir / "worktrees"

    @property
    def applied_dir(self) -> Path:
        return self.okgit_dir / "applied"

    def run_dir(self, run_id: str) -> Path:
        path = self.runs_dir / run_id
        if not run_id or "/" in run_id or run_id.startswith(".") or not path.is_dir():
            raise OkgitError(f"unknown run: {run_id}")
        return path

    def ensure_excluded(self) -> None:
        """List /.okgit/ in git's own exclude file (never in the user's .gitignore)."""
        exclude = self.common_dir / "info" / "exclude"
        text = exclude.read_text() if exclude.exists() else ""
        if "/.okgit/" in text.split("\n"):
            return
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with open(exclude, "a") as f:
            f.write(("" if text.endswith("\n") or not text else "\n") + "/.okgit/\n")

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Serialise okgit's own git operations (worktrees, refs) across processes.

        Not reentrant: never take it while holding it.
        """
        with exclusive(self.common_dir / "okgit.lock"):
            yield

    # --- the user's files -----------------------------------------------------------------

    def relpath(self, path: Path | str) -> str:
        """Repository-relative posix path of `path` (relative paths are taken from cwd)."""
        absolute = Path(os.path.abspath(path))
        # Resolve the directory, not the file: a tracked symlink is the user's file itself.
        real = absolute.parent.resolve() / absolute.name
        try:
            return real.relative_to(self.root).as_posix()
        except ValueError:
            raise OkgitError(f"{real}: outside the repository {self.root}") from None

    def is_tracked(self, rel: str) -> bool:
        out = self.git("ls-files", "--cached", "--full-name", "--", f":(top,literal){rel}")
        return bool(out.strip())

    def is_committed(self, rel: str) -> bool:
        """Whether HEAD holds `rel` (a file staged and never committed is tracked, not committed:
        a patch against HEAD would not find it)."""
        out = self.git("ls-tree", "--name-only", "-z", "HEAD", "--", f":(top,literal){rel}", check=False)
        return rel in out.split("\0")

    def uncommitted(self, rel: str) -> str | None:
        """Why `rel` is no file to optimize yet ("not tracked by git", "staged but never committed"), or None."""
        if self.is_committed(rel):
            return None
        return "staged but never committed" if self.is_tracked(rel) else "not tracked by git"

    def is_dirty(self, rel: str) -> bool:
        """Whether `rel` differs from HEAD in the index or the working tree."""
        out = self.git("status", "--porcelain", "--untracked-files=no", "--", f":(top,literal){rel}")
        return bool(out.strip())

    def head(self) -> str:
        out = self.git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False).strip()
        if not out:
            raise OkgitError("the repository has no commits yet: commit the op file first")
        return out

    def blob_of(self, rel: str) -> str | None:
        """The blob id the working-tree file would have if added now (None: no such file)."""
        if not (self.root / rel).is_file():
            return None
        return self.git("hash-object", "--", rel).strip()
