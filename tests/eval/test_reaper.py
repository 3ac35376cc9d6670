"""Nothing a worker starts outlives it (okgit.eval.reaper): a process a candidate puts in a session
of its own, even orphaned by a double fork, is killed when the worker exits and when the parent
kills the worker; the worker's exit reaches the parent as it was. Real processes throughout."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from okgit.eval.parent.sandbox import REAPER, WorkerProcess, default_memory_limit
from okgit.eval.protocol.reaper import exited

# Starts a sleeper that leaves the worker's process group and session, through a double fork (the
# middle process exits at once, so the sleeper is orphaned), writes the sleeper's pid, then acts.
ESCAPES = textwrap.dedent("""
    import os, sys, time
    if sys.argv[1] == "sleeper":
        time.sleep(3600)
    elif sys.argv[1] == "middle":
        pid = os.posix_spawn(sys.executable, [sys.executable, __file__, "sleeper"], dict(os.environ), setsid=True)
        open(sys.argv[2], "w").write(str(pid))
    else:
        middle = os.posix_spawn(sys.executable, [sys.executable, __file__, "middle", sys.argv[2]], dict(os.environ))
        os.waitpid(middle, 0)
        print('{"ready": true}', flush=True)
        if sys.argv[1] == "exit":
            sys.exit(3)
        if sys.argv[1] == "killed":
            os.kill(os.getpid(), 9)
        time.sleep(3600)  # "stay": until the parent kills it
""")


def _sleeper(pid_file: Path) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        time.sleep(0.01)
    raise AssertionError("the worker never started its sleeper")


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while not exited(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return exited(pid)


def test_what_a_worker_left_in_a_session_of_its_own_dies_with_it_and_its_exit_code_is_kept(tmp_path):
    script, pid_file = tmp_path / "escapes.py", tmp_path / "sleeper.pid"
    script.write_text(ESCAPES)
    proc = subprocess.run([sys.executable, "-I", str(REAPER), "--", sys.executable, str(script), "exit", str(pid_file)],
                          capture_output=True, text=True, timeout=60, start_new_session=True)
    sleeper = _sleeper(pid_file)
    assert proc.returncode == 3 and proc.stdout.strip() == '{"ready": true}', proc.stderr
    assert _gone(sleeper)  # orphaned, in a session of its own: still the reaper's to kill


def test_a_worker_killed_by_a_signal_reads_so_to_the_parent(tmp_path):
    script, pid_file = tmp_path / "escapes.py", tmp_path / "sleeper.pid"
    script.write_text(ESCAPES)
    proc = subprocess.run([sys.executable, "-I", str(REAPER), "--", sys.executable, str(script), "killed", str(pid_file)],
                          capture_output=True, timeout=60, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL
    assert _gone(_sleeper(pid_file))


def test_the_parent_kills_a_live_worker_with_everything_it_started(tmp_path):
    script, pid_file = tmp_path / "escapes.py", tmp_path / "sleeper.pid"
    script.write_text(ESCAPES)
    # the stand-in runs where a wrapper would (as ncu does), the worker's own command line ignored
    worker = WorkerProcess("cpu", default_memory_limit(), wrap=[sys.executable, str(script), "stay", str(pid_file)])
    try:
        assert worker.wait_ready(60)
        sleeper = _sleeper(pid_file)
        assert not exited(sleeper)
        worker.close()
        assert _gone(sleeper) and not worker.alive()
    finally:
        worker.close()


def test_without_a_command_the_reaper_says_how_it_is_called():
    proc = subprocess.run([sys.executable, "-I", str(REAPER)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "usage" in proc.stderr


@pytest.mark.parametrize("how", ["spawned", "forked"])
@pytest.mark.parametrize("where", ["while it starts", "once it started"])
def test_an_interrupt_while_a_worker_starts_leaves_no_process_and_no_directory(tmp_path, monkeypatch, where, how):
    """Ctrl-C or SIGTERM (a KeyboardInterrupt in okgit) landing while a worker is started (spawned:
    in Popen after its fork; forked: once the zygote was asked): its directory goes, and so does its
    process where okgit holds it; a forked one okgit never held exits once its pipes close."""
    from okgit.eval.parent import sandbox

    started: list = []

    def starting(real):
        def start(*args, **kwargs):
            started.append(real(*args, **kwargs))
            if where == "while it starts":
                raise KeyboardInterrupt
            return started[-1]
        return start

    def lines(proc):
        raise KeyboardInterrupt

    if how == "spawned":
        monkeypatch.setattr(sandbox.forks, "fork", lambda *args: None)
        monkeypatch.setattr(sandbox.subprocess, "Popen", starting(subprocess.Popen))
    else:
        monkeypatch.setattr(sandbox.forks, "fork", starting(sandbox.forks.fork))
    if where == "once it started":
        monkeypatch.setattr(sandbox, "Lines", lines)
    try:
        with pytest.raises(KeyboardInterrupt):
            WorkerProcess("cpu", default_memory_limit(), base_dir=tmp_path)
        assert list(tmp_path.glob("okgit-worker-*")) == []
        assert not any(w.proc in started for w in list(sandbox._STARTED.values()))  # nothing left for stop_all
        if where == "once it started":
            assert started[0].poll() is not None  # killed: okgit held it
        elif how == "forked":  # ended, at the end of its stdin (no job for it), or unstarted (its directory went)
            started[0].stdin.close()
            assert started[0].wait(60) in (0, 1)
    finally:
        for proc in started:
            if how == "spawned":
                proc.kill()
                proc.wait()
            elif proc.poll() is None:
                proc.stdin.close()
                proc.wait(60)


def test_a_stopped_process_is_waited_for_until_every_thread_of_it_is_stopped():
    """SIGSTOP is delivered when its target next runs: `paused` waits until each thread is stopped
    (a loaded run once saw a paused worker's thread write after `paused` had returned)."""
    from okgit.eval.protocol.reaper import send, wait_stopped

    spin = "import threading\ndef spin():\n    while True:\n        pass\nthreading.Thread(target=spin).start()\nspin()\n"
    proc = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.2)  # both threads spinning
        assert wait_stopped([proc.pid], within_s=0.05) is False  # running: waited for, in vain
        send(proc.pid, signal.SIGSTOP)
        assert wait_stopped([proc.pid], within_s=5.0) is True
        tasks = Path(f"/proc/{proc.pid}/task").iterdir()
        assert {(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks} == {"T"}
    finally:
        proc.kill()
        proc.wait()
    assert wait_stopped([proc.pid]) is True  # gone
