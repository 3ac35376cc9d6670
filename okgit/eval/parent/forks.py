"""Workers and judges forked from a zygote (okgit.eval.worker.zygote) instead of spawned.

A spawned worker imports torch and triton before it can say ready: about 1.4 s of CPU on a
CPU-only machine, more with CUDA's build, for every candidate. A zygote per device and
environment imports them once, and what both programs need (okgit.eval.worker.zygote.PRELOAD),
so that the judge and the workers fork from one zygote where their environments are the same (a
CPU; on a GPU the judge's allocator setting gives it one of its own); `fork` asks it for a process and returns at once with a handle
that reads like the `subprocess.Popen` of a spawned worker (pid, stdin, stdout, poll, wait,
returncode), so okgit.eval.parent.sandbox treats both alike. The handle's status pipe brings the
reaper's pid, then the worker's exit code; the reaper is the zygote's child, not this process's,
and its exit reaches this process only that way (a reaper killed before it wrote one reads as
killed by SIGKILL, as the parent's `kill` does).

A zygote is keyed by the worker's whole environment (okgit.eval.parent.sandbox.worker_env), so a
forked worker sees what a spawned one would: when the environment changes, the next request
starts a new zygote and the old one ends. A zygote that ends on its own (an import failed, CUDA
came up while importing, it was killed) is not asked again for its environment: those workers
are spawned, and a spawned worker says in its own stderr what failed.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

Key = tuple[str, tuple[tuple[str, str], ...]]  # device kind, environment


class Forked:
    """A forked worker's handle, read like a `subprocess.Popen` of its reaper. Safe to poll from
    another thread (a signal's handler lists the live workers while a job waits on one)."""

    def __init__(self, stdin: int, stdout: int, status: int) -> None:
        self.stdin = os.fdopen(stdin, "wb")
        self.stdout = os.fdopen(stdout, "rb", buffering=0)
        os.set_blocking(status, False)  # a thread that finds it drained by another reads nothing
        self._status = status  # open until `close`: a descriptor closed under another thread's select could be reused
        self._ended = False
        self._read = b""
        self._lock = threading.Lock()
        self.pid: int | None = None  # the reaper's, once the zygote forked it
        self.returncode: int | None = None

    def started(self, timeout_s: float) -> bool:
        """Waits until the zygote forked it (its pid is known); False if it never will."""
        deadline = time.monotonic() + timeout_s
        while self.pid is None and self.returncode is None:
            if not self._take(max(0.0, deadline - time.monotonic())):
                break
        return self.pid is not None

    def poll(self) -> int | None:
        while self.returncode is None and self._take(0.0):
            pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if not self._take(None if deadline is None else max(0.0, deadline - time.monotonic())):
                raise subprocess.TimeoutExpired("forked worker", timeout or 0.0)
        return self.returncode

    def close(self) -> None:
        for pipe in (self.stdin, self.stdout):
            try:
                pipe.close()
            except OSError:
                pass  # its reader is gone
        with self._lock:
            if self._status >= 0:
                os.close(self._status)
                self._status = -1

    def _take(self, timeout_s: float | None) -> bool:
        """Read what the status pipe has within `timeout_s`; False if nothing came."""
        if self._ended or self._status < 0:
            return False
        ready, _, _ = select.select([self._status], [], [], timeout_s)
        if not ready:
            return False
        with self._lock:
            try:
                chunk = os.read(self._status, 256)
            except BlockingIOError:
                return True  # another thread read it
            except OSError:  # closed meanwhile
                return False
            self._read += chunk
            lines = self._read.split(b"\n")
            if len(lines) > 1 and self.pid is None:
                self.pid = int(lines[0])
            if len(lines) > 2:
                self.returncode = int(lines[1])
            if not chunk:  # the reaper ended without an exit code: killed (or never forked: no pid)
                self._ended = True
                if self.returncode is None:
                    self.returncode = -signal.SIGKILL if self.pid is not None else 1
        return True


class Zygote:
    """One zygote process and this process's end of its socket."""

    def __init__(self, key: Key) -> None:
        self.key = key
        kind, env = key
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.requests = ours
        # its stderr goes nowhere: a zygote that fails is not asked again (see above)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "okgit.eval.worker.zygote", "--device", kind, "--socket", str(theirs.fileno())],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
            env=dict(env), pass_fds=[theirs.fileno()], start_new_session=True,
        )
        theirs.close()

    def fork(self, program: str, directory: Path, args: list[str]) -> Forked | None:
        """A worker running `program` in `directory` with its own `args`, its stderr into
        stderr.log there; None if the request failed."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        status_r, status_w = os.pipe()
        err = os.open(directory / "stderr.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        theirs = [stdin_r, stdout_w, err, status_w]
        # the handle first: if this is interrupted, its pipes close with it and an orphaned worker
        # reads the end of its stdin and exits
        handle = Forked(stdin_w, stdout_r, status_r)
        try:
            socket.send_fds(self.requests, [json.dumps({"program": program, "cwd": str(directory), "args": args}).encode()],
                            theirs)
        except OSError:
            handle.close()
            return None
        finally:
            for fd in theirs:
                os.close(fd)
        return handle

    def close(self) -> None:
        """No more requests: it ends once it reads that (its workers live on, no longer its)."""
        self.requests.close()

    def kill(self) -> None:
        self.requests.close()
        self.proc.kill()
        self.proc.wait()


_LOCK = threading.Lock()
# by device and program: the zygote of the newest environment it asked for (one zygote may serve
# both programs)
_ZYGOTES: dict[tuple[str, str], Zygote] = {}
_REFUSED: set[Key] = set()  # environments whose zygote ended on its own: spawned from then on


def fork(device: str, program: str, env: dict[str, str], directory: Path, args: list[str] | None = None) -> Forked | None:
    """A worker for `program` on `device` ("cpu", "cuda:N": `python -m PROGRAM --device cpu|cuda
    ARGS`) with environment `env`, forked in `directory` (its stderr into stderr.log there); None
    where none is forked: spawn it."""
    key: Key = ("cpu" if device == "cpu" else "cuda", tuple(sorted(env.items())))
    slot = (device, program)
    with _LOCK:
        for ended in [s for s, z in _ZYGOTES.items() if z.proc.poll() is not None]:  # on its own: refused
            _REFUSED.add(_ZYGOTES[ended].key)
            _release(ended)
        zygote = _ZYGOTES.get(slot)
        if zygote is not None and zygote.key != key:
            _release(slot)
            zygote = None
        if key in _REFUSED:
            return None
        if zygote is None:  # the other program's, where its environment is this one, else a new one
            zygote = next((z for (d, _), z in _ZYGOTES.items() if d == device and z.key == key), None) or Zygote(key)
            _ZYGOTES[slot] = zygote
        return zygote.fork(program, directory, args or [])


def _release(slot: tuple[str, str]) -> None:
    """The slot no longer asks its zygote; a zygote no slot asks ends."""
    zygote = _ZYGOTES.pop(slot)
    if all(z is not zygote for z in _ZYGOTES.values()):
        zygote.close()


def stop() -> None:
    """Kill every zygote (at exit, and when okgit stops its workers)."""
    with _LOCK:
        for zygote in {id(z): z for z in _ZYGOTES.values()}.values():
            zygote.kill()
        _ZYGOTES.clear()
