"""Plain-mode progress lines: one per stage, plain text off a terminal, rich colour on one."""

from __future__ import annotations

import io
import re
from pathlib import Path

from okgit.journal.files import Journal, read_events
from okgit.views.progress import printer

JOURNALS = Path(__file__).parents[1] / "journals"


def play(run: str, stream: io.StringIO) -> list[str]:
    on_event = printer(stream)
    for event in read_events(JOURNALS / run / "journal.jsonl")[0]:
        on_event(event)
    return stream.getvalue().splitlines()


def test_a_timed_run_reads_stage_by_stage():
    lines = play("gpu-optimized", io.StringIO())
    assert lines[:6] == [
        "okgit run gpu-optimized: ops/softmax.py on cuda (triton, fast, openai/gpt-4o, 6 iterations)",
        "baseline 120.0 us on cuda",
        "[1/6] c001 templates: fused row softmax (template)",
        "        correct 1.50x (80.0 us) | best 1.50x (c001)",
        "        tagged okgit/gpu-optimized/c001",
        "        critic: two passes over each row -> online softmax: one read of x",
    ]
    assert "[2/6] c002 llm: online softmax, one read" in lines
    assert ("        compile_error compile: triton.CompilationError: at 12:8: unsupported tl.max axis"
            " | best 1.50x (c001) | $0.0140") in lines
    assert "        rejected roofline: 21.0 us is below the roofline floor 22.4 us | best 2.30x (c005) | $0.0300" in lines
    assert lines[-1] == "final gate interleaved on c005: passed (won 5 of 5 rounds by more than the noise)"
    assert not any("\x1b[" in line for line in lines)  # not a terminal: no colour codes


def test_an_untimed_run_counts_correct_candidates_and_claims_no_speed():
    lines = play("cpu-failures", io.StringIO())
    assert "baseline correct on cpu; timings are not claimed there" in lines
    assert "        correct | 2 correct so far (untimed)" in lines
    assert not any(re.search(r"\d\.\d\dx|best", line) for line in lines)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_colour(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    text = "\n".join(play("gpu-optimized", Terminal()))
    assert "\x1b[" in text and "compile_error" in text


def test_events_handed_over_by_the_writer_print_as_read_back(tmp_path):
    """run.py hands on_event what the journal's writer returns: the event as its model, built
    from the line as written, though the writer was given pydantic models for its fields."""
    from okgit.eval.types import EvalError, ProfileData

    stream = io.StringIO()
    on_event = printer(stream)
    journal = Journal(tmp_path / "journal.jsonl", "r")
    on_event(journal.write("proposal", cand="c001", origin="llm", intent="x", parent=None, backend="triton"))
    on_event(journal.write("evaluated", cand="c001", status="compile_error", correct=False, timed=False, speedup=None,
                           runtime_us=None, ref_runtime_us=None, error=EvalError(gate="compile", message="boom"),
                           profile=ProfileData(), wall_s=1.0))
    assert stream.getvalue().splitlines()[-1] == "        compile_error compile: boom | 0 correct so far (untimed)"
    replayed = io.StringIO()
    again = printer(replayed)
    for event in read_events(tmp_path / "journal.jsonl")[0]:
        again(event)
    assert replayed.getvalue() == stream.getvalue()
