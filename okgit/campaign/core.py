"""A campaign: several op files screened, budgeted and optimized as one, with one patch.

Each problem is a normal `okgit optimize` run (okgit.run.optimize: its own worktree, tags,
journal and report.diff); the campaign adds the screening and the budget split before, and
the combined patch and report after. Every problem that cannot be loaded or whose reference
cannot tell right from wrong is refused on its own line; the others go on.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock
from pydantic import BaseModel

from okgit.campaign import plan
from okgit.config import Config, load_config
from okgit.errors import OkgitError
from okgit.eval.base import Evaluator
from okgit.git.campaigns import campaigns_dir
from okgit.git.repo import Repo
from okgit.journal.campaign import CAMPAIGN_EVENTS, CampaignPreparing
from okgit.journal.events import Event, RunStarted
from okgit.journal.files import Journal
from okgit.locks import try_hold
from okgit.problem import REQUIRED, Problem, load_problem, top_level_names
from okgit.status import RunStatus

AT_FLOOR = "at_floor"  # a problem's status when its reference is already at its roofline floor
REFUSED = "refused"  # the op file could not be loaded, or its reference cannot tell right from wrong
PENDING = "pending"  # screened, not run (yet: a campaign interrupted before it)
ORDER_TIMED = "estimated gain (reference time x headroom over the roofline floor)"
ORDER_UNTIMED = "estimated work (roofline floor at nominal peaks from counted FLOPs and bytes; no timing on this device)"
ORDER_MODEL = "estimated gain (time in the model x headroom over the roofline floor)"


class ProblemRow(BaseModel):
    """One problem of a campaign, as the report, result.json and --json show it."""

    op: str  # path of the op file in the repository it was optimized in
    status: str  # a RunStatus, at_floor, refused, or pending (an interrupted campaign did not reach it)
    module: str | None = None  # a model campaign: the module the op file was extracted from
    run_id: str | None = None
    reason: str = ""  # why at_floor or refused
    timed: bool = False
    reference_us: float | None = None
    floor_us: float | None = None
    flops: float | None = None
    min_bytes: float | None = None
    headroom: float | None = None  # fraction of the reference's time above its floor
    time_share: float | None = None  # of the campaign's reference time (a model: of the model's time)
    budget_share: float = 0.0  # of the campaign's estimated gain: its part of the budget
    iterations: int = 0
    speedup: float | None = None
    baseline_us: float | None = None
    best_us: float | None = None
    best_tag: str | None = None
    diff: str | None = None  # this problem's own patch (ops/<n>-<name>.diff), when it has a winner


@dataclass
class Outcome:
    rows: list[ProblemRow]  # in plan order, the refused last
    device: str
    backend: str
    ordered_by: str
    interrupted: bool = False  # Ctrl-C or SIGTERM during a problem's run: the rest were not run


@dataclass
class CampaignSpace:
    campaign_id: str
    repo: Repo  # the user's repository: where the campaign directory, and its patch, belong
    dir: Path
    base: str  # HEAD when the campaign started
    journal: Journal  # its events: okgit.journal.campaign
    holder: FileLock | None = None  # held while the campaign's process lives (history: running)

    def release(self) -> None:
        if self.holder is not None:
            self.holder.release()
            self.holder = None

    def announce(self, on_event: Callable[[Event], None] | None, doing: str) -> None:
        """The campaign's first line, at once: before the evaluator starts or a model is
        profiled (never journaled, as a run's `Preparing`)."""
        if on_event:
            on_event(CampaignPreparing(ts=time.time(), run=self.campaign_id, doing=doing))

    def discard(self) -> None:
        """Remove the campaign whole: it was refused, or stopped, before its first problem."""
        self.release()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_campaign(repo: Repo) -> CampaignSpace:
    from okgit.git.workspace import new_run_id

    with repo.lock():
        repo.ensure_excluded()
        campaign_id = new_run_id()
        while (campaigns_dir(repo) / campaign_id).exists():
            campaign_id = new_run_id()
        path = campaigns_dir(repo) / campaign_id
        (path / "ops").mkdir(parents=True)
    return CampaignSpace(campaign_id, repo, path, repo.head(), Journal(path / "journal.jsonl", campaign_id, CAMPAIGN_EVENTS),
                         try_hold(path / ".lock"))


def find_ops(repo: Repo, directory: Path, config: Config) -> tuple[list[str], list[str]]:
    """The op files of `directory` (repository-relative) and the files skipped, with why.

    okgit.toml's `[[op]]` entries under the directory, when it lists any; else every tracked
    Python file there (recursively) that defines Model, get_inputs and get_init_inputs, or
    that cannot be read as Python at all: such a file is a problem that the screening refuses
    on its own line (it may be a broken op file), not a helper passed over in silence.
    """
    rel_dir = repo.relpath(directory)
    prefix = "" if rel_dir in ("", ".") else rel_dir.rstrip("/") + "/"
    listed = [op.path.strip("/") for op in config.op if op.path.strip("/").startswith(prefix)]
    if listed:
        return sorted(listed), []
    ops, skipped = [], []
    for path in sorted(directory.rglob("*.py")):
        if any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(directory).parts):
            continue
        rel = repo.relpath(path)
        try:
            if not set(REQUIRED) <= top_level_names(path.read_text(), rel):
                continue  # a helper module, not an op file
        except (OkgitError, UnicodeDecodeError):
            pass  # unreadable: refused when the campaign screens it, with the reason
        why = repo.uncommitted(rel)
        if why:
            skipped.append(f"{rel}: {why} (commit it first)")
            continue
        ops.append(rel)
    return ops, skipped


