"""Figures beside report.md: drawn from journal events, skipped when their numbers are missing."""

from __future__ import annotations

from pathlib import Path

from okgit.journal.events import Event, ReferenceEvent
from okgit.journal.files import read_events
from okgit.views.figures import write_figures
from okgit.views.report import _figures

JOURNALS = Path(__file__).parents[1] / "journals"
PNG = b"\x89PNG\r\n\x1a\n"


def events(run: str) -> list[Event]:
    return read_events(JOURNALS / run / "journal.jsonl")[0]


def test_a_timed_run_gets_speedup_and_roofline(tmp_path):
    paths = write_figures(tmp_path, events("gpu-optimized"))
    assert [p.name for p in paths] == ["speedup.png", "roofline.png"]
    assert all(p.read_bytes().startswith(PNG) for p in paths)


def test_an_untimed_run_gets_no_roofline(tmp_path):
    assert [p.name for p in write_figures(tmp_path, events("cpu-failures"))] == ["speedup.png"]


def test_missing_numbers_skip_figures_instead_of_guessing(tmp_path):
    assert write_figures(tmp_path, []) == []
    no_peaks = [e.model_copy(update={"hardware": {"device": "cuda"}}) if isinstance(e, ReferenceEvent) else e
                for e in events("gpu-optimized")]
    assert [p.name for p in write_figures(tmp_path, no_peaks)] == ["speedup.png"]


def test_report_embeds_the_figures(tmp_path):
    (tmp_path / "journal.jsonl").write_text((JOURNALS / "gpu-optimized" / "journal.jsonl").read_text())
    assert _figures(tmp_path, "c005") == ["", "## Figures", "", "![speedup](speedup.png)", "![roofline](roofline.png)"]
    assert (tmp_path / "roofline.png").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _figures(empty, None) == []


def _green_pixels(path: Path) -> int:
    """Pixels in matplotlib's tab:green (#2ca02c): the markers of correct candidates."""
    from matplotlib.image import imread

    image = imread(path)[..., :3]
    return int((abs(image - (0x2C / 255, 0xA0 / 255, 0x2C / 255)).max(axis=-1) < 0.05).sum())


def test_an_untimed_run_with_one_candidate_shows_it(tmp_path):
    untimed = events("cpu-failures")  # its first candidate is correct
    one = untimed[: next(i for i, e in enumerate(untimed) if e.type == "evaluated") + 1]
    (path,) = write_figures(tmp_path, one)
    assert path.name == "speedup.png" and _green_pixels(path) > 20  # a visible marker, not an empty plot


def test_an_untimed_run_without_a_correct_candidate_counts_in_whole_numbers():
    from matplotlib.figure import Figure

    from okgit.journal.runview import RunView
    from okgit.views.figures import speedup_figure

    untimed = events("cpu-failures")
    failed = [e for e in untimed if e.type == "evaluated" and not e.correct][:1]
    assert failed, "the journal holds a failed candidate"
    view = RunView()
    view.apply([e for e in untimed if e.type != "evaluated"] + failed)
    ax = speedup_figure(Figure, view, None).axes[0]
    assert ax.get_ylim() == (0.0, 1.1)  # an axis up to one candidate, not 0-0.05 for a count of zero
