"""What a campaign hands back: result.json (`--json`), report.md, report.diff."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from okgit.campaign.core import AT_FLOOR, REFUSED, CampaignSpace, ProblemRow
from okgit.eval.types import Comparison
from okgit.fmt import fmt_count, fmt_outcome, fmt_speed, fmt_us
from okgit.status import CORRECT, RunStatus
from okgit.views.eval_text import INTERPRETER_NOTE, interpreted


class EndToEnd(BaseModel):
    """The whole model with the winners swapped in, against the original (a model campaign)."""

    model: str  # the user's model file
    ok: bool  # outputs within tolerance (and, where timed, not slower past the noise)
    status: str  # a RunStatus: optimized / matched / unverified / fallback
    reason: str
    swapped: list[str]  # the problems whose winners are in the patch (each its sites: modules, chains joined by +)
    # the modules whose forward the patch replaces (a chain counts each of its modules; the whole
    # model's winner, every leaf module of the model)
    modules_swapped: int = 0
    dropped: dict[str, str] = {}  # module -> why its winner is not in the patch
    device: str
    timed: bool = False
    baseline_us: float | None = None  # the model's median time, original
    optimized_us: float | None = None  # the same with the winners in
    speedup: float | None = None
    noise: float | None = None  # A/A relative spread of the original against itself
    comparison: Comparison | None = None
    state: str | None = None  # the patched model's state dict against the original's: `unchanged`, or how it differs
    eager_us: float | None = None  # the original model, timed in one process with the next two, interleaved
    compile_us: float | None = None  # torch.compile of the original model
    patched_us: float | None = None  # the model with the winners swapped in
    arm_noise: dict[str, float] = {}  # eager / compile / okgit -> the spread of its round medians
    untimed: str | None = None  # why those three have no times (on a CPU: no timing is claimed)

    def speedup_against(self, arm: str) -> tuple[float, bool] | None:
        """The patched model's speedup over `arm` (eager, compile) and whether it is within the
        noise: within the two arms' noises added together of 1.0x."""
        base = self.eager_us if arm == "eager" else self.compile_us
        if not base or not self.patched_us:
            return None
        speedup = base / self.patched_us
        return speedup, abs(speedup - 1.0) <= self.arm_noise.get(arm, 0.0) + self.arm_noise.get("okgit", 0.0)

    def against(self) -> str:
        """Eager, torch.compile and the patched model, timed alike in one process; or why not."""
        state = f"state dict {self.state}" if self.state else "state dict not compared"
        if self.patched_us is None:
            return f"{state}; {self.untimed or 'not timed'}"
        parts = []
        for arm, name in (("eager", "eager"), ("compile", "torch.compile")):
            found = self.speedup_against(arm)
            if found:
                parts.append(f"{found[0]:.2f}x {name}" + (" (within the noise)" if found[1] else ""))
        noise = ", ".join(f"{arm} {x * 100:.1f}%" for arm, x in self.arm_noise.items())
        return (f"{state}; eager {fmt_us(self.eager_us)} us, torch.compile {fmt_us(self.compile_us)} us, patched "
                f"{fmt_us(self.patched_us)} us (interleaved; noise {noise or '-'}): {', '.join(parts) or '-'}"
                + (f"; {self.untimed}" if self.untimed else ""))


class CampaignResult(BaseModel):
    """What `okgit optimize DIR/ --json` and `okgit optimize MODEL.py --campaign --json` print
    (a stable contract: see docs/json.md)."""

    campaign_id: str
    kind: str  # ops | model
    status: RunStatus
    device: str
    backend: str = "triton"  # the kernel language searched (a CPU and triton: the interpreter's note)
    ordered_by: str  # how the problems were ranked
    problems: list[ProblemRow]
    skipped: list[str] = []  # `ops`: op files under the directory that are no problem, each with why (untracked)
    report: str
    diff: str
    ops_repo: str | None = None  # a model campaign: the repository of its extracted op files
    end_to_end: EndToEnd | None = None

    def summary(self) -> str:
        lines = [f"campaign {self.campaign_id}: {self.status} ({fmt_count(len(self.problems), 'problem')} on {self.device})"]
        for r in self.problems:
            name = r.module or r.op
            what = r.reason if r.status in (AT_FLOOR, REFUSED) else (
                f"{fmt_outcome(r.speedup, r.status)}, {fmt_count(r.iterations, 'iteration')}"
                + (f", {r.best_tag}" if r.best_tag else ""))
            lines.append(f"  {name}: {r.status}: {what}")
        lines += [f"  skipped {s}" for s in self.skipped]
        e = self.end_to_end
        if e:
            if e.timed and e.speedup is not None:
                lines.append(f"  whole model: {e.status}, {e.speedup:.2f}x ({fmt_us(e.baseline_us)} us -> "
                             f"{fmt_us(e.optimized_us)} us, noise {(e.noise or 0) * 100:.1f}%)")
            else:
                lines.append(f"  whole model: {e.status}: {e.reason}")
            lines.append(f"  whole model, one process: {e.against()}")
        lines.append(f"  report: {self.report}")
        if self.hands_out():  # otherwise report.diff is empty: nothing to apply
            lines.append(f"  diff:   {self.diff} (okgit apply campaign:{self.campaign_id})")
        return "\n".join(lines)

    def hands_out(self) -> bool:
        """Whether report.diff holds a patch (no problem's winner, or none the model kept: it is empty)."""
        diff = Path(self.diff)
        return diff.is_file() and diff.stat().st_size > 0