def run_problems(space: CampaignSpace, ops_repo: Repo, ops: list[str], flags: dict[str, Any], *,
                 on_event: Callable[[Event], None] | None = None,
                 modules: dict[str, str] | None = None, weights_us: dict[str, float] | None = None,
                 evaluator: Evaluator | None = None, notes: tuple[str, ...] = ()) -> Outcome:
    """Screen every op, split the budget, run each problem with budget; the rows in plan order.

    `ops_repo`: where the op files are tracked (the user's repository, or a model campaign's
    own repository of extracted ops). `weights_us`: each op's measured time inside a model,
    which orders the problems where it is known. `--iterations` is per problem on average: the
    campaign's total is that times the problems with headroom; `--budget-usd` and okgit.toml's
    `time_budget_s` are the campaign's totals.
    """
    from okgit.eval.registry import make_evaluator

    config = load_config(ops_repo.root, flags)

    def log(type: str, **fields: Any) -> Event:
        event = space.journal.write(type, **fields)
        if on_event:
            on_event(event)
        return event

    with contextlib.ExitStack() as owned:
        evaluator = evaluator or owned.enter_context(make_evaluator(config))
        log("campaign_started", ops=ops, base=space.base, device=evaluator.device, backend=config.backend,
            model=config.model, iterations=config.iteration_budget, kind="model" if modules else "ops")
        for note in notes:
            log("note", message=note)
        screens, rows = [], {}
        for op in ops:
            row = ProblemRow(op=op, status=REFUSED, module=(modules or {}).get(op))
            rows[op] = row
            try:
                problem = _load(ops_repo, op, config)
            except OkgitError as e:
                row.reason = f"cannot be loaded: {e}"
                log("screened", op=op, refused=row.reason)
                continue
            try:
                reference = evaluator.reference(problem)
            except OkgitError as e:
                row.reason = str(e)
                log("screened", op=op, refused=row.reason)
                continue
            if reference.degenerate:
                row.reason = f"the reference cannot tell right from wrong: {reference.degenerate}"
                log("screened", op=op, refused=row.reason)
                continue
            s = plan.screen(op, reference, (weights_us or {}).get(op))
            screens.append(s)
            row.status = PENDING
            row.timed, row.reference_us, row.floor_us, row.flops, row.min_bytes, row.headroom = (
                s.timed, s.runtime_us, s.floor_us, s.flops, s.min_bytes, s.headroom)
            log("screened", op=op, timed=s.timed, runtime_us=s.runtime_us, floor_us=s.floor_us, flops=s.flops,
                min_bytes=s.min_bytes, headroom=s.headroom, gain_us=s.gain_us)
        if not screens:
            log("campaign_finished", status=RunStatus.fallback)
            reasons = "; ".join(f"{r.op}: {r.reason}" for r in rows.values())
            raise OkgitError(f"no problem of the campaign can be optimized ({reasons})")
        live = sum(not s.at_floor for s in screens)
        allotted = plan.allot(screens, config.iteration_budget * live, config.time_budget_s, config.budget_usd)
        _time_shares(rows, weights_us)
        for a in allotted:
            row = rows[a.screen.op]
            row.iterations, row.budget_share = a.iterations, a.share
            if a.screen.at_floor:
                row.status = AT_FLOOR
                row.reason = f"the reference runs at {a.screen.floor_us / a.screen.runtime_us:.0%} of its roofline floor" \
                    if a.screen.floor_us and a.screen.runtime_us else "at its roofline floor"
        ordered_by = ORDER_TIMED if screens[0].timed else ORDER_UNTIMED
        if weights_us:
            ordered_by = ORDER_MODEL + ("" if screens[0].timed else " (on this device: its CPU time)")
        log("planned", order=[a.screen.op for a in allotted], iterations=[a.iterations for a in allotted],
            shares=[round(a.share, 4) for a in allotted], ordered_by=ordered_by)
        interrupted = False
        for a in allotted:
            row = rows[a.screen.op]
            if row.status == AT_FLOOR:
                log("problem_finished", op=row.op, status=AT_FLOOR, reason=row.reason)
                continue
            try:
                _run_one(space, ops_repo, row, flags, a, evaluator, log, on_event)
            except KeyboardInterrupt:  # the run wrote what it had; the campaign writes its part, then stops
                interrupted = True
                break
        ordered = [rows[a.screen.op] for a in allotted] + [r for r in rows.values() if r.status == REFUSED]
    return Outcome(ordered, evaluator.device, config.backend, ordered_by, interrupted)


