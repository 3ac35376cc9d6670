"""report.md: what was tried, the winner, its numbers and gates, and how to apply it."""

from __future__ import annotations

from pathlib import Path

from okgit.eval.types import Comparison, ProfileData, Reference
from okgit.fmt import fmt_speed, fmt_us
from okgit.git.rundir import RunDir
from okgit.journal.events import Note
from okgit.search.profile_text import as_profile, kernel_text, side_by_side
from okgit.search.types import Attempt, Context
from okgit.status import RunStatus
from okgit.views.eval_text import INTERPRETER_NOTE, applies_at, interpreted

STATUS_MEANING = {
    RunStatus.optimized: "beats the baseline past the noise on every round, correct and plausible",
    RunStatus.matched: "a correct kernel was found, but it is not faster than the baseline past the noise",
    RunStatus.fallback: "no candidate passed every gate; the baseline is kept",
    RunStatus.unverified: "a correct kernel was found; this device cannot time it (no speedup is claimed)",
    RunStatus.slower: "a correct kernel was found, but it is slower than the baseline past the noise; "
                      "nothing is handed out (its tag is kept for inspection)",
    RunStatus.interrupted: "the run was interrupted; what it had found so far is below",
    RunStatus.error: "the final gate could not judge the candidates (see Notes for the cause); "
                     "nothing is handed out, and --resume tries again",
}


def _figures(run_dir: Path, winner: str | None) -> list[str]:
    """The figures section: PNGs beside report.md, drawn from the journal by okgit.views.figures."""
    from okgit.views.figures import write_figures

    try:
        paths = write_figures(run_dir, RunDir(run_dir).events(), winner=winner)
    except Exception as e:  # noqa: BLE001 (a figure is never worth losing the report of a finished run)
        return ["", "## Figures", "", f"Figures could not be drawn: {type(e).__name__}: {e}"]
    if not paths:
        return []
    return ["", "## Figures", ""] + [f"![{p.stem}]({p.name})" for p in paths]


def vendor_floor(ctx: Context, winner: Attempt | None, status: RunStatus) -> list[str]:
    """Where okgit's own kernel for a vendor call (a template kind that `stands_in_for` one: the
    implicit-GEMM convolution, the split-precision GEMM) was timed and is not in what the run
    hands out, a line saying that the vendor is the floor there, with that kernel's best speedup."""
    from okgit.lower.kinds import kinds

    def parts(origin: str) -> set[str]:
        return set(origin.removeprefix("template:").split("+")) if origin.startswith("template:") else set()

    handed_out = parts(winner.proposal.origin) if winner and status == RunStatus.optimized else set()
    out = []
    for vendor in dict.fromkeys(k.stands_in_for for k in kinds() if k.stands_in_for):
        names = {k.name for k in kinds() if k.stands_in_for == vendor}
        own = [a for a in ctx.attempts if names & parts(a.proposal.origin) and a.result.correct and a.result.speedup]
        if own and not names & handed_out:
            best = max(own, key=lambda a: a.result.speedup or 0.0)
            out.append(f"The vendor is the floor for {vendor} here: okgit's own kernel for it ({best.proposal.origin}) "
                       f"reached {fmt_speed(best.result.speedup)} of the reference at best, so "
                       + ("the winner keeps the vendor's call." if handed_out else "nothing of it is handed out."))
    return ["", *out] if out else []


def write_report(space, ctx: Context, result, winner: Attempt | None, comparison: Comparison | None, diff: str) -> None:
    lines = [f"# okgit run {result.run_id}: {result.status}", "", f"{STATUS_MEANING.get(result.status, '')}.", ""]
    lines += _summary(ctx, result)
    if winner:
        lines += _winner(winner, result, comparison, ctx.reference)
        lines += profile_section(winner.result.profile, ctx.reference.profile)
    lines += vendor_floor(ctx, winner, result.status)
    if not ctx.attempts:
        lines += ["", "No candidate was proposed; the search's notes below say why."]
    notes = [e.message for e in RunDir(space.run_dir).events() if isinstance(e, Note)]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += _candidates(ctx.attempts)
    lines += _figures(space.run_dir, winner.cand if winner else None)
    if diff:
        lines += _apply(ctx, result, diff)
    RunDir(space.run_dir).report.write_text("\n".join(lines) + "\n")


