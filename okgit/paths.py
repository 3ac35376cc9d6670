"""okgit's per-user files outside any repository (a repository's own `.okgit` paths are `Repo`'s),
and the one way a path the user typed is read.

`OKGIT_DATA_DIR` moves all of them, e.g. for tests or a shared machine.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    """The cache: measured device peaks, per-device lock files, Modal build stamps."""
    root = os.environ.get("OKGIT_DATA_DIR")
    return Path(root) if root else Path.home() / ".cache" / "okgit"


def skills_path(configured: str | None = None) -> Path:
    """The skill library: kept data, not cache (XDG_DATA_HOME, ~/.local/share), unless moved."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get("OKGIT_DATA_DIR"):
        return Path(os.environ["OKGIT_DATA_DIR"]).expanduser() / "skills.json"
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "okgit" / "skills.json"


def given_path(path: Path | str, cwd: Path | None = None) -> Path:
    """A path the user gave on the command line, absolute (a relative one from `cwd`) and with
    `..` and `.` folded, as git and every message of okgit's show it (never `repo/../x.py`)."""
    return Path(os.path.normpath((cwd or Path.cwd()) / path))