def _load(repo: Repo, op: str, config: Config) -> Problem:
    from okgit.git.workspace import check_op

    path = repo.root / op
    check_op(repo, path)
    try:
        source = path.read_text()
    except UnicodeDecodeError:
        raise OkgitError(f"{op}: not UTF-8 text") from None
    problem = load_problem(op, source=source, root=str(path.parent))
    return replace(problem, **config.problem_settings(op))


def _time_shares(rows: dict[str, ProblemRow], weights_us: dict[str, float] | None) -> None:
    times = {op: (weights_us or {}).get(op) or r.reference_us for op, r in rows.items()}
    total = sum(t for t in times.values() if t)
    for op, t in times.items():
        rows[op].time_share = t / total if t and total else None


def _run_one(space: CampaignSpace, ops_repo: Repo, row: ProblemRow, flags: dict[str, Any], a: plan.Allotment,
             evaluator: Evaluator, log: Callable[..., Event], on_event: Callable[[Event], None] | None) -> None:
    from okgit.run import optimize

    log("problem_started", op=row.op, iterations=a.iterations, time_s=a.time_s, usd=a.usd)
    own = {**flags, "iterations": a.iterations}
    if a.time_s:
        own["time_budget_s"] = a.time_s
    if a.usd is not None:
        own["budget_usd"] = a.usd

    def forward(event: Event) -> None:
        if isinstance(event, RunStarted):
            row.run_id = event.run
            log("problem_run", op=row.op, run_id=row.run_id, run_dir=str(ops_repo.runs_dir / str(row.run_id)))
        if on_event:
            on_event(event)

    try:
        result = optimize(ops_repo.root / row.op, flags=own, cwd=ops_repo.root, evaluator=evaluator, on_event=forward)
    except KeyboardInterrupt:
        row.status = RunStatus.interrupted.value
        log("problem_finished", op=row.op, run_id=row.run_id, status=row.status)
        raise
    row.status, row.run_id, row.speedup, row.best_tag = result.status.value, result.run_id, result.speedup, result.best_tag
    row.baseline_us, row.best_us = result.baseline_us, result.best_us
    diff = Path(result.diff)
    if diff.is_file() and diff.read_text().strip():
        own_patch = space.dir / "ops" / f"{len(list((space.dir / 'ops').iterdir())) + 1:02d}-{Path(row.op).stem}.diff"
        shutil.copyfile(diff, own_patch)
        row.diff = str(own_patch)
    log("problem_finished", op=row.op, run_id=row.run_id, status=row.status, speedup=row.speedup,
        best_tag=row.best_tag, diff=row.diff)


def combined_diff(rows: list[ProblemRow]) -> str:
    """The problems' own patches, one after another (each touches its own op file)."""
    return "".join(Path(r.diff).read_text() for r in rows if r.diff)


def overall_status(outcome: Outcome) -> RunStatus:
    """Interrupted, else the best any problem reached: optimized, then unverified, matched, fallback."""
    if outcome.interrupted:
        return RunStatus.interrupted
    found = {r.status for r in outcome.rows}
    for status in (RunStatus.optimized, RunStatus.unverified, RunStatus.matched):
        if status.value in found:
            return status
    return RunStatus.fallback
