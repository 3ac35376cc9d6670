"""`okgit optimize MODEL.py --campaign`: a whole model's top modules as one campaign, then the
whole model with the winners in.

1. The model is profiled (okgit.campaign.probe) and its leaf modules ranked by their time.
2. The top ones become op files (okgit.campaign.extract) in the campaign's own repository,
   `.okgit/campaigns/<id>/ops-repo`: they are okgit's files, not the user's, so the user's
   index and tree never hold them. So does the model file itself (WHOLE): the whole forward as
   one op, whose kernels can fuse across the modules as torch.compile's do (on an H100 the
   module swaps alone reached 0.51x torch.compile of a ResNet block, which fuses each
   convolution's norm, activation and residual add). Each is a normal run there (worktree,
   tags, journal).
3. The modules' winners go into a package next to the model, `okgit_<model>/`, which two lines
   appended to the model file apply; the whole model's winner replaces the model file. Each
   patch is verified as `okgit verify` does (the model file changed in place against HEAD's,
   outputs within tolerance; where timed, interleaved rounds of the whole model), a module's
   winner that breaks the whole model alone is left out, and of the two patches the faster
   whole model is kept (where nothing is timed, the modules': the smaller change).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Any, Callable

from okgit.campaign import core, extract
from okgit.campaign.profile import check_model, run_probe
from okgit.campaign.result import CampaignResult, EndToEnd, write_outputs
from okgit.config import load_config
from okgit.errors import OkgitError
from okgit.eval.types import BaselineTimes
from okgit.git.repo import Repo, git
from okgit.journal.events import Event
from okgit.paths import given_path
from okgit.status import RunStatus

Patch = tuple[EndToEnd, dict[str, str]]  # a verified model patch, and the files it writes

_IDENTITY = {"GIT_AUTHOR_NAME": "okgit", "GIT_AUTHOR_EMAIL": "okgit@localhost",
             "GIT_COMMITTER_NAME": "okgit", "GIT_COMMITTER_EMAIL": "okgit@localhost"}
_QUIET = ("-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "-c", "gc.auto=0")
# a winner worth trying in the whole model, whose own interleaved rounds then judge it: `matched`
# too (as fast as its module within the noise on some round, often faster: on an H100 a Swin
# block's fc2 was matched at 2.01x, 91 against 45 us), since the model's gate leaves out a swap
# that makes the whole model slower
SWAPPED = (RunStatus.optimized.value, RunStatus.matched.value, RunStatus.unverified.value)


WHOLE = "whole_model.py"  # the model file in the campaign's repository: its whole forward as one op
WHOLE_LABEL = "(the whole model)"


def optimize_model(path: Path, *, flags: dict[str, Any] | None = None, top: int = 4, cwd: Path | None = None,
                   on_event: Callable[[Event], None] | None = None) -> CampaignResult:
    from okgit.git.workspace import check_op

    repo = Repo.working_in(cwd or Path.cwd(), path)
    model_path = given_path(path, cwd)
    check_model(model_path)
    rel = check_op(repo, model_path)
    if repo.is_dirty(rel):
        raise OkgitError(f"{rel} has uncommitted changes; commit them first (the campaign's patch is against HEAD)")
    if top < 1:
        raise OkgitError(f"--top {top}: at least one module")
    config = load_config(repo.root, flags)
    space = core.start_campaign(repo)
    space.announce(on_event, f"profiling {rel} in its own process (its top modules become op files next)")
    try:
        found = run_probe(model_path, config.device)
        ranked, refused = extract.groups(found)
    except BaseException:  # refused or stopped before its first problem: it leaves no trace
        space.discard()
        raise
    chosen = ranked[:top]
    ops_repo = _ops_repo(space.dir / "ops-repo", chosen, rel, repo.git("show", f"HEAD:{rel}"))
    ops = {f"{g.slug}.py": g for g in chosen}
    fused = sum(len(g.infos) > 1 for g in ranked)
    notes = [f"profiled {rel} on {found['device']}: {len(found['rows'])} rows, {len(ranked)} extractable problems "
             f"({fused} of them chains of modules), the top {len(chosen)} optimized, and the whole model as one op"] + [
        f"not extracted: {m}: {why}" for m, why in refused.items()]
    outcome = core.run_problems(space, ops_repo, [WHOLE, *ops], dict(flags or {}), on_event=on_event,
                                modules={WHOLE: WHOLE_LABEL, **{op: g.label for op, g in ops.items()}},
                                weights_us={WHOLE: found["total_us"], **{op: g.time_us for op, g in ops.items()}},
                                notes=tuple(notes))
    for row in outcome.rows:  # a model's share of time is the profile's, not the ops' own
        row.time_share = 1.0 if row.op == WHOLE else ops[row.op].share if row.op in ops else None
    winners = {r.op: _winner(ops_repo, r) for r in swappable(outcome.rows)}
    end, diff = (None, "") if outcome.interrupted else _verify_model(space, repo, rel, ops, winners, config, on_event,
                                                                      leaves=len(found["leaves"]))
    result = CampaignResult(
        campaign_id=space.campaign_id, kind="model", status=RunStatus(end.status) if end else core.overall_status(outcome),
        device=outcome.device, backend=outcome.backend, ordered_by=outcome.ordered_by, problems=outcome.rows,
        report=str(space.dir / "report.md"), diff=str(space.dir / "report.diff"), ops_repo=str(ops_repo.root),
        end_to_end=end)
    write_outputs(space, result, diff)
    if outcome.interrupted:
        raise KeyboardInterrupt
    return result


def swappable(rows: list[core.ProblemRow]) -> list[core.ProblemRow]:
    """The problems whose winners go into the whole model, to be judged there."""
    return [r for r in rows if r.status in SWAPPED and r.best_tag]


def _ops_repo(path: Path, chosen: list[extract.Group], model: str, whole: str) -> Repo:
    """A repository of the extracted op files and the model file (`whole`, as WHOLE), committed
    with okgit's identity."""
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", str(path))
    (path / WHOLE).write_text(whole)
    for g in chosen:
        (path / f"{g.slug}.py").write_text(extract.op_source(g, model))
    git("add", ".", cwd=path)
    git(*_QUIET, "commit", "-q", "--no-verify", "-m", f"okgit: modules of {model} as op files", cwd=path, env=_IDENTITY)
    return Repo.find(path)


