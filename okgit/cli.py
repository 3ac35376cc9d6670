"""The `okgit` command: parse arguments, call the core, render. No logic of its own.

Heavy modules (torch, git, litellm, textual) are imported inside the handlers so that
`okgit --help` answers at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from okgit.errors import OkgitError, UsageError


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    elif text:
        print(text)


def _optimize_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=["triton", "cuda"])
    p.add_argument("--model", help="litellm model string, or replay:TRACES.jsonl (default: offline templates)")
    p.add_argument("--api-base", help="OpenAI-compatible endpoint for --model")
    p.add_argument("--mode", choices=["fast", "thorough"])
    p.add_argument("--iterations", type=int)
    p.add_argument("--budget-usd", type=float)
    p.add_argument("--eval", choices=["local", "modal"])
    p.add_argument("--device", choices=["cuda", "cpu"])
    p.add_argument("--edit-mode", choices=["whole", "patch"])


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("backend", "model", "api_base", "mode", "iterations", "budget_usd", "eval", "device", "edit_mode")
    return {k: getattr(args, k, None) for k in keys}


def cmd_optimize(args: argparse.Namespace) -> int:
    from okgit.run import optimize
    from okgit.progress import printer

    result = optimize(
        Path(args.path),
        flags=_flags(args),
        resume=args.resume,
        on_event=None if args.json or args.watch else printer(sys.stdout),
        watch=args.watch,
    )
    _emit(args, result.model_dump(mode="json"), result.summary())
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from okgit.eval.local import evaluate_file

    result = evaluate_file(Path(args.candidate), Path(args.ref), device=args.device, mode=args.mode or "fast", backend=args.backend)
    from okgit.render import eval_text

    _emit(args, result.model_dump(mode="json"), eval_text(result))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from okgit import history
    from okgit.repo import Repo

    repo = Repo.find(Path.cwd())
    if args.run:
        detail = history.run_detail(repo, args.run)
        _emit(args, detail.model_dump(mode="json"), history.detail_text(detail))
    else:
        runs = history.list_runs(repo)
        _emit(args, [r.model_dump(mode="json") for r in runs], history.runs_text(runs))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from okgit import patch
    from okgit.repo import Repo

    diff = patch.resolve_diff(Repo.find(Path.cwd()), args.ref)
    _emit(args, {"ref": args.ref, "diff": diff}, diff.rstrip("\n"))
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    from okgit import patch
    from okgit.repo import Repo

    files = patch.apply(Repo.find(Path.cwd()), args.ref, check=args.check)
    verb = "applies cleanly to" if args.check else "applied to"
    _emit(args, {"ref": args.ref, "check": args.check, "files": files}, f"{args.ref} {verb} {', '.join(files)}")
    return 0


def cmd_revert(args: argparse.Namespace) -> int:
    from okgit import patch
    from okgit.repo import Repo

    files = patch.revert(Repo.find(Path.cwd()), args.ref)
    _emit(args, {"ref": args.ref, "files": files}, f"reverted {args.ref} in {', '.join(files)}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from okgit.repo import Repo
    from okgit.verify import verify

    report = verify(Repo.find(Path.cwd()), args.ref, eval=args.eval, device=args.device, mode=args.mode or "thorough", require_speedup=args.require_speedup)
    _emit(args, report.model_dump(mode="json"), report.text())
    return 0 if report.ok else 1


def cmd_watch(args: argparse.Namespace) -> int:
    from okgit.repo import Repo
    from okgit.tui.app import watch

    # A run directory copied from another machine is watched in place.
    given = Path(args.run)
    watch(given if (given / "journal.jsonl").is_file() else Repo.find(Path.cwd()).run_dir(args.run))
    return 0


def cmd_traces_export(args: argparse.Namespace) -> int:
    from okgit.repo import Repo
    from okgit.search.traces import export

    done = export(Repo.find(Path.cwd()), args.run, fmt=args.format, out=args.out)
    _emit(args, done.model_dump(mode="json"), done.text())
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from okgit.repo import Repo
    from okgit.workspace import gc

    removed = gc(Repo.find(Path.cwd()), keep=args.keep, runs=args.runs)
    _emit(args, removed, "\n".join(f"removed {r}" for r in removed) or "nothing to remove")
    return 0


def cmd_bench_kernelbench(args: argparse.Namespace) -> int:
    from okgit.kernelbench.sweep import run_sweep

    report = run_sweep(
        Path(args.dir), level=args.level, problems=args.problems, parallel=args.parallel,
        flags=_flags(args), cross_check=args.cross_check, out=args.out,
    )
    _emit(args, report.model_dump(mode="json"), report.markdown())
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from okgit.doctor import checks, checks_text, usable

    found = checks(model=args.model, api_base=args.api_base)
    _emit(args, [c.model_dump(mode="json") for c in found], checks_text(found))
    return 0 if usable(found) else 1


class _CommandParser(argparse.ArgumentParser):
    """A command's parser. argparse hands a subcommand's unknown arguments up to the top-level
    parser, whose usage line says nothing of that command; refusing them here prints this
    command's usage (`okgit history --bogus` shows `usage: okgit history ...`), exit 2."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="okgit", description="A git-native optimizer for GPU kernels.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    # Nested subcommands (traces export, bench kernelbench) inherit the class from their parent.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)

    def command(name: str, handler: Callable[[argparse.Namespace], int], help: str, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handler)
        _debug_flag(p)
        if json_flag:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        return p

    p = command("optimize", cmd_optimize, "search for a faster, correct kernel for one op file")
    p.add_argument("path")
    _optimize_flags(p)
    p.add_argument("--resume", metavar="RUN", help="continue an interrupted run")
    p.add_argument("--watch", action="store_true", help="show the live view while it runs")

    p = command("eval", cmd_eval, "evaluate one candidate file against a reference file (no git)")
    p.add_argument("candidate")
    p.add_argument("--ref", required=True)
    p.add_argument("--device", choices=["cuda", "cpu"])
    p.add_argument("--mode", choices=["fast", "thorough"])
    p.add_argument("--backend", choices=["triton", "cuda"], default="triton")

    p = command("history", cmd_history, "list runs, or one run's candidates")
    p.add_argument("run", nargs="?")

    p = command("show", cmd_show, "a run's or a candidate's diff against the run's base")
    p.add_argument("ref", help="run id or tag okgit/<run>/<cand>")

    p = command("apply", cmd_apply, "apply a run's winning diff, a candidate's, or a diff file to the working tree")
    p.add_argument("ref", help="run id, tag okgit/<run>/<cand>, or a .diff file")
    p.add_argument("--check", action="store_true", help="only tell whether it applies (exit code)")

    p = command("revert", cmd_revert, "undo an applied run, tag or diff file in the working tree")
    p.add_argument("ref")

    p = command("verify", cmd_verify, "re-run every gate on a diff against the current HEAD (for CI)")
    p.add_argument("ref", metavar="PATCH_OR_REF")
    p.add_argument("--eval", choices=["local", "modal"])
    p.add_argument("--device", choices=["cuda", "cpu"])
    p.add_argument("--mode", choices=["fast", "thorough"])
    p.add_argument("--require-speedup", type=float, metavar="X")

    p = command("watch", cmd_watch, "live terminal view of a run", json_flag=False)
    p.add_argument("run", help="run id, or a run directory (e.g. copied from another machine)")

    p = command("traces", lambda a: _usage("traces needs a subcommand: export"), "training records from traces", json_flag=False)
    tsub = p.add_subparsers(dest="traces_command", metavar="SUBCOMMAND")
    t = tsub.add_parser("export", help="write prompt/completion/reward records")
    t.set_defaults(handler=cmd_traces_export)
    _debug_flag(t)
    t.add_argument("run", nargs="?", help="default: every run")
    t.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    t.add_argument("--out", help="output path")
    t.add_argument("--json", action="store_true")

    p = command("gc", cmd_gc, "remove finished worktrees and old runs")
    p.add_argument("--keep", type=int, default=20, help="keep this many newest runs")
    p.add_argument("--runs", action="store_true", help="also delete old run directories and their tags")

    p = command("bench", lambda a: _usage("bench needs a suite: kernelbench"), "benchmark sweeps", json_flag=False)
    bsub = p.add_subparsers(dest="bench_command", metavar="SUITE")
    b = bsub.add_parser("kernelbench", help="sweep a KernelBench checkout and score it")
    b.set_defaults(handler=cmd_bench_kernelbench)
    _debug_flag(b)
    b.add_argument("dir")
    b.add_argument("--level", type=int)
    b.add_argument("--problems", help="problem ids and ranges, e.g. 1-10 or 1,4,7-9")
    b.add_argument("--parallel", type=int, default=1)
    b.add_argument("--cross-check", action="store_true")
    b.add_argument("--out", help="directory for the sweep's state and tables")
    b.add_argument("--json", action="store_true")
    _optimize_flags(b)

    p = command("doctor", cmd_doctor, "what is installed and usable")
    p.add_argument("--model", help="also check this model with one tiny call")
    p.add_argument("--api-base", help="OpenAI-compatible endpoint for --model")
    return parser


def _debug_flag(p: argparse.ArgumentParser) -> None:
    # after the command too (`okgit traces export --debug`); SUPPRESS keeps a --debug given
    # before the command from being reset by the subparser's default
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")


def _usage(message: str) -> int:
    raise UsageError(message)


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
    except KeyboardInterrupt:
        print("okgit: interrupted", file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main())
