"""A `okgit bench kernelbench` sweep carried across device calls: run, pack, restore.

Each device call starts bare, so a sweep that needs more than one call keeps its folder (the
finished problems' state files, the repositories of the problems in flight with their
interrupted runs, ledgers, winners, logs, journals) as one tarball that the next call unpacks
at the same path before running the same command again (`okgit bench kernelbench` resumes
from its --out folder). Used by bench/sweep_dev.py and bench/trust.py.
"""

from __future__ import annotations

import signal
import subprocess
import tarfile
from pathlib import Path


def restore(tarball: Path, sweep_out: Path) -> bool:
    """Unpacks an earlier call's tarball into sweep_out; False where there is none."""
    if not tarball.is_file():
        return False
    with tarfile.open(tarball) as tar:
        tar.extractall(sweep_out, filter="data")
    return True


def run_relaying(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> int:
    """The sweep, with a SIGTERM to this script (the device call's own limit) passed on to it:
    it then stops as at its time limit."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, start_new_session=True)

    def relay(signum: int, frame: object) -> None:
        proc.send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, relay)
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)


def pack(sweep_out: Path, dest: Path) -> None:
    """The sweep's folder, less what the next call does not need: worktrees (rebuilt on resume),
    figures, and the repositories of finished problems but for their runs' journals and results."""
    finished = {p.stem for p in (sweep_out / "state").glob("*.json")}

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        if "worktrees" in parts or info.name.endswith(".png"):
            return None
        if len(parts) > 2 and parts[0] == "repos" and parts[1] in finished:  # repos/P/.okgit/runs/RUN/journal.jsonl
            wanted = parts[2:4] == (".okgit", "runs")[: len(parts) - 2] and (
                len(parts) <= 5 or (len(parts) == 6 and parts[5] in ("journal.jsonl", "result.json")))
            return info if wanted else None
        return info

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w:gz") as tar:
        for child in sorted(sweep_out.iterdir()):
            tar.add(child, arcname=child.name, filter=keep)
