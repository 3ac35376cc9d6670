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
from typing import Any, Callable, NoReturn, Sequence

from okgit.config import (
    BACKENDS,
    DEFAULT_ITERATIONS,
    DEFAULT_MODEL_ITERATIONS,
    DEVICES,
    EDIT_MODES,
    EVALUATORS,
    MODES,
    PROFILERS,
    RUN_FLAGS,
)
from okgit.errors import OkgitError, UsageError


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    elif text:
        print(text)


def _default(name: str) -> Any:
    """A setting's default, read from Config so --help and the code cannot disagree."""
    from okgit.config import Config

    return Config.model_fields[name].default


def _optimize_flags(p: argparse.ArgumentParser) -> None:
    """The run settings (config.RUN_FLAGS); each overrides okgit.toml / [tool.okgit] and OKGIT_* variables."""
    p.add_argument("--backend", choices=BACKENDS, help=f"kernel language (default: {_default('backend')})")
    p.add_argument("--model", help="litellm model string, or replay:TRACES.jsonl "
                                   "(default: none, the offline search: kernel templates, then autotune)")
    p.add_argument("--api-base", metavar="URL", help="OpenAI-compatible endpoint for --model, e.g. a local vLLM (default: the provider's)")
    p.add_argument("--mode", choices=MODES,
                   help=f"thorough: more interleaved rounds in the final gate (default: {_default('mode')})")
    p.add_argument("--iterations", type=int, metavar="N",
                   help="candidates to evaluate, all proposers together "
                        f"(default: {DEFAULT_ITERATIONS}, {DEFAULT_MODEL_ITERATIONS} with --model)")
    p.add_argument("--budget-usd", type=float, metavar="X", help="stop once model calls cost this much (default: no limit)")
    p.add_argument("--eval", choices=EVALUATORS.names(), help=f"where candidates run (default: {_default('eval')})")
    p.add_argument("--device", choices=DEVICES, help="default: cuda when a GPU is visible, else cpu (Triton's interpreter, untimed)")
    p.add_argument("--edit-mode", choices=EDIT_MODES,
                   help=f"how a model writes candidates: whole files or patches (default: {_default('edit_mode')})")
    p.add_argument("--modal-gpu", metavar="GPU", help=f"the GPU of --eval modal, e.g. H100, H200, A100-80GB (default: {_default('modal_gpu')})")
    p.add_argument("--profiler", choices=PROFILERS,
                   help="the profiling pass's hardware counters: auto (Nsight Compute where it runs, else Proton), ncu, "
                        f"proton, all (both), off (torch.profiler's kernel times and the roofline only) (default: {_default('profiler')})")


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k, None) for k in RUN_FLAGS}


def cmd_optimize(args: argparse.Namespace) -> int:
    from okgit.run import optimize
    from okgit.views.progress import printer

    if not args.path and not args.resume:
        raise UsageError("optimize needs PATH, the op file (or --resume RUN to continue a run)")
    if args.path and (Path(args.path).is_dir() or args.campaign):
        return _campaign(args)
    progress = None if args.json else printer(sys.stdout, args.path)
    watcher = None
    if args.watch:
        from okgit.git.repo import Repo
        from okgit.tui.launch import WatchProcess

        watcher = WatchProcess(Repo.find(Path.cwd()).root)  # outside a repository: one line, no view
        if progress:
            watcher.mute(progress)
    result = optimize(Path(args.path) if args.path else None, flags=_flags(args), resume=args.resume, on_event=progress,
                      watcher=watcher)
    _emit(args, result.model_dump(mode="json"), result.summary())
    return 0


