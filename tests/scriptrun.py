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

from oprun import FORKS, PRELUDE, _Server

# oprun's fork server, its body the script run as `python -c` runs it
SCRIPTS = PRELUDE + "import torch, triton, triton.language\n" + FORKS + r'''
def fork_body(request):
    code = 1
    try:
        enter(request)
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
        leave(code)

serve(fork_body)
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