def _winner(ops_repo: Repo, row: core.ProblemRow) -> str:
    return ops_repo.git("show", f"refs/tags/{row.best_tag}:{row.op}")


def _verify_model(space: core.CampaignSpace, repo: Repo, rel: str, ops: dict[str, extract.Group],
                  winners: dict[str, str], config: Any, on_event: Callable[[Event], None] | None, *, leaves: int
                  ) -> tuple[EndToEnd | None, str]:
    """The model patch with the modules' winners (every one, else those that hold alone) and the
    one with the whole model's winner, each verified; the faster whole model's kept, timed
    against eager and torch.compile; (result, diff)."""
    if not winners:
        return None, ""

    def log(**fields: Any) -> None:
        event = space.journal.write("model_checked", **fields)
        if on_event:
            on_event(event)

    modules = {op: source for op, source in winners.items() if op != WHOLE}
    tried = [_modules_patch(repo, rel, space.campaign_id, ops, modules, config, log, space.dir)] if modules else []
    if WHOLE in winners:
        files = {rel: winners[WHOLE]}
        end = _check(repo, rel, files, [WHOLE_LABEL], leaves, config, space.dir)
        if not end.ok:
            end.dropped = {WHOLE_LABEL: end.reason}
        tried.append((end, files))
    chosen, tried = handed_out(tried, lambda end, files: _whole_model(end, rel, files, repo, config))
    if chosen is None:  # nothing holds: the first tried says why
        dropped = _left_out(tried)
        end = tried[0][0].model_copy(update={"swapped": [], "modules_swapped": 0, "status": RunStatus.fallback.value,
                                             "dropped": dropped})
        log(status=end.status, reason=end.reason, swapped=[], speedup=end.speedup, dropped=dropped, state=end.state)
        return end, ""
    end, files = chosen
    log(status=end.status, reason=end.reason, swapped=end.swapped, speedup=end.speedup, dropped=end.dropped,
        state=end.state, eager_us=end.eager_us, compile_us=end.compile_us, patched_us=end.patched_us,
        arm_noise=end.arm_noise, untimed=end.untimed)
    return end, model_diff(repo, files)


