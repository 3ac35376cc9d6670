"""Figures for report.md, drawn from the journal's events with matplotlib.

speedup.png: the best speedup over iterations (on an untimed run: correct candidates).
roofline.png: baseline and winner against the device's measured roofline.
A figure whose numbers are missing is skipped, never drawn from guesses.
Uses matplotlib's object API (Figure.savefig renders PNG with Agg), not pyplot, so drawing
touches no global backend state of the calling process.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from statistics import median
from typing import Any

from okgit.journal.events import Event, GateEvent
from okgit.journal.runview import RUNNING, Candidate, RunView


def import_ahead() -> None:
    """What drawing imports (matplotlib's Figure, its Agg canvas and ticker: 0.6-1.3 s in a fresh
    process), imported in a daemon thread: a run starts it while its reference is prepared rather
    than paying it at its end. An import that fails here fails again where the figures are drawn,
    which says so."""
    def load() -> None:
        try:
            for name in ("matplotlib.figure", "matplotlib.backends.backend_agg", "matplotlib.ticker"):
                importlib.import_module(name)
        except Exception:  # noqa: BLE001 - met again, and reported, where the figures are drawn
            pass

    threading.Thread(target=load, name="okgit-import-ahead", daemon=True).start()


def write_figures(run_dir: Path, events: list[Event], winner: str | None = None) -> list[Path]:
    """Draw what the events allow into `run_dir`; `winner` defaults to the run's best candidate."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return []
    view = RunView()
    view.apply(events)
    winner = winner or view.winner
    paths = [
        _speedup(Figure, view, _final_gate(view, winner), Path(run_dir) / "speedup.png"),
        _roofline(Figure, view, winner, Path(run_dir) / "roofline.png"),
    ]
    return [p for p in paths if p]


def _final_gate(view: RunView, winner: str | None) -> GateEvent | None:
    """The winner's interleaved comparison against the baseline, when the final gate ran one."""
    for gate in view.gates:
        if gate.name == "interleaved" and gate.cand == winner and gate.baseline_us and gate.candidate_us:
            return gate
    return None


def _speedup(Figure, view: RunView, final: GateEvent | None, path: Path) -> Path | None:
    fig = speedup_figure(Figure, view, final)
    if fig is None:
        return None
    fig.savefig(path)
    return path


def speedup_figure(Figure, view: RunView, final: GateEvent | None) -> Any:
    """speedup.png's figure, or None where no candidate finished."""
    done = [c for c in view.candidates.values() if c.status != RUNNING]
    points = view.progress()
    if not points:
        return None
    xs = list(range(1, len(points) + 1))
    fig = Figure(figsize=(7, 3.6), dpi=110)
    ax = fig.add_subplot()
    ax.step(xs, points, where="post", color="tab:blue", label="best so far" if view.timed else "correct so far")
    if view.timed:
        _speedups(ax, view, xs, done, final)
    else:
        _correct_counts(ax, view, xs, done, points)
    failed = [i for i, c in zip(xs, done) if c.failed]
    if failed:
        ax.scatter(failed, [0] * len(failed), marker="x", color="tab:red", s=18, label="failed candidate", clip_on=False)
    if len(xs) <= 30:
        ax.set_xticks(xs, [c.cand for c in done], rotation=60, fontsize=7)
    ax.set_xlabel("candidate (in evaluation order)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def _speedups(ax, view: RunView, xs: list[int], done: list[Candidate], final: GateEvent | None) -> None:
    timed = [(i, c.speedup) for i, c in zip(xs, done) if c.correct and c.timed and c.speedup is not None]
    if timed:
        ax.scatter(*zip(*timed), color="tab:green", zorder=3, s=18, label="correct candidate (fast mode)")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="baseline")
    if final and final.speedup is not None:
        ax.axhline(final.speedup, color="tab:orange", linestyle=":", linewidth=1.5,
                   label=f"final gate {final.speedup:.2f}x ({final.cand})")
    ax.set_ylabel("speedup vs baseline")
    ax.set_title(f"best speedup over {len(xs)} candidates on {view.device}")


def _correct_counts(ax, view: RunView, xs: list[int], done: list[Candidate], points: list[float]) -> None:
    # A marker per correct candidate: with one candidate the step line has no length.
    correct = [(i, n) for i, c, n in zip(xs, done, points) if c.correct]
    if correct:
        ax.scatter(*zip(*correct), color="tab:green", zorder=3, s=18, label="correct candidate")
    ax.set_ylabel("correct candidates")
    ax.set_title(f"correct candidates over iterations (untimed on {view.device}: no speedup claimed)")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count of candidates
    ax.set_ylim(top=max(1.0, max(points)) * 1.1)  # no correct candidate: an axis of whole counts, not 0-0.05


def _times(view: RunView, winner: str | None) -> tuple[float | None, float | None]:
    """Baseline and winner runtimes in us: the final gate's interleaved medians when the winner
    has them (both arms under the same conditions), else the fast-mode numbers."""
    gate = _final_gate(view, winner)
    if gate and gate.baseline_us and gate.candidate_us:
        return median(gate.baseline_us), median(gate.candidate_us)
    c = view.candidates.get(winner) if winner else None
    return view.reference.runtime_us if view.reference else None, (c.runtime_us if c and c.timed and c.correct else None)


def _roofline(Figure, view: RunView, winner: str | None, path: Path) -> Path | None:
    ref = view.reference
    if ref is None or not ref.timed:
        return None
    # The evaluator's measured peaks (okgit.eval.roofline.measure_peaks): bandwidths in bytes/s
    # and dense matmul rates in FLOP/s per precision.
    hw: dict[str, Any] = ref.hardware
    bandwidth = max(hw.get("copy_bandwidth") or 0.0, hw.get("read_bandwidth") or 0.0)
    rates: dict[str, float] = {k: v for k, v in (hw.get("matmul") or {}).items() if v}
    profile = ref.profile or {}
    flops, min_bytes = profile.get("flops"), profile.get("min_bytes")
    base_us, win_us = _times(view, winner)
    if not (bandwidth and rates and flops and min_bytes and base_us):
        return None
    ai = flops / min_bytes
    top = max(rates.values())
    lo, hi = min(ai, min(rates.values()) / bandwidth) / 30, max(ai, top / bandwidth) * 30
    fig = Figure(figsize=(7, 4.2), dpi=110)
    ax = fig.add_subplot()
    ax.loglog([lo, top / bandwidth], [lo * bandwidth, top], color="black", linewidth=1.5,
              label=f"memory roof {bandwidth / 1e9:.0f} GB/s")
    # One compute ceiling per measured precision: which one binds depends on the op's dtypes
    # and tolerance, which the journal does not say.
    for name, rate in sorted(rates.items(), key=lambda kv: kv[1]):
        ax.plot([rate / bandwidth, hi], [rate, rate], linewidth=1, linestyle="-" if rate == top else "--",
                label=f"{name} matmul {rate / 1e12:.1f} TFLOP/s")
    ax.scatter([ai], [flops / (base_us * 1e-6)], s=45, color="grey", zorder=3, label=f"baseline {base_us:.1f} us")
    if win_us:
        ax.scatter([ai], [flops / (win_us * 1e-6)], s=45, color="tab:green", zorder=3, label=f"{winner} {win_us:.1f} us")
    ax.axvline(ai, color="grey", linestyle=":", linewidth=1)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / minimum byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"roofline on {hw.get('device') or view.device} (measured peaks)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    return path