def _campaign(args: argparse.Namespace) -> int:
    """`optimize DIR/` and `optimize MODEL.py --campaign`: each problem's progress as a run's."""
    from okgit.views.progress import CampaignPrinter

    if args.resume or args.watch:
        raise UsageError("a campaign takes neither --resume nor --watch (follow it with: okgit watch campaign:latest)")
    on_event = None if args.json else CampaignPrinter(sys.stdout)
    if Path(args.path).is_dir():
        from okgit.campaign.directory import optimize_dir

        result = optimize_dir(Path(args.path), flags=_flags(args), on_event=on_event)
    else:
        from okgit.campaign.model import optimize_model

        result = optimize_model(Path(args.path), flags=_flags(args), top=args.top, on_event=on_event)
    _emit(args, result.model_dump(mode="json"), result.summary())
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from okgit.campaign.profile import profile_model

    report = profile_model(Path(args.model), device=args.device)
    _emit(args, report.model_dump(mode="json"), report.text(top=args.top))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from okgit.eval.parent.local import evaluate_file

    result = evaluate_file(Path(args.candidate), Path(args.ref), device=args.device, mode=args.mode or "fast", backend=args.backend)
    from okgit.views.eval_text import eval_text

    _emit(args, result.model_dump(mode="json"), eval_text(result))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from okgit.campaign import listing
    from okgit.git import history
    from okgit.git.campaigns import is_campaign_ref, resolve_campaign
    from okgit.git.repo import Repo
    from okgit.views import tables

    if args.log and (not args.run or is_campaign_ref(args.run)):
        raise UsageError("history --log takes a run: okgit history RUN --log")
    repo = Repo.find(Path.cwd())
    if args.run and is_campaign_ref(args.run):
        campaign = listing.campaign_summary(repo, resolve_campaign(repo, args.run))
        _emit(args, campaign.model_dump(mode="json"), listing.detail_text(campaign))
    elif args.run:
        from okgit.git.workspace import resolve_run

        run_id = resolve_run(repo, args.run)
        if args.log:
            view = history.run_view(repo, run_id)
            _emit(args, [vars(line) for line in view.log], "\n".join(view.log_lines()))
            return 0
        detail = history.run_detail(repo, run_id)
        _emit(args, detail.model_dump(mode="json"), tables.detail_text(detail))
    else:
        campaigns = listing.list_campaigns(repo)
        runs = listing.with_campaigns(history.list_runs(repo), campaigns)
        text = tables.runs_text(runs) + ("\n\n" + listing.campaigns_text(campaigns) if campaigns else "")
        _emit(args, [r.model_dump(mode="json") for r in runs], text)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from okgit.git import patch
    from okgit.git.repo import Repo

    repo = Repo.find(Path.cwd())
    ref = patch.resolve_ref(repo, args.ref)
    diff = patch.resolve_diff(repo, ref)
    where = _applies_at(repo, ref)
    winner, reference = patch.profiles(repo, ref)
    _emit(args, {"ref": ref, "diff": diff, "applies_at": where, "profile": {"candidate": winner, "reference": reference}},
          diff.rstrip("\n"))
    if not args.json:  # the diff alone on stdout, so that it can be piped to git apply
        if where:
            print(f"note: {ref}: {where}", file=sys.stderr)
        for line in _profile_lines(winner, reference):
            print(line, file=sys.stderr)
    return 0


def _profile_lines(winner: Any, reference: Any) -> list[str]:
    """`okgit show`'s profile of the candidate beside the reference's, one figure a line."""
    from okgit.search.profile_text import side_by_side

    rows = side_by_side(winner, reference)
    if not rows:
        return []
    width = max(len(f) for f, _, _ in rows)
    return ["profile (candidate | reference):"] + [f"  {f:<{width}}  {w} | {r}" for f, w, r in rows]


def _applies_at(repo: Any, ref: str) -> str:
    from okgit.eval.types import KernelShape
    from okgit.git import patch
    from okgit.views.eval_text import applies_at

    return applies_at([KernelShape(**s) for s in patch.kernel_shapes(repo, ref)])


def cmd_apply(args: argparse.Namespace) -> int:
    from okgit.git import patch
    from okgit.git.repo import Repo

    repo = Repo.find(Path.cwd())
    ref = patch.resolve_ref(repo, args.ref)
    files = patch.apply(repo, ref, check=args.check)
    verb = "applies cleanly to" if args.check else "applied to"
    text = f"{ref} {verb} {', '.join(files)}"
    checked = None if args.check else patch.checked_on(repo, ref)
    if checked:
        from okgit.views.eval_text import INTERPRETER_NOTE, interpreted

        if interpreted(*checked):
            text += f"\nnote: {ref} was {INTERPRETER_NOTE}"
    where = _applies_at(repo, ref)
    if where:
        text += f"\nnote: {where}"
    _emit(args, {"ref": ref, "check": args.check, "files": files, "applies_at": where}, text)
    return 0