def handed_out(tried: list[Patch], judge: Callable[[EndToEnd, dict[str, str]], EndToEnd]
               ) -> tuple[Patch | None, list[Patch]]:
    """The patch `faster` keeps, judged as a whole model (`judge`: its state dict against the
    original's, its times); where its state dict changed, none of it is handed out, each of its
    swaps says why, and the next that holds is judged. (the one handed out or None, what was tried)."""
    while any(e.ok for e, _ in tried):
        end, files = faster(tried)
        judged = judge(end, files)
        if judged.ok:
            return (judged, files), tried
        own = next(e for e, f in tried if f is files)
        judged.dropped = {**own.dropped, **{label: judged.reason for label in judged.swapped}}
        tried = [(judged if f is files else e, f) for e, f in tried]
    return None, tried


def faster(tried: list[Patch]) -> Patch:
    """Of the verified patches that hold (the modules', the whole model's), the one whose whole
    model is faster against HEAD; untimed, the first (the modules': the smaller change). What the
    others left out stays named, and the patch not kept is named with both speedups."""
    kept = [t for t in tried if t[0].ok]
    end, files = max(kept, key=lambda t: t[0].speedup or 0.0)
    end = end.model_copy(update={"dropped": _left_out(tried)})
    for other, _ in kept:
        if other.swapped != end.swapped:
            end.dropped[", ".join(other.swapped)] = (
                f"the whole model {other.speedup:.2f}x with it, {end.speedup:.2f}x with {', '.join(end.swapped)}"
                if other.speedup is not None and end.speedup is not None else
                "nothing timed: the modules' patch is kept, the smaller change")
    return end, files


def _left_out(tried: list[Patch]) -> dict[str, str]:
    """What each verified patch left out, and why."""
    return {label: why for e, _ in tried for label, why in e.dropped.items()}


def _modules_patch(repo: Repo, rel: str, campaign_id: str, ops: dict[str, extract.Group], winners: dict[str, str],
                   config: Any, log: Callable[..., None], scratch: Path) -> Patch:
    """The modules' winners swapped in, verified: every one, else those that hold alone."""

    def check(chosen: dict[str, str]) -> Patch:
        groups = [(ops[op], source) for op, source in chosen.items()]
        files = patched_files(repo, rel, campaign_id, groups)
        swapped = [ops[op].label for op in chosen]
        count = sum(len(site) for op in chosen for site in ops[op].paths)
        return _check(repo, rel, files, swapped, count, config, scratch), files

    end, files = check(winners)
    dropped: dict[str, str] = {}
    if not end.ok and len(winners) > 1:
        log(status="fallback", reason=f"with every winner: {end.reason}; trying each alone", swapped=end.swapped)
        kept = {}
        for op, source in winners.items():
            alone, _ = check({op: source})
            if alone.ok:
                kept[op] = source
            else:
                dropped[ops[op].label] = alone.reason
        if kept:
            end, files = check(kept)
    if not end.ok:
        dropped.update({ops[op].label: end.reason for op in winners if ops[op].label not in dropped})
    end.dropped = dropped
    return end, files


