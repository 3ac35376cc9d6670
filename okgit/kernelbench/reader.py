"""Finding problems in a KernelBench checkout: `KernelBench/level{N}/<id>_<Name>.py`.

The user may point at the checkout, at its inner `KernelBench` folder, or at one level
folder; all three resolve to the same list of problems. Problems are selected by level
and id only, never by name: nothing downstream may treat one problem differently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from okgit.errors import OkgitError, UsageError

_LEVEL_DIR = re.compile(r"^level(\d+)$")
_PROBLEM_FILE = re.compile(r"^(\d+)_(\w+)\.py$")


@dataclass(frozen=True, order=True)
class KBProblem:
    level: int
    id: int
    name: str  # the part after "<id>_", e.g. "Square_matrix_multiplication_"
    path: Path

    @property
    def key(self) -> str:
        """Stable and filesystem-safe: names the problem's state file and its rows."""
        return f"level{self.level}/{self.id}_{self.name}"

    @property
    def file_name(self) -> str:
        return self.path.name


def level_dirs(root: Path) -> dict[int, Path]:
    """The level folders under DIR, whichever of the three accepted places DIR is."""
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise OkgitError(f"{root}: no such directory")
    m = _LEVEL_DIR.match(root.name)
    if m:
        return {int(m.group(1)): root}
    for base in (root / "KernelBench", root):
        if not base.is_dir():
            continue
        found = {int(m.group(1)): p for p in base.iterdir() if p.is_dir() and (m := _LEVEL_DIR.match(p.name))}
        if found:
            return found
    raise OkgitError(f"{root}: not a KernelBench checkout (no KernelBench/level<N>/ folders, no level<N>/ folders)")


def parse_ids(spec: str | None) -> set[int] | None:
    """'3', '1-10', '1,4,7-9' -> a set of ids; None selects all."""
    if spec is None or not spec.strip():
        return None
    ids: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise UsageError(f"--problems {spec!r}: expected ids and ranges such as 1-10 or 1,4,7-9")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise UsageError(f"--problems {spec!r}: range {part} is empty")
        ids.update(range(lo, hi + 1))
    return ids


def find_problems(root: Path, level: int | None = None, problems: str | None = None) -> list[KBProblem]:
    """The selected problems, ordered by level then id. Errors when the selection is empty."""
    levels = level_dirs(root)
    if level is not None:
        if level not in levels:
            raise OkgitError(f"{root}: no level{level} folder (found: {', '.join(f'level{n}' for n in sorted(levels))})")
        levels = {level: levels[level]}
    ids = parse_ids(problems)
    found: list[KBProblem] = []
    for n, folder in sorted(levels.items()):
        for path in folder.iterdir():
            m = _PROBLEM_FILE.match(path.name)
            if m and path.is_file() and (ids is None or int(m.group(1)) in ids):
                found.append(KBProblem(level=n, id=int(m.group(1)), name=m.group(2), path=path))
    if not found:
        what = f"level {level}" if level is not None else "any level"
        sel = f" with ids {problems}" if problems else ""
        raise OkgitError(f"{root}: no problems in {what}{sel}")
    return sorted(found)
