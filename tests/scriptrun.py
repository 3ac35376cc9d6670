"""Test helper: `python -c SCRIPT ARGS` under Triton's interpreter, as a fork of a warm process.

The interpreter tests that check numerics in a process of their own (TRITON_INTERPRET is read
when Triton's decorator runs, so it is set before anything imports Triton) each paid a Python
start and torch's and Triton's imports, about 2.4 s of CPU a call. Here one process per test
process imports torch and Triton under the caller's environment and nothing else: okgit is not
imported, nothing runs, no setting is changed (unlike oprun's server, which turns the
interpreter's sanitizer off). Each call runs its script in a fork of it, as `python -c` would
have: `__name__` "__main__", sys.argv the script's arguments, the caller's environment and
working directory, stdin empty, its own exit status. A script whose environment differs (one
that compiles for a GPU without TRITON_INTERPRET) starts a server of its own in its place, as
oprun's does.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from oprun import _Server

# oprun's protocol (a request line in; the fork's pid, then its wait status out on the first
# stdout), with the script run in the fork as `python -c` runs it
SCRIPTS = r'''
import os
PROTOCOL = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
import ctypes, json, signal, sys, traceback
import torch, triton, triton.language

def fork_body(request):
    code = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for std, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
                                 (2, request["stderr"], os.O_WRONLY | os.O_CREAT)):
            fd = os.open(path, flags)
            os.dup2(fd, std)
            os.close(fd)
        sys.argv = ["-c", *request["args"]]
        exec(compile(request["script"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        code = 0
    except SystemExit as e:  # sys.exit(n) as the interpreter exits with it
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
for line in sys.stdin:
    sys.stdout.flush()  # nothing of this process's buffers is written again by the fork
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        fork_body(json.loads(line))
    PROTOCOL.write(f"{pid}\n")
    PROTOCOL.flush()
    PROTOCOL.write(f"{os.waitpid(pid, 0)[1]}\n")
    PROTOCOL.flush()
'''

_server: _Server | None = None


@atexit.register
def _stop() -> None:
    if _server is not None:
        _server.close()


def run_script(script: str, args: list[str], env: dict[str, str], timeout: float,
               cwd: str | Path | None = None) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=cwd, capture_output=True,
    text=True, timeout=timeout)`'s result, from a fork of this test process's warm server."""
    global _server
    if _server is None or not _server.serves(env):
        if _server is not None:
            _server.close()
        _server = _Server(env, SCRIPTS)
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        request = {"script": script, "args": [str(a) for a in args], "env": env, "cwd": str(cwd or os.getcwd()),
                   "stdout": str(out), "stderr": str(err)}
        finished = _server.run(request, timeout)
        stdout, stderr = (p.read_text(errors="replace") if p.exists() else "" for p in (out, err))
        stderr += _server.died()
    if not finished:
        raise subprocess.TimeoutExpired([sys.executable, "-c", "..."], timeout, stdout, stderr)
    status = _server.status
    code = os.waitstatus_to_exitcode(status) if status is not None else 1  # None: the server died under it
    return subprocess.CompletedProcess([sys.executable, "-c", script, *args], code, stdout, stderr)
