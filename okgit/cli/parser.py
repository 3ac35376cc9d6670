"""The `okgit` command line: every command, its flags and its help, and one-line usage errors
(exit 2). Each command's handler is in okgit.cli.commands.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, NoReturn, Sequence

from okgit.cli.commands import (
    cmd_apply,
    cmd_bench_kernelbench,
    cmd_doctor,
    cmd_eval,
    cmd_gc,
    cmd_history,
    cmd_optimize,
    cmd_profile,
    cmd_revert,
    cmd_show,
    cmd_traces_export,
    cmd_verify,
    cmd_watch,
    usage,
)
from okgit.config import (
    BACKENDS,
    DEFAULT_ITERATIONS,
    DEFAULT_MODEL_ITERATIONS,
    DEVICES,
    EDIT_MODES,
    EVALUATORS,
    MODES,
    PROFILERS,
)


def _default(name: str) -> Any:
    """A setting's default, read from Config so --help and the code cannot disagree."""
    from okgit.config import Config

    return Config.model_fields[name].default


def _at_least(minimum: int) -> Callable[[str], int]:
    """A count flag's type: a whole number of at least `minimum`, else a one-line usage error (a
    negative `gc --keep` kept nothing and removed every finished run)."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, not {value}")
        return value

    return count


def _ratio(text: str) -> float:
    """A speedup flag's type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def _optimize_flags(p: argparse.ArgumentParser) -> None:
    """The run settings (config.RUN_FLAGS); each overrides okgit.toml / [tool.okgit] and OKGIT_* variables."""
    p.add_argument("--backend", choices=BACKENDS, help=f"kernel language (default: {_default('backend')})")
    p.add_argument("--model", help="litellm model string, or replay:TRACES.jsonl "
                                   "(default: none, the offline search: kernel templates, then autotune)")
    p.add_argument("--api-base", metavar="URL", help="OpenAI-compatible endpoint for --model, e.g. a local vLLM (default: the provider's)")
    p.add_argument("--mode", choices=MODES,
                   help=f"thorough: more interleaved rounds in the final gate (default: {_default('mode')})")
    p.add_argument("--iterations", type=int, metavar="N",
                   help="candidates to evaluate, all proposers together; a launch-setting variant "
                        "timed slower than the best and dropped unchecked counts as one "
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
    p.add_argument("--top", type=_at_least(1), default=4, metavar="N", help="with --campaign, the modules to optimize (default: 4)")
    _optimize_flags(p)
    p.add_argument("--resume", metavar="RUN", help=f"continue an interrupted run ({RUN_HELP}); PATH may be left out")
    p.add_argument("--watch", action="store_true", help="show the live view while it runs (q hides it, Ctrl-C stops the run)")

    p = command("profile", cmd_profile, "where a whole model's time goes: its leaf modules and call sites, ranked")
    p.add_argument("model", metavar="MODEL.py", help="a file with Model, get_inputs and get_init_inputs (KernelBench level-3 style)")
    p.add_argument("--device", choices=DEVICES, help="default: cuda when a GPU is visible, else cpu (profiled on the CPU, and said so)")
    p.add_argument("--top", type=_at_least(1), default=10, metavar="N", help="rows to show (default: 10)")

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
    p.add_argument("--require-speedup", type=_ratio, metavar="X", help="also fail unless the diff is X times faster (default: not required)")

    p = command("watch", cmd_watch, "live terminal view of a run, or of a campaign's runs one after another", json_flag=False)
    p.add_argument("run", nargs="?", metavar="RUN", help=f"{RUN_HELP}, a run directory (e.g. copied from another machine), or campaign:ID / campaign:latest")
    p.add_argument("--attach", type=int, help=argparse.SUPPRESS)  # optimize --watch: the pipe that names its run
    p.add_argument("--run-pid", type=int, help=argparse.SUPPRESS)  # optimize --watch: the process Ctrl-C stops

    p = command("traces", lambda a: usage("traces needs a subcommand: export"), "training records from traces", json_flag=False)
    tsub = p.add_subparsers(dest="traces_command", metavar="SUBCOMMAND")
    t = tsub.add_parser("export", help="write prompt/completion/reward records")
    t.set_defaults(handler=cmd_traces_export)
    _debug_flag(t)
    t.add_argument("run", nargs="?", metavar="RUN", help=f"{RUN_HELP} (default: every run)")
    t.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="default: jsonl (parquet needs okgit[parquet])")
    t.add_argument("--out", help="output path (default: training.<format> in the run directory, or in .okgit/runs for every run)")
    t.add_argument("--json", action="store_true", help="machine-readable output")

    p = command("gc", cmd_gc, "remove finished worktrees and old runs")
    p.add_argument("--keep", type=_at_least(0), default=20, metavar="N", help="with --runs, keep this many newest finished runs (default: 20)")
    p.add_argument("--runs", action="store_true", help="also delete old run directories and their tags (default: only worktrees and finished runs' branches)")
    p.add_argument("names", nargs="*", metavar="RUN", help="with --runs, remove exactly these runs, interrupted ones too")
    p.add_argument("--interrupted", action="store_true", help="with --runs, also remove interrupted runs past --keep (they can no longer resume)")

    p = command("bench", lambda a: usage("bench needs a suite: kernelbench"), "benchmark sweeps", json_flag=False)
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
    b.add_argument("--top", type=_at_least(1), default=4, metavar="N", help="level 3: the modules and chains each model's campaign optimizes (default: 4)")
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
