"""`okgit watch` without a terminal (okgit.tui.plain): the run's progress lines from its journal,
followed while a process holds the run, ended at its run_finished or when nothing holds it any
more; never the full-screen view waiting for a key in a pipe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from okgit.journal.events import Event
from okgit.journal.runview import RunView
from okgit.tui.plain import follow
from okgit.views.progress import watch_end

JOURNALS = Path(__file__).parents[1] / "journals"


def copy_run(tmp_path: Path) -> Path:
    return Path(shutil.copytree(JOURNALS / "gpu-optimized", tmp_path / "gpu-optimized"))


def test_watch_into_a_pipe_prints_the_finished_run_and_returns(tmp_path):
    run_dir = copy_run(tmp_path)
    out = subprocess.run([sys.executable, "-m", "okgit", "watch", str(run_dir)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("okgit run gpu-optimized: ops/softmax.py on cuda")
    assert "tagged okgit/gpu-optimized/c005" in out.stdout and "\x1b[" not in out.stdout  # plain text, no screen
    assert lines[-1] == "run gpu-optimized finished: optimized, 2.28x, best okgit/gpu-optimized/c005"


def test_a_live_run_is_followed_until_its_end(tmp_path):
    run_dir = copy_run(tmp_path)
    journal = run_dir / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:3]))
    pending = lines[3:]
    holder = subprocess.Popen(  # a process holding the run, as `okgit optimize` does (RunSpace.hold)
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from okgit.locks import try_hold; "
         "lock = try_hold(Path(sys.argv[1])); print('held' if lock else 'not held', flush=True); time.sleep(120)",
         str(run_dir / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        waits: list[float] = []

        def sleep(seconds: float) -> None:  # the run writes on while the watcher waits
            waits.append(seconds)
            with open(journal, "a") as f:
                f.write("".join(pending[:4]))
            del pending[:4]

        events: list[Event] = []
        follow(run_dir, events.append, sleep)
    finally:
        holder.kill()
        holder.wait()
    assert not pending and len(events) == len(lines) and events[-1].type == "run_finished"
    assert len(waits) == (len(lines) - 3 + 3) // 4  # it waited for each batch of lines, and no longer


def test_an_unfinished_run_nothing_holds_is_read_once_and_said_so(tmp_path):
    run_dir = copy_run(tmp_path)
    journal = run_dir / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:-1]))  # killed before its run_finished
    assert json.loads(lines[-1])["type"] == "run_finished"
    waits: list[float] = []
    view = RunView()
    follow(run_dir, view.fold, waits.append)
    assert waits == [] and view.finished is None and view.evaluated > 0
    assert watch_end(view) == "run gpu-optimized: no process holds it and its journal has no end (interrupted or killed)"