def write_outputs(space: CampaignSpace, result: CampaignResult, diff: str) -> None:
    Path(result.diff).write_text(diff)
    Path(result.report).write_text(report_text(result))
    (space.dir / "result.json").write_text(result.model_dump_json(indent=2) + "\n")
    space.journal.write("campaign_finished", status=result.status, report=result.report, diff=result.diff,
                        end_to_end=result.end_to_end.model_dump(mode="json") if result.end_to_end else None)
    space.release()


def report_text(result: CampaignResult) -> str:
    timed = any(r.timed for r in result.problems)
    lines = [
        f"# okgit campaign {result.campaign_id}: {result.status}",
        "",
        f"{fmt_count(len(result.problems), 'problem')} on {result.device}, ordered by {result.ordered_by}.",
        "" if timed else "Nothing is timed on this device: correctness only, no speedup is claimed.",
        "",
        f"| # | problem | reference (us) | {'floor' if timed else 'floor at nominal peaks'} (us) | headroom | "
        "share of time | budget | status | speedup | best |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(result.problems, 1):
        name = f"`{r.module}` ({r.op})" if r.module else f"`{r.op}`"
        lines.append(
            f"| {i} | {name} | {fmt_us(r.reference_us)} | {fmt_us(r.floor_us)} | "
            f"{_pct(r.headroom)} | {_pct(r.time_share)} | {r.iterations} it ({_pct(r.budget_share)}) | "
            f"{r.status} | {fmt_speed(r.speedup)} | {r.best_tag or '-'} |")
    notes = [f"- {r.module or r.op}: {r.reason}" for r in result.problems if r.reason] + [f"- skipped {s}" for s in result.skipped]
    if notes:
        lines += ["", "## Not searched", "", *notes]
    e = result.end_to_end
    if e:
        lines += ["", "## The whole model", "", f"`{e.model}` with the winners of {', '.join(e.swapped) or 'no module'} "
                  f"swapped in: {e.status}. {e.reason}"]
        if e.timed and e.speedup is not None:
            lines += ["", f"- original: {fmt_us(e.baseline_us)} us, with the winners: {fmt_us(e.optimized_us)} us "
                      f"(median of {e.comparison.rounds if e.comparison else '?'} interleaved rounds)",
                      f"- speedup {e.speedup:.2f}x, A/A noise {(e.noise or 0) * 100:.1f}%"]
            lines += [f"- {r.module}: {_pct(r.time_share)} of the model's time, {fmt_speed(r.speedup)} on its own"
                      for r in result.problems if r.module in e.swapped]
        lines += [f"- {m}: left out: {why}" for m, why in e.dropped.items()]
        lines += ["", f"Against eager and torch.compile of the whole model, in one process: {e.against()}."]
    if result.hands_out():
        lines += ["", "## Apply", "", "```", f"okgit apply campaign:{result.campaign_id}",
                  f"okgit verify campaign:{result.campaign_id}", "```",
                  *(["", f"The winners were {INTERPRETER_NOTE}."] if interpreted(result.device, result.backend) and result.status in CORRECT else [])]
    else:
        lines += ["", "## Nothing to apply", "", "No winner is in the patch: report.diff is empty, and there is nothing to apply."]
    lines += ["", "Each problem's own patch is under ops/; each problem's run: `okgit history RUN`"
              + (f" (in {result.ops_repo})" if result.ops_repo else "") + "."]
    return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "-"