def _whole_model(end: EndToEnd, rel: str, files: dict[str, str], repo: Repo, config: Any) -> EndToEnd:
    """The verified patch's model against the original: its state dict (the same names, shapes
    and values), and on a GPU eager, torch.compile and the patched model timed in one process,
    interleaved, each with its noise (okgit.kernelbench.baselines); a CPU times nothing."""
    from okgit.kernelbench.runs import helper

    with tempfile.TemporaryDirectory(prefix="okgit-whole-") as tmp:
        for name, text in files.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_text(text)
        original = Path(tmp) / "original" / Path(rel).name
        original.parent.mkdir()
        original.write_text(repo.git("show", f"HEAD:{rel}"))
        # the package beside the patched model, and the model's own directory for its siblings
        path = [str((Path(tmp) / rel).parent), str((repo.root / rel).parent), os.environ.get("PYTHONPATH", "")]
        device = "cpu" if config.device == "cpu" else "cuda:0"
        found = helper("baselines", original, Path(tmp) / rel, {**os.environ, "PYTHONPATH": os.pathsep.join(path)},
                       extra=[config.backend, "--device", device, "--model-patch"])
    if isinstance(found, str):
        return end.model_copy(update={"untimed": found})
    times = BaselineTimes.model_validate(found)
    update: dict[str, Any] = {"state": times.state, "eager_us": times.eager_us, "compile_us": times.compile_us,
                              "patched_us": times.okgit_us, "arm_noise": times.noise,
                              "untimed": "; ".join(why if arm == "all" else f"{arm}: {why}"
                                                   for arm, why in times.errors.items()) or None}
    if times.state != "unchanged":
        update.update(ok=False, status=RunStatus.fallback.value, reason=f"the patched model's state dict: {times.state}")
    return end.model_copy(update=update)


def _check(repo: Repo, rel: str, files: dict[str, str], swapped: list[str], modules: int, config: Any,
           scratch: Path) -> EndToEnd:
    """The patch writing `files` verified as `okgit verify` does."""
    from okgit.verify import verify

    diff = model_diff(repo, files)
    with tempfile.NamedTemporaryFile("w", suffix=".diff", dir=scratch, delete=False) as f:
        f.write(diff)
    try:
        report = verify(repo, f.name, eval=config.eval, device=config.device, mode=config.mode)
    except OkgitError as e:
        return EndToEnd(model=rel, ok=False, status=RunStatus.fallback.value, reason=str(e), swapped=swapped,
                        device=config.device or "?")
    finally:
        Path(f.name).unlink(missing_ok=True)
    verdict = report.ops[0]
    c = verdict.comparison
    if not verdict.ok:
        status = RunStatus.fallback
    elif c is None:
        status = RunStatus.unverified
    else:
        status = RunStatus.optimized if c.optimized else RunStatus.matched
    return EndToEnd(model=rel, ok=verdict.ok, status=status.value, reason=verdict.reason, swapped=swapped,
                    modules_swapped=modules, device=verdict.result.device, timed=c is not None, comparison=c,
                    baseline_us=statistics.median(c.baseline_us) if c else None,
                    optimized_us=statistics.median(c.candidate_us) if c else None,
                    speedup=c.speedup if c else None, noise=c.noise if c else None)


def model_diff(repo: Repo, files: dict[str, str]) -> str:
    """The diff against HEAD that writes `files` (repository path -> text), built in a throwaway
    index."""
    with tempfile.TemporaryDirectory(prefix="okgit-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        repo.git("read-tree", "HEAD", env=env)
        for name, text in files.items():
            blob = repo.git("hash-object", "-w", "--stdin", input=text).strip()
            repo.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}", env=env)
        tree = repo.git("write-tree", env=env).strip()
    return repo.git("diff-tree", "-p", "--full-index", "--no-renames", "HEAD", tree, "--", *(f":(top,literal){n}" for n in files))


def patched_files(repo: Repo, rel: str, campaign_id: str, winners: list[tuple[extract.Group, str]]) -> dict[str, str]:
    """Repository-relative path -> text of every file the model patch writes."""
    package = extract.package_name(rel)
    folder = (Path(rel).parent / package).as_posix().removeprefix("./")
    files = {f"{folder}/{group.slug}.py": source for group, source in winners}
    sites = [site for group, _ in winners for site in group.sites()]
    files[f"{folder}/__init__.py"] = extract.package_init(campaign_id, Path(rel).name, sites)
    files[rel] = repo.git("show", f"HEAD:{rel}") + extract.model_hook(campaign_id, package)
    return files
