"""Figures beside report.md: drawn from journal events, skipped when their numbers are missing."""

from __future__ import annotations

from pathlib import Path

from okgit.figures import write_figures
from okgit.git.journal import iter_events
from okgit.report import _figures

JOURNALS = Path(__file__).parent / "journals"
PNG = b"\x89PNG\r\n\x1a\n"


def events(run: str) -> list[dict]:
    return list(iter_events(JOURNALS / run / "journal.jsonl"))


def test_a_timed_run_gets_speedup_and_roofline(tmp_path):
    paths = write_figures(tmp_path, events("gpu-optimized"))
    assert [p.name for p in paths] == ["speedup.png", "roofline.png"]
    assert all(p.read_bytes().startswith(PNG) for p in paths)


def test_an_untimed_run_gets_no_roofline(tmp_path):
    assert [p.name for p in write_figures(tmp_path, events("cpu-failures"))] == ["speedup.png"]


def test_missing_numbers_skip_figures_instead_of_guessing(tmp_path):
    assert write_figures(tmp_path, []) == []
    no_peaks = [dict(e, hardware={"device": "cuda"}) if e["type"] == "reference" else e for e in events("gpu-optimized")]
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
    one = [
        {"type": "run_started", "run": "r", "op": "ops/a.py", "device": "cpu", "backend": "triton", "mode": "fast", "ts": 1.0},
        {"type": "reference", "timed": False, "device": "cpu", "ts": 2.0},
        {"type": "proposal", "cand": "c001", "origin": "template:pointwise", "ts": 3.0},
        {"type": "evaluated", "cand": "c001", "status": "correct", "correct": True, "timed": False, "ts": 4.0},
    ]
    (path,) = write_figures(tmp_path, one)
    assert path.name == "speedup.png" and _green_pixels(path) > 20  # a visible marker, not an empty plot
