"""report.md: what was tried, the winner, its numbers and gates, and how to apply it."""

from __future__ import annotations

from pathlib import Path

from okgit.eval.types import Comparison
from okgit.fmt import fmt_speed, fmt_us
from okgit.git.rundir import RunDir
from okgit.result_text import INTERPRETER_NOTE, applies_at
from okgit.search.types import Attempt, Context
from okgit.status import RunStatus

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
    """The figures section: PNGs beside report.md, drawn from the journal by okgit.figures."""
    from okgit.figures import write_figures

    try:
        paths = write_figures(run_dir, RunDir(run_dir).events(), winner=winner)
    except Exception as e:  # noqa: BLE001 (a figure is never worth losing the report of a finished run)
        return ["", "## Figures", "", f"Figures could not be drawn: {type(e).__name__}: {e}"]
    if not paths:
        return []
    return ["", "## Figures", ""] + [f"![{p.stem}]({p.name})" for p in paths]


def write_report(space, ctx: Context, result, winner: Attempt | None, comparison: Comparison | None, diff: str) -> None:
    ref = ctx.reference
    knobs = ", ".join(f"{k}={v}" for k, v in ctx.problem.knobs.items()) or "-"
    lines = [
        f"# okgit run {result.run_id}: {result.status}",
        "",
        f"{STATUS_MEANING.get(result.status, '')}.",
        "",
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
        lines.append(f"| shapes checked | {'; '.join(', '.join(f'{k}={v}' for k, v in s.items()) for s in ref.shapes)} |")
    if winner:
        r = winner.result
        title = "Fastest correct candidate (slower: not handed out)" if result.status == RunStatus.slower else "Winner"
        lines += ["", f"## {title}", "", f"`{winner.tag}` ({winner.proposal.origin}): {winner.proposal.intent}", ""]
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
            lines.append(f"Correctness checked at: {'; '.join(', '.join(f'{k}={v}' for k, v in s.items()) for s in r.shapes)}.")
        where = applies_at(r.kernel_shapes)
        if where:
            lines.append(f"{where[0].upper()}{where[1:]}. At any other shape the kernels run only if the code's own "
                         "conditions allow; where they do not, the original code runs.")
    if not ctx.attempts:
        lines += ["", "No candidate was proposed; the search's notes below say why."]
    notes = [e.get("message", "") for e in RunDir(space.run_dir).events() if e["type"] == "note"]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += ["", "## Candidates", "", "| cand | origin | status | speedup | runtime us | note |", "|---|---|---|---|---|---|"]
    for a in ctx.attempts:
        note = f"{a.result.error.gate}: {a.result.error.message}" if a.result.error else (a.tag or "")
        note = note.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {a.cand} | {a.proposal.origin} | {a.result.status.value} | {fmt_speed(a.result.speedup)} | {fmt_us(a.result.runtime_us)} | {note} |")
    lines += _figures(space.run_dir, winner.cand if winner else None)
    if diff:
        lines += [
            "", "## Apply", "",
            f"    okgit apply {result.run_id}      # or: git apply {result.diff}",
            f"    okgit revert {result.run_id}     # undo",
            *(["", f"The winner was {INTERPRETER_NOTE}."] if ctx.device == "cpu" and ctx.backend == "triton" else []),
            "", "## Diff", "", "```diff", diff.rstrip("\n"), "```",
        ]
    RunDir(space.run_dir).report.write_text("\n".join(lines) + "\n")