def cmd_revert(args: argparse.Namespace) -> int:
    from okgit.git import patch
    from okgit.git.repo import Repo

    repo = Repo.find(Path.cwd())
    ref = patch.resolve_ref(repo, args.ref)
    files = patch.revert(repo, ref)
    _emit(args, {"ref": ref, "files": files}, f"reverted {ref} in {', '.join(files)}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from okgit.git.patch import resolve_ref
    from okgit.git.repo import Repo
    from okgit.verify import verify

    repo = Repo.find(Path.cwd())
    report = verify(repo, resolve_ref(repo, args.ref), eval=args.eval, device=args.device, mode=args.mode or "thorough", require_speedup=args.require_speedup)
    _emit(args, report.model_dump(mode="json"), report.text())
    return 0 if report.ok else 1


def cmd_watch(args: argparse.Namespace) -> int:
    from okgit.tui.app import watch

    if args.attach is not None:  # started by optimize --watch, before its run has a directory
        from okgit.tui.launch import INTERRUPTED_RUN

        return INTERRUPTED_RUN if watch(None, attach_fd=args.attach, run_pid=args.run_pid) else 0
    if not args.run:
        raise UsageError("watch needs a RUN (a run id, a unique prefix of one, latest, or a run directory)")
    from okgit.git.campaigns import is_campaign_ref
    from okgit.git.rundir import RunDir

    if is_campaign_ref(args.run):  # the view moves to each problem's run as the campaign starts it
        from functools import partial

        from okgit.campaign.listing import current_run_dir
        from okgit.git.campaigns import resolve_campaign
        from okgit.git.repo import Repo

        repo = Repo.find(Path.cwd())
        watch(None, follow=partial(current_run_dir, repo, resolve_campaign(repo, args.run)))
        return 0
    # A run directory copied from another machine is watched in place.
    given = Path(args.run)
    run_dir = given if RunDir(given).journal.is_file() else _run_dir(args.run)
    if not sys.stdout.isatty():  # a pipe or a log: the run's progress lines, then back
        from okgit.tui.plain import follow
        from okgit.views.progress import printer, watch_end

        progress = printer(sys.stdout)
        follow(run_dir, progress)
        print(watch_end(progress.view))
        return 0
    watch(run_dir)
    return 0


def _run_dir(ref: str) -> Path:
    from okgit.git.repo import Repo
    from okgit.git.workspace import resolve_run

    repo = Repo.find(Path.cwd())
    return repo.run_dir(resolve_run(repo, ref))


def cmd_traces_export(args: argparse.Namespace) -> int:
    from okgit.git.repo import Repo
    from okgit.git.workspace import resolve_run
    from okgit.search.traces import export

    repo = Repo.find(Path.cwd())
    done = export(repo, resolve_run(repo, args.run) if args.run else None, fmt=args.format, out=args.out)
    _emit(args, done.model_dump(mode="json"), done.text())
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from okgit.git.gc import gc
    from okgit.git.repo import Repo

    if args.names and not args.runs:
        return _usage("naming runs needs --runs (gc --runs RUN... removes exactly those)")
    report = gc(Repo.find(Path.cwd()), keep=args.keep, runs=args.runs, names=args.names, interrupted=args.interrupted)
    _emit(args, report.model_dump(mode="json"), report.text())
    return 0


def cmd_bench_kernelbench(args: argparse.Namespace) -> int:
    from okgit.kernelbench.sweep import run_sweep

    report = run_sweep(
        Path(args.dir), level=args.level, problems=args.problems, parallel=args.parallel,
        flags=_flags(args), cross_check=args.cross_check, out=args.out, time_limit_s=args.time_limit, top=args.top,
        progress=lambda line: print(f"okgit bench: {line}", file=sys.stderr, flush=True),
    )
    _emit(args, report.model_dump(mode="json"), report.markdown())
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from okgit.doctor import checks, checks_text, usable

    found = checks(model=args.model, api_base=args.api_base)
    _emit(args, [c.model_dump(mode="json") for c in found], checks_text(found))
    return 0 if usable(found) else 1


class _Parser(argparse.ArgumentParser):
    """A usage error in one line naming the argument and where the options are listed, exit 2
    (argparse's own prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


class _CommandParser(_Parser):
    """A command's parser. argparse hands a subcommand's unknown arguments up to the top-level
    parser, which cannot say which command they were given to; refusing them here names it
    (`okgit history: unrecognized arguments: --bogus`), exit 2."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        assert namespace is not None  # argparse makes one when none is given
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    from okgit import __version__

    parser = _Parser(prog="okgit", description="A git-native optimizer for GPU kernels.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"okgit {__version__}")
    # Nested subcommands (traces export, bench kernelbench) inherit the class from their parent.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)

    def command(name: str, handler: Callable[[argparse.Namespace], int], help: str, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handler)
        _debug_flag(p)
        if json_flag:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        return p

    p = command("optimize", cmd_optimize, "search for a faster, correct kernel for one op file, a directory of them or a model")
    p.add_argument("path", nargs="?", help="the op file (KernelBench format), tracked by git; a directory: every op file in it, "
                                           "as one campaign (with --resume: the run's own, when left out)")
    p.add_argument("--campaign", action="store_true",
                   help="PATH is a whole model (Model, get_inputs, get_init_inputs): optimize its top modules as one campaign, then the whole model")
    p.add_argument("--top", type=int, default=4, metavar="N", help="with --campaign, the modules to optimize (default: 4)")
    _optimize_flags(p)
    p.add_argument("--resume", metavar="RUN", help=f"continue an interrupted run ({RUN_HELP}); PATH may be left out")
    p.add_argument("--watch", action="store_true", help="show the live view while it runs (q hides it, Ctrl-C stops the run)")

    p = command("profile", cmd_profile, "where a whole model's time goes: its leaf modules and call sites, ranked")
    p.add_argument("model", metavar="MODEL.py", help="a file with Model, get_inputs and get_init_inputs (KernelBench level-3 style)")
    p.add_argument("--device", choices=DEVICES, help="default: cuda when a GPU is visible, else cpu (profiled on the CPU, and said so)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows to show (default: 10)")

    p = command("eval", cmd_eval, "evaluate one candidate file against a reference file (no git)")
    p.add_argument("candidate", help="the candidate op file (defines ModelNew or Model)")
    p.add_argument("--ref", required=True, help="the reference op file")
    p.add_argument("--device", choices=DEVICES, help="default: cuda when a GPU is visible, else cpu")
    p.add_argument("--mode", choices=MODES, help="thorough: every gate at more seeds and shapes (default: fast)")
    p.add_argument("--backend", choices=BACKENDS, default="triton", help="the candidate's kernel language (default: triton)")

    p = command("history", cmd_history, "list runs and campaigns, or one run's candidates, or one campaign's problems")
    p.add_argument("run", nargs="?", metavar="RUN", help=f"show this run's candidates ({RUN_HELP}; or campaign:ID, campaign:latest; default: list every run and campaign)")
    p.add_argument("--log", action="store_true", help="with RUN: the run's log, line by line, as okgit watch shows it")

    p = command("show", cmd_show, "a run's or a candidate's diff against the run's base")
    p.add_argument("ref", metavar="REF", help=f"a run ({RUN_HELP}), a tag okgit/<run>/<cand> or a campaign (campaign:ID)")

    p = command("apply", cmd_apply, "apply a run's winning diff, a candidate's, or a diff file to the working tree")
    p.add_argument("ref", metavar="REF", help=f"a run ({RUN_HELP}), a tag okgit/<run>/<cand>, a campaign (campaign:ID), or a .diff file")
    p.add_argument("--check", action="store_true", help="change nothing: print whether it applies (exit 0) or why not (exit 1)")

    p = command("revert", cmd_revert, "undo an applied run, tag or diff file in the working tree")
    p.add_argument("ref", metavar="REF", help="what was given to okgit apply (a run, a tag, a campaign or a .diff file)")

    p = command("verify", cmd_verify, "re-run every gate on a diff against the current HEAD (for CI)")
    p.add_argument("ref", metavar="PATCH_OR_REF", help="a .diff file, a run, a tag okgit/<run>/<cand> or a campaign (campaign:ID)")
    p.add_argument("--eval", choices=EVALUATORS.names(), help=f"where the candidate runs (default: {_default('eval')}, or okgit.toml's)")
    p.add_argument("--device", choices=DEVICES, help="default: cuda when a GPU is visible, else cpu (correctness only)")
    p.add_argument("--mode", choices=MODES, help="default: thorough")
    p.add_argument("--require-speedup", type=float, metavar="X", help="also fail unless the diff is X times faster (default: not required)")

    p = command("watch", cmd_watch, "live terminal view of a run, or of a campaign's runs one after another", json_flag=False)
    p.add_argument("run", nargs="?", metavar="RUN", help=f"{RUN_HELP}, a run directory (e.g. copied from another machine), or campaign:ID / campaign:latest")
    p.add_argument("--attach", type=int, help=argparse.SUPPRESS)  # optimize --watch: the pipe that names its run
    p.add_argument("--run-pid", type=int, help=argparse.SUPPRESS)  # optimize --watch: the process Ctrl-C stops

    p = command("traces", lambda a: _usage("traces needs a subcommand: export"), "training records from traces", json_flag=False)
    tsub = p.add_subparsers(dest="traces_command", metavar="SUBCOMMAND")
    t = tsub.add_parser("export", help="write prompt/completion/reward records")
    t.set_defaults(handler=cmd_traces_export)
    _debug_flag(t)
    t.add_argument("run", nargs="?", metavar="RUN", help=f"{RUN_HELP} (default: every run)")
    t.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="default: jsonl (parquet needs okgit[parquet])")
    t.add_argument("--out", help="output path (default: training.<format> in the run directory, or in .okgit/runs for every run)")
    t.add_argument("--json", action="store_true", help="machine-readable output")

    p = command("gc", cmd_gc, "remove finished worktrees and old runs")
    p.add_argument("--keep", type=int, default=20, metavar="N", help="with --runs, keep this many newest finished runs (default: 20)")
    p.add_argument("--runs", action="store_true", help="also delete old run directories and their tags (default: only worktrees and finished runs' branches)")
    p.add_argument("names", nargs="*", metavar="RUN", help="with --runs, remove exactly these runs, interrupted ones too")
    p.add_argument("--interrupted", action="store_true", help="with --runs, also remove interrupted runs past --keep (they can no longer resume)")

    p = command("bench", lambda a: _usage("bench needs a suite: kernelbench"), "benchmark sweeps", json_flag=False)
    bsub = p.add_subparsers(dest="bench_command", metavar="SUITE")
    b = bsub.add_parser("kernelbench", help="sweep a KernelBench checkout and score it")
    b.set_defaults(handler=cmd_bench_kernelbench)
    _debug_flag(b)
    b.add_argument("dir", help="a KernelBench checkout")
    b.add_argument("--level", type=int, help="only this level (default: every level)")
    b.add_argument("--problems", help="problem ids and ranges, e.g. 1-10 or 1,4,7-9 (default: all)")
    b.add_argument("--parallel", type=int, default=1, metavar="N", help="problems at once (default: 1)")
    b.add_argument("--cross-check", action="store_true", help="also score each correct winner with KernelBench's own evaluator, when installed (default: off)")
    b.add_argument("--out", help="directory for the sweep's state and tables; rerun with the same one to resume (default: .okgit/bench/<time>, or a temporary directory outside a repository)")
    b.add_argument("--time-limit", type=float, metavar="S", help="end cleanly within S seconds: the problems in flight are stopped with their runs resumable, the report lists what is left, and a rerun with the same --out goes on (default: none)")
    b.add_argument("--top", type=int, default=4, metavar="N", help="level 3: the modules and chains each model's campaign optimizes (default: 4)")
    b.add_argument("--json", action="store_true", help="machine-readable output")
    _optimize_flags(b)

    p = command("doctor", cmd_doctor, "what is installed and usable")
    p.add_argument("--model", help="also check this model with one tiny call; exit 1 when it is not usable")
    p.add_argument("--api-base", metavar="URL", help="OpenAI-compatible endpoint for --model (default: the provider's)")
    return parser


RUN_HELP = "a run id, a unique prefix of one, latest or latest~N"


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


if __name__ == "__main__":
    sys.exit(main())
