"""Nothing left running, nothing lost: a reference that hangs ends within its own limit, and
Ctrl-C of `okgit optimize` while the reference is prepared ends every process okgit
started and removes their /dev/shm directories (mid-search: test_optimize.py's
test_interrupted_run_is_consistent_and_resumes, with these helpers, then resumes the run). Real
subprocesses, a real repository; the processes okgit started are found below the okgit process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_optimize import commit_op

from okgit.eval.protocol.reaper import descendants

pytestmark = pytest.mark.slow  # signals to real okgit processes and their workers

HANGING = '''import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        time.sleep(3600)  # a forward that never returns
        return x


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
'''


def children(pid: int) -> dict[int, str]:
    """Every process below `pid` (okgit's zygotes, the reapers they fork, the workers and judges
    below those), with their working directories."""
    found = {}
    for child in descendants(pid):
        try:
            found[child] = os.readlink(f"/proc/{child}/cwd")
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start(root: Path, op: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "okgit", "optimize", op, "--device", "cpu", "--iterations", "3"],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})


def wait_for(condition, timeout_s: float = 240.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def assert_all_gone(started: dict[int, str]) -> None:
    assert started, "okgit started no worker or judge"
    wait_for(lambda: not any(alive(pid) for pid in started), 30)
    left = [d for d in started.values() if d.startswith("/dev/shm/okgit-") and Path(d).exists()]
    assert not left, left


def commit_hanging(root: Path) -> str:
    commit_op(root, HANGING, "ops/hang.py")
    return "ops/hang.py"


def test_a_hanging_reference_ends_within_its_limit_in_one_line(git_repo: Path) -> None:
    op = commit_hanging(git_repo)
    t0 = time.monotonic()
    # the limit counts once the judge is ready (okgit.eval.parent.reference.ask): the reference
    # reaches its forward well within it, so the test waits out no more than it must
    proc = start(git_repo, op, OKGIT_REFERENCE_TIMEOUT_S="5")
    started: dict[int, str] = {}
    while proc.poll() is None:
        started.update(children(proc.pid))
        time.sleep(0.2)
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 1 and time.monotonic() - t0 < 5 + 90, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "did not finish within its limit of 5 s" in lines[0], err
    assert "reference: s0" in lines[0]  # where it hung
    assert_all_gone(started)


def test_a_signal_while_the_reference_hangs_stops_everything(git_repo: Path) -> None:
    # Ctrl-C; SIGTERM takes the same handler (okgit.run._on_signal, from the start of `optimize`),
    # tested before the reference (test_new_user.py) and mid-search (test_optimize.py)
    op = commit_hanging(git_repo)
    proc = start(git_repo, op)
    started: dict[int, str] = {}

    def judge_running() -> bool:
        started.update(children(proc.pid))
        return any(Path(d, "phase").exists() and "reference" in Path(d, "phase").read_text()
                   for d in started.values() if Path(d).exists())

    wait_for(judge_running)
    started.update(children(proc.pid))
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    said = "Ctrl-C: stopped "
    assert said in err and "judge" in err.split(said)[1] and "directories are removed" in err, err
    assert "Traceback" not in err
    assert_all_gone(started)


BUSY_THREAD = """
import atexit, sys, threading, torch
from okgit.cli import entry

def busy():  # as the templates' planning may be when a run ends: in torch's C++ code
    a = torch.randn(512, 512)
    while True:
        a @ a

threading.Thread(target=busy, daemon=True).start()
atexit.register(lambda: print("cleaned up", flush=True))
sys.argv = ["okgit", "--version"]
entry()
"""


def test_the_command_ends_cleanly_while_a_daemon_thread_runs_torch() -> None:
    """CPython's teardown ends a daemon thread inside torch's C++ frames, which aborts the process
    (exit 134) after okgit's last line; the command leaves without that teardown, its atexit
    cleanup run first."""
    proc = subprocess.run([sys.executable, "-c", BUSY_THREAD], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "terminate called" not in proc.stderr, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.startswith("okgit ") and proc.stdout.endswith("cleaned up\n"), proc.stdout
