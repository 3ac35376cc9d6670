"""`okgit watch`, driven headless with textual's run_test and Pilot over recorded run directories.

The snapshot is plain text (what a person reads on the screen), kept in
tests/journals/<run>.screen.txt; after an intended change of the screen, rewrite it with
`OKGIT_UPDATE_SNAPSHOTS=1 pytest tests/tui/test_tui_app.py` and review its diff.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from textual.pilot import Pilot

from okgit.tui.app import WatchApp
from okgit.tui.widgets import AgentLog, ExperimentTable, IntentTree

JOURNALS = Path(__file__).parents[1] / "journals"
SIZE = (150, 45)


def drive(run_dir: Path, steps: Callable[[WatchApp, Pilot], Awaitable[None]], poll_s: float = 0.05) -> None:
    async def main() -> None:
        app = WatchApp(run_dir, poll_s=poll_s)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await steps(app, pilot)

    asyncio.run(main())


def screen_text(app: WatchApp) -> str:
    """The whole screen as plain text, rendered the way export_screenshot renders its SVG."""
    console = Console(width=SIZE[0], height=SIZE[1], file=io.StringIO(), record=True, force_terminal=True)
    console.print(app.screen._compositor.render_update(full=True))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def text(app: WatchApp, selector: str) -> str:
    return str(app.query_one(selector).render())


def rows(app: WatchApp) -> list[tuple[str, str]]:
    table = app.query_one(ExperimentTable)
    return [(str(table.get_row_at(i)[0]), str(table.get_row_at(i)[3])) for i in range(table.row_count)]


def copy_run(run: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(JOURNALS / run, tmp_path / run))


def test_finished_run_main_screen(tmp_path):
    async def steps(app: WatchApp, pilot: Pilot) -> None:
        await pilot.pause(0.2)
        status = text(app, "#status")
        for part in ("gpu-optimized", "ops/softmax.py", "cuda (NVIDIA H100 80GB HBM3) · triton · openai/gpt-4o", "iter 6/6", "$0.0300", "3m41s", "optimized 2.28x"):
            assert part in status
        assert app.query_one("#spark").border_title == "best speedup over 6 candidates: 2.30x"
        assert rows(app) == [("c001", "correct"), ("c002", "compile_error"), ("c003", "correct"),
                             ("c004", "incorrect"), ("c005 *", "correct"), ("c006", "rejected")]
        # Nothing selected yet: the panels show the winner.
        profile = text(app, "#profile")
        assert "c005  autotune  correct  2.30x  52.2 us vs 120.0 us" in profile
        assert "bandwidth   ██████████████░░░░░░  72.0%" in profile
        assert text(app, "#diff").startswith("--- a/ops/softmax.py\n+++ b/ops/softmax.py (c005)")
        tree = app.query_one(IntentTree)
        labels = [str(n.label) for n in tree.root.children]
        assert labels[0].startswith("0.90 fuse the row softmax") and "[pruned]" in labels[1]
        assert str(tree.root.children[0].children[0].label).startswith("0.70 vectorize loads")
        log = app.query_one(AgentLog).lines
        assert any("critic on c001: two passes over each row -> online softmax" in line for line in log)
        assert any("llm generator openai/gpt-4o: 2400+800 tokens, $0.0140" in line for line in log)
        assert log[-1] == "+ 3m41s run finished: optimized 2.28x, best okgit/gpu-optimized/c005"

        snapshot = JOURNALS / "gpu-optimized.screen.txt"
        if os.environ.get("OKGIT_UPDATE_SNAPSHOTS"):
            snapshot.write_text(screen_text(app))
        assert screen_text(app) == snapshot.read_text()

    drive(copy_run("gpu-optimized", tmp_path), steps)


def test_keys_move_and_select_a_candidate(tmp_path):
    async def steps(app: WatchApp, pilot: Pilot) -> None:
        await pilot.press("j", "j", "down", "k")  # c001 -> c004 -> c003
        assert "profile of c005" in str(app.query_one("#profile").border_title)  # moving alone selects nothing
        await pilot.press("enter")
        assert app.selected == "c003"
        assert app.query_one("#profile").border_title == "profile of c003"
        assert "c003  llm  correct  2.10x" in text(app, "#profile")
        assert "+++ b/ops/softmax.py (c003)" in text(app, "#diff")
        await pilot.press("up", "enter")
        assert "compile: triton.CompilationError" in text(app, "#profile")
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running

    drive(copy_run("gpu-optimized", tmp_path), steps)


def test_failures_filter_on_an_untimed_run(tmp_path):
    async def steps(app: WatchApp, pilot: Pilot) -> None:
        assert app.query_one("#spark").border_title == "correct candidates (untimed): 2 of 6"
        assert "unverified" in text(app, "#status")
        assert ("c001 *", "correct") in rows(app)
        assert str(app.query_one(ExperimentTable).get_row_at(0)[4]) == "untimed"
        await pilot.press("j", "f")  # the cursor sits on c002, which the filter keeps
        assert rows(app) == [("c002", "compile_error"), ("c003", "incorrect"), ("c004", "error"), ("c006", "rejected")]
        assert app.query_one(ExperimentTable).highlighted() == "c002"
        await pilot.press("j", "enter")
        assert "outputs: columns past 2048 never written" in text(app, "#profile")
        await pilot.press("f")
        assert len(rows(app)) == 6 and app.query_one(ExperimentTable).highlighted() == "c003"

    drive(copy_run("cpu-failures", tmp_path), steps)


def test_live_run_grows_as_its_journal_is_appended(tmp_path):
    source = JOURNALS / "gpu-optimized"
    lines = (source / "journal.jsonl").read_text().splitlines(keepends=True)
    run_dir = tmp_path / "gpu-optimized"
    run_dir.mkdir()
    shutil.copy(source / "traces.jsonl", run_dir / "traces.jsonl")
    journal = run_dir / "journal.jsonl"
    first_eval = next(i for i, line in enumerate(lines) if '"type": "evaluated"' in line)
    journal.write_text("".join(lines[:first_eval]))  # c001 proposed, not yet evaluated

    def append(text: str) -> None:
        with open(journal, "a") as f:
            f.write(text)

    async def steps(app: WatchApp, pilot: Pilot) -> None:
        assert rows(app) == [("c001", "running")]
        assert "running (last event" in text(app, "#status") and "iter 0/6" in text(app, "#status")
        c004 = next(i for i, line in enumerate(lines) if '"proposal"' in line and '"c004"' in line)
        append("".join(lines[first_eval:c004]) + lines[c004][:40])  # c001..c003 done, c004 half-written
        await pilot.pause(0.3)
        assert rows(app) == [("c001", "correct"), ("c002", "compile_error"), ("c003 *", "correct")]
        assert "iter 3/6" in text(app, "#status")
        assert app.query_one("#spark").border_title == "best speedup over 3 candidates: 2.10x"
        append(lines[c004][40:] + "".join(lines[c004 + 1:]))
        await pilot.pause(0.3)
        assert len(rows(app)) == 6 and "optimized 2.28x" in text(app, "#status")
        assert ("c005 *", "correct") in rows(app) and ("c003", "correct") in rows(app)  # the mark moved

    drive(run_dir, steps)


def test_an_empty_run_directory_waits_for_its_journal(tmp_path):
    run_dir = tmp_path / "20250101-000000-abcd"
    run_dir.mkdir()

    async def steps(app: WatchApp, pilot: Pilot) -> None:
        assert "20250101-000000-abcd" in text(app, "#status") and rows(app) == []
        assert "select a candidate" in text(app, "#profile")
        shutil.copy(JOURNALS / "cpu-failures" / "journal.jsonl", run_dir / "journal.jsonl")
        await pilot.pause(0.3)
        assert len(rows(app)) == 6
        assert text(app, "#diff").startswith("# no source for c001")  # traces.jsonl never came

    drive(run_dir, steps)
