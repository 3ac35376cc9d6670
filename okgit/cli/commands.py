"""The handlers of the `okgit` commands (okgit.cli.parser names them): each calls the core and
renders its answer, as text or as JSON (`--json`). With `main` (okgit.cli) the only code that
prints; the progress printers it builds (okgit.views.progress) print for it.

Heavy modules (torch, git, litellm, textual) are imported inside the handlers so that
`okgit --help` answers at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from okgit.config import RUN_FLAGS
from okgit.errors import UsageError


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    elif text:
        print(text)


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
    from okgit.eval.parent.one_shot import evaluate_file

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
        return usage("naming runs needs --runs (gc --runs RUN... removes exactly those)")
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


def usage(message: str) -> int:
    raise UsageError(message)
