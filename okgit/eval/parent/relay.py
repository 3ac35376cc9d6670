"""The relay of one evaluation: a candidate's exported outputs carried from its worker to the
judge, the judge's answers back (okgit.eval.parent.local runs it between the two processes);
why the judge did not answer, in one line, is okgit.eval.parent.reference.judge_failure.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from okgit.eval.parent.gates import call_gates
from okgit.eval.parent.reference import PreparedReference, judge_failure
from okgit.eval.protocol.jobs import CheckedTiming
from okgit.eval.protocol.keys import CallKey, CallKind, fresh_case


class Relay:
    """Carries a candidate's exported outputs to the judge and its answers back. The case a call
    is judged against, its salt and its gate follow from the call's key (okgit.eval.protocol.keys),
    never from what else the worker says. `timing`: the job's timing that keeps its checked
    outputs (Job.checked_timing), which the judge is told of with each check that comes before it."""

    def __init__(self, prep: PreparedReference, case_ids: set[str], kind: str, timeout_s: float,
                 timing: CheckedTiming | None = None) -> None:
        self.prep = prep
        self.timing = timing
        self.case_ids = case_ids
        self.kind = kind
        self.timeout_s = timeout_s
        self.job_dir: Path | None = None
        self.checks: dict[str, Any] = {}
        self.judge_failure: str | None = None
        # the judge answered that a check did not fit: it is intact (the check's memory went with
        # the exception) and is asked again, where preparing a new one would cost the reference's
        # whole preparation and could itself not fit beside a worker still exiting
        self.judge_intact = False
        self.judge_own: dict[str, float] = {}  # the judge's seconds of its checks: expected, open, compare, fingerprint, release
        self.judge_memory: dict[str, int] = {}
        self.kinds = {c.id: c.kind for c in prep.cases if c.id in case_ids}
        self.fresh_case = fresh_case([c.id for c in prep.cases if c.kind == "seed" and c.id in case_ids])
        self.gates = call_gates()

    def case_of(self, call: CallKey) -> str | None:
        """The case a checked call is judged against, where the key names one of this job's."""
        if call.kind is CallKind.fresh:
            return self.fresh_case
        return call.case if call.kind is not CallKind.fresh_first and call.case in self.kinds else None

    def timing_ahead(self, call: CallKey) -> dict[str, int] | None:
        """The checked timing still to come after this call, for the judge's choice to keep its
        cached memory or hand it back (okgit.eval.judge.prepared.must_release): every call before
        the timing; none for a timed call's outputs, checked once the timing is over."""
        return asdict(self.timing) if self.timing is not None and call.kind is not CallKind.timed else None

    def __call__(self, message: dict[str, Any]) -> dict[str, Any]:
        key = str(message.get("key", ""))
        call = CallKey.parse(key)
        case = self.case_of(call) if call is not None else None
        if message.get("op") != "check" or call is None or case is None or key in self.checks or self.judge_failure:
            return {"ok": False}
        answer = self.prep.judge.request({"op": "check", "case": case, "salt": call.salt,
                                          "gate": self.gates[call.part(self.kinds[case])],
                                          "fingerprint": call.fingerprinted(self.kinds[case]),
                                          "leaves": message.get("leaves"), "outputs": message.get("outputs"),
                                          "dir": str(self.job_dir), "timing": self.timing_ahead(call)},
                                         self.timeout_s)
        for leaf in message.get("outputs") or []:
            if isinstance(leaf, dict) and isinstance(leaf.get("file"), str) and self.job_dir is not None:
                (self.job_dir / Path(leaf["file"]).name).unlink(missing_ok=True)
        if answer is None or answer.get("failure"):
            self.judge_failure = judge_failure(answer, self.prep.judge, f"the check of {key}")
            self.judge_intact = bool(answer and answer["failure"].get("out_of_memory"))
            return {"ok": False}
        self.checks[key] = answer
        for name, seconds in (answer.get("seconds") or {}).items():
            self.judge_own[name] = self.judge_own.get(name, 0.0) + float(seconds)
        for name, value in (answer.get("memory") or {}).items():
            self.judge_memory[name] = max(self.judge_memory.get(name, 0), int(value))
        return {"ok": True}
