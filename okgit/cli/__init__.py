"""The `okgit` command: parse arguments, call the core, render. No logic of its own.

okgit.cli.parser declares the commands and their flags, okgit.cli.commands holds one handler
per command (it calls the core and prints); `main` runs one: its exit code, and an error in
one line (a traceback only with --debug). `entry` is the installed command and `python -m okgit`:
main, then the process's exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

from okgit.cli.parser import build_parser
from okgit.errors import OkgitError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed its usage line
        return int(e.code or 0) and 2
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except KeyboardInterrupt as e:
        stopped = getattr(e, "message", "")  # okgit.run.Stopped: the signal and what it stopped
        print(f"okgit: interrupted ({stopped})" if stopped else "okgit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `okgit history | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except OkgitError as e:
        if args.debug or os.environ.get("OKGIT_DEBUG"):
            raise
        print(f"okgit: {e}", file=sys.stderr)
        return e.exit_code
    except Exception as e:  # a bug of ours: still one line unless asked
        if args.debug or os.environ.get("OKGIT_DEBUG"):
            raise
        print(f"okgit: internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)", file=sys.stderr)
        return 1


def entry() -> NoReturn:
    """`okgit` as a process: main's exit code. Where a daemon thread of okgit still runs (the
    templates' planning, begun beside the reference, when Ctrl-C or a refusal ends the run first),
    the process leaves without the interpreter's teardown: CPython ends such a thread inside
    torch's C++ frames, which aborts the process after its last line ("terminate called without
    an active exception", exit 134). The atexit cleanup (workers stopped, evaluators and the
    seed's process closed) runs first, as at any exit."""
    code = main()
    if any(t.daemon and t.is_alive() for t in threading.enumerate()):
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)

