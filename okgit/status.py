"""A candidate's status (the evaluator's verdict: `evaluated` events, EvalResult) and a run's
final status (`--json`'s `status`, run_finished, result.json): part of the contract. Both are
str enums, so a value read back from a journal or result.json compares equal to its member.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    correct = "correct"
    compile_error = "compile_error"
    incorrect = "incorrect"
    rejected = "rejected"
    error = "error"


class RunStatus(str, Enum):
    optimized = "optimized"  # beats the baseline past the noise on every round, correct, plausible
    matched = "matched"  # correct, as fast as the baseline within the noise, not faster past it
    slower = "slower"  # correct, but slower than the baseline past the noise: not handed out, its tag kept
    fallback = "fallback"  # nothing passed; the baseline is kept
    unverified = "unverified"  # correct, but this device cannot time it
    interrupted = "interrupted"  # Ctrl-C, SIGTERM or an error: what it had is written, it can resume
    error = "error"  # the final gate could not judge (device out of memory, a lost worker): says why, can resume

    def __str__(self) -> str:  # the value in f-strings and messages on every Python version
        return self.value

    __format__ = str.__format__  # type: ignore[assignment]  # str's formatting, not Enum's name


CORRECT = (RunStatus.optimized, RunStatus.matched, RunStatus.unverified)  # a correct kernel was handed out
RESUMABLE = (RunStatus.interrupted, RunStatus.error)  # `--resume` goes on from what the run had