def _summary(ctx: Context, result) -> list[str]:
    """The run at a glance: what, where, how far the search went."""
    ref = ctx.reference
    knobs = ", ".join(f"{k}={v}" for k, v in ctx.problem.knobs.items()) or "-"
    lines = [
        "| | |",
        "|---|---|",
        f"| op | `{result.op}` |",
        f"| shape knobs | {knobs} |",
        f"| device | {ctx.device} |",
        f"| backend | {ctx.backend} |",
        f"| reference | {fmt_us(ref.runtime_us)} us{' (not timed on this device)' if not ref.timed else ''} |",
        f"| candidates evaluated | {result.candidates} |",
        f"| search ended | {result.stop_reason} |",
        f"| LLM cost | ${result.cost_usd:.4f} |",
    ]
    if ref.flags and ref.timed:  # cuDNN/TF32 flags mean nothing to a CPU run
        lines.append(f"| precision flags (both arms) | {', '.join(f'{k}={v}' for k, v in ref.flags.items())} |")
    if ref.shapes:
        lines.append(f"| shapes checked | {_shapes(ref.shapes)} |")
    return lines


def _winner(winner: Attempt, result, comparison: Comparison | None, ref: Reference) -> list[str]:
    """The winner (or the fastest correct candidate of a slower run), its final gate and checks."""
    r = winner.result
    title = "Fastest correct candidate (slower: not handed out)" if result.status == RunStatus.slower else "Winner"
    lines = ["", f"## {title}", "", f"`{winner.tag}` ({winner.proposal.origin}): {winner.proposal.intent}", ""]
    if comparison:
        lines += [
            "| final gate | value |",
            "|---|---|",
            f"| baseline, median of rounds | {fmt_us(result.baseline_us)} us |",
            f"| candidate, median of rounds | {fmt_us(result.best_us)} us |",
            f"| speedup | {fmt_speed(comparison.speedup)} |",
            f"| rounds won | {comparison.wins} of {comparison.rounds} |",
            f"| A/A noise | {comparison.noise * 100:.2f}% |",
            f"| sign test p | {comparison.sign_test_p:.4f} |",
        ]
        if r.profile and r.profile.roofline_position is not None:
            lines.append(f"| roofline fraction | {r.profile.roofline_position:.2f} ({r.profile.bottleneck_type}-bound) |")
    passed = [g.name for g in r.gates if g.passed]
    if passed:
        lines += ["", f"Gates passed: {', '.join(passed)}."]
    if r.shapes:
        lines.append(f"Correctness checked at: {_shapes(r.shapes)}.")
    where = applies_at(r.kernel_shapes)
    if where:
        lines.append(f"{where[0].upper()}{where[1:]}. At any other shape the kernels run only if the code's own "
                     "conditions allow; where they do not, the original code runs.")
    if r.max_abs_error is not None and ref.max_abs_error is not None:
        lines.append(f"Error against float64 (max abs over the checked cases): the winner {r.max_abs_error:.2e}, "
                     f"the reference itself {ref.max_abs_error:.2e}.")
    return lines


def profile_section(winner: ProfileData | None, reference: ProfileData | None) -> list[str]:
    """The winner's profile beside the reference's, each figure with the tool it came from, and the
    winner's kernels (okgit.search.profile_text)."""
    rows = side_by_side(winner, reference)
    lines = ["", "## Profile: the winner beside the reference", ""]
    if rows:
        lines += ["| figure | winner | reference |", "|---|---|---|"] + [f"| {f} | {w} | {r} |" for f, w, r in rows]
    prof = as_profile(winner)
    if prof is not None:
        lines += [""] + [f"- {kernel_text(k)}".replace("|", "\\|") for k in prof.top_kernels[:5]]
        lines += [f"- not measured by {tool}: {why}" for tool, why in prof.not_run.items()]
    return lines if len(lines) > 3 else []


def _shapes(shapes: list[dict[str, int]]) -> str:
    return "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) for s in shapes)


def _candidates(attempts: list[Attempt]) -> list[str]:
    lines = ["", "## Candidates", "", "| cand | origin | status | speedup | runtime us | note |", "|---|---|---|---|---|---|"]
    for a in attempts:
        note = f"{a.result.error.gate}: {a.result.error.message}" if a.result.error else (a.tag or "")
        note = note.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {a.cand} | {a.proposal.origin} | {a.result.status.value} | {fmt_speed(a.result.speedup)} | {fmt_us(a.result.runtime_us)} | {note} |")
    return lines


def _apply(ctx: Context, result, diff: str) -> list[str]:
    return [
        "", "## Apply", "",
        f"    okgit apply {result.run_id}      # or: git apply {result.diff}",
        f"    okgit revert {result.run_id}     # undo",
        *(["", f"The winner was {INTERPRETER_NOTE}."] if interpreted(ctx.device, ctx.backend) else []),
        "", "## Diff", "", "```diff", diff.rstrip("\n"), "```",
    ]
