"""A worker's keeper: the process a worker (or a judge) runs under, so that nothing it starts
outlives it.

The parent kills a worker's process group when its job ends badly; a process that left the group
(a session of its own, os.setsid) or was orphaned by a double fork would outlive it and could run
GPU work beside later timings. This process is started in the worker's place, marks itself a
child subreaper (prctl PR_SET_CHILD_SUBREAPER: an orphan anywhere below it is re-parented to it,
not to init, whatever group or session it is in), runs the worker's command as its child and
waits for it; when the worker has exited, it kills whatever is left below it and exits as the
worker did (the same code, or the same signal). The parent kills the tree below it the same way
before it kills this process (okgit.eval.parent.sandbox, WorkerProcess.kill). No candidate code runs here:
it is run by path with stdlib imports only, and a candidate cannot change another process's
subreaper mark.

    python -I okgit/eval/protocol/reaper.py -- COMMAND...
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
_PROC = Path("/proc/self").exists()  # Linux: the process tree can be read


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: through each of its threads' children (/proc/PID/task/*/children),
    or, where the kernel keeps no such list, every process's parent in /proc/*/stat; none without
    /proc (not Linux: the process group is all there is)."""
    if not _PROC:
        return []
    children = _children if Path(f"/proc/{pid}/task/{pid}/children").exists() else _children_by_stat()
    found: list[int] = []
    todo = [pid]
    while todo:
        new = [k for k in children(todo.pop()) if k not in found and not exited(k)]
        found += new
        todo += new
    return found


def exited(pid: int) -> bool:
    """Gone, or a zombie waiting for its parent to collect its exit (nothing left to stop or kill)."""
    return _state(f"/proc/{pid}/stat") in (None, "Z", "X")


def _state(stat: str) -> str | None:
    """A process's or thread's state letter from its /proc stat file, None where it cannot be read."""
    try:
        return Path(stat).read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
    except OSError:  # it exited while its threads were listed
        return kids
    for task in tasks:
        try:
            kids += [int(c) for c in task.read_text().split()]
        except (OSError, ValueError):
            continue
    return kids


def _children_by_stat() -> Callable[[int], list[int]]:
    by_parent: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:  # the parent's pid is the 2nd field after the command's closing parenthesis
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            by_parent.setdefault(parent, []).append(int(entry.name))
    return lambda pid: by_parent.get(pid, [])


def stop_tree(pid: int, rounds: int = 50) -> list[int]:
    """Stop (SIGSTOP) every process below `pid`, looking again until no new one appears (one that
    was forking when it was stopped shows its child on the next look); the processes stopped."""
    stopped: list[int] = []
    for _ in range(rounds):
        new = [p for p in descendants(pid) if p not in stopped]
        if not new:
            break
        for p in new:
            send(p, signal.SIGSTOP)
        stopped += new
    return stopped


def wait_stopped(pids: list[int], within_s: float = 1.0) -> bool:
    """Until every thread of `pids` is stopped (or gone), at most `within_s`: a SIGSTOP is delivered
    when its target next runs, so a thread busy in a system call (a write, a launch) finishes it
    after the signal was sent (a loaded 2-core run of the fast subset saw a paused worker's thread
    write once more after `paused` had returned). False where one still ran; True too where there
    is no /proc to look in."""
    deadline = time.monotonic() + within_s
    while True:
        running = [p for p in pids if _running(p)]
        if not running:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)


def _running(pid: int) -> bool:
    """Whether a thread of `pid` is in neither the stopped (T, t) nor a dead (Z, X) state."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False  # gone, or no /proc
    return any(_state(f"/proc/{pid}/task/{tid}/stat") not in (None, "T", "t", "Z", "X") for tid in tasks)


def kill_tree(pid: int, rounds: int = 50) -> None:
    """Kill every process below `pid` (not `pid`): stopped first, so none forks away meanwhile."""
    for _ in range(rounds):
        below = stop_tree(pid)
        if not below:
            return
        for p in below:
            send(p, signal.SIGKILL)
        time.sleep(0.005)


def send(pid: int, sig: int) -> None:
    """`sig` to `pid`, if it is still there to get it."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(within_s: float = 5.0) -> None:
    """Collect the exit of every orphan that was re-parented here (the worker was waited for); one
    killed inside a driver call may take a while: after `within_s` it is left to init, killed."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.005)


def become_subreaper() -> None:
    """Orphans anywhere below this process come back to it (Linux), whatever group or session."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the process group is all there is


def outlive(pid: int) -> int:
    """Wait for the child `pid` (the worker), then kill and collect whatever is left below this
    process: the worker's exit code, negative for the signal that ended it."""
    _, status = os.waitpid(pid, 0)
    kill_tree(os.getpid())
    _reap()
    return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    if not command:
        print("usage: reaper.py -- COMMAND...", file=sys.stderr)
        return 2
    become_subreaper()
    worker = subprocess.Popen(command)  # stdin, stdout, stderr, directory and environment are the worker's
    code = worker.returncode = outlive(worker.pid)
    if code < 0:  # killed by a signal: end the same way, so the parent reads the same exit
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP keep their default
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
