"""A scripted model that reads the prompt it is given and answers by its content.

Each role parses its prompt into sections and checks that the context it needs is there
(the reference, the version to change and its figures, the device figures with units, the
reference figures, the intent, the gate rules, the failures of other ideas, the result of its
own last candidate, the critic's diagnosis; for the critic the measurements, the source and
the trajectory; for the planner the tree and what just happened). What is missing goes into
`missing`, and the replies themselves are built from what was read: a generator edits the file
it is shown (so a candidate's lineage is in its source), picks its next outcome by the intent
it is asked to work on, and a critic quotes the runtime it was shown, which the generator must
then see. A test asserts `missing == []`; tests/llm/test_llm_context.py shows that blanking any
one field of any prompt makes it non-empty.

Candidate files end with marker lines `# OUTCOME <kind> <n>` that `judge` reads: BUG
(compile error), WRONG (mismatch), REJECT (a gate), OK (correct, untimed) or a speedup.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from okgit import llm
from okgit.eval.parent.gates import gate_names
from okgit.eval.types import EvalError, EvalResult, ProfileData, Reference, Status

OP = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


N = 64


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

REF_US = 100.0
HARDWARE = {"device": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "shared_memory_per_sm_bytes": 233472,
            "registers_per_sm": 65536, "copy_bandwidth": 4.0e12, "matmul": {"fp32": 5.0e13}}
REFERENCE = Reference(device="cuda", timed=True, runtime_us=REF_US, hardware=HARDWARE,
                      profile=ProfileData(bottleneck_type="memory", roofline_position=0.3))
MESSAGES = {"BUG": "NameError: name 'tl' is not defined", "WRONG": "max abs difference: 0.25",
            "REJECT": "output 0 aliases input 0 (the reference's does not)"}


def judge(source: str) -> EvalResult:
    outcome = re.findall(r"^# OUTCOME (\S+)", source, re.M)
    kind = outcome[-1] if outcome else "OK"
    if kind == "BUG":
        return EvalResult(status=Status.compile_error, error=EvalError(gate="compile", message=MESSAGES["BUG"]))
    if kind == "WRONG":
        return EvalResult(status=Status.incorrect, max_abs_error=0.25, error=EvalError(gate="seeds", message="s0: mismatch"))
    if kind == "REJECT":
        return EvalResult(status=Status.rejected, error=EvalError(gate="aliasing", message=MESSAGES["REJECT"]))
    if kind == "OK":
        return EvalResult(status=Status.correct, correct=True, timed=False)
    speedup = float(kind)
    runtime = REF_US / speedup
    return EvalResult(status=Status.correct, correct=True, timed=True, speedup=speedup, runtime_us=runtime,
                      ref_runtime_us=REF_US, device="cuda",
                      profile=ProfileData(bottleneck_type="memory", roofline_position=0.3 * speedup, floor_us=30.0))


def sections(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in re.finditer(r"^## ([^\n]+)\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        out[m.group(1).strip()] = m.group(2).strip()
    return out


def code_of(text: str) -> str:
    m = re.search(r"```python\n(.*?)```", text, re.S)
    return m.group(1) if m else ""


def role_of(messages: list[dict]) -> str:
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    for marker, role in (("performance critic", "critic"), ("tree of intents", "intents"),
                         ("library of optimization", "reflection")):
        if marker in system:
            return role
    return "generator"


@dataclass
class Shown:
    role: str
    system: str
    sections: dict[str, str]
    user: str = ""
    reply: str = ""


@dataclass
class ContentModel:
    """`outcomes`: per intent description, the outcomes of its candidates in order (the last
    repeats). `plans`: the planner's replies in order (JSON values; the last repeats)."""

    outcomes: dict[str, list[str]]
    plans: list[object] = field(default_factory=list)
    reflection_reply: str = "[]"
    missing: list[str] = field(default_factory=list)
    shown: list[Shown] = field(default_factory=list)
    last: dict[str, str] = field(default_factory=dict)  # intent -> the marker of its last candidate
    failed: list[str] = field(default_factory=list)  # the intents of failed candidates, in order
    recommendations: dict[str, str] = field(default_factory=dict)  # marker -> what the critic said
    serial: int = 0

    def __call__(self, messages, **kwargs):
        role = role_of(messages)
        shown = Shown(role, messages[0]["content"], sections(messages[-1]["content"]), messages[-1]["content"])
        reply = getattr(self, role)(shown)
        shown.reply = reply
        self.shown.append(shown)
        return llm.complete(messages, **kwargs, mock_response=reply)

    def need(self, shown: Shown, what: str, ok: bool) -> None:
        if not ok:
            self.missing.append(f"{shown.role} #{sum(s.role == shown.role for s in self.shown) + 1}: {what}")

    def prompts(self, role: str = "generator") -> list[Shown]:
        return [s for s in self.shown if s.role == role]

    # ---- roles -----------------------------------------------------------------------------

    def generator(self, s: Shown) -> str:
        sec = s.sections
        self.need(s, "reference source", "return torch.relu(x) * 2.0" in sec.get("Reference operator (relu2)", ""))
        self.need(s, "gate rules", all(f"[{g}]" in s.system for g in gate_names()))
        hw = sec.get("Device and measured figures", "")
        self.need(s, "hardware with units", all(x in hw for x in ("compute capability: 9.0", "KiB", "TB/s", "registers per SM")))
        self.need(s, "reference figures", f"reference runtime: {REF_US:.2f} us" in sec.get("Reference measurements", ""))
        intent = sec.get("What to try now", "")
        self.need(s, "intent", intent in self.outcomes)
        label = next((k for k in sec if k.startswith("Current version")), "")
        current = code_of(sec.get(label, ""))
        self.need(s, "current source", "class Model" in current)
        figures = sec.get("Measurements of the current version", "")
        shown_outcome = (re.findall(r"^# OUTCOME (\S+)", current, re.M) or [""])[-1]
        if re.fullmatch(r"[\d.]+", shown_outcome) and "your previous attempt" not in label:
            self.need(s, "current version's runtime", f"runtime: {REF_US / float(shown_outcome):.2f} us" in figures)
            rec = self.recommendations.get(self.marker_of(current))
            if rec:
                self.need(s, "diagnosis of the current version", rec in sec.get("Diagnosis of the current version", ""))
        feedback = sec.get("Result of your previous attempt", "")
        last = self.last.get(intent, "")
        last_outcome = last.split()[2] if last else ""
        if last_outcome in MESSAGES:
            self.need(s, f"the {last_outcome} failure in the feedback", MESSAGES[last_outcome] in feedback)
        elif re.fullmatch(r"[\d.]+", last_outcome) and last != self.marker_of(current) and last in self.recommendations:
            # its last candidate was correct but did not become the base: the critic's word on it must come back
            self.need(s, "the critic on the last correct-but-not-faster candidate", self.recommendations[last] in feedback)
        others = [i for i in self.failed if i != intent]
        if others:
            self.need(s, "failures of other ideas", f"({others[-1]})" in sec.get("Already tried and failed (do not repeat)", ""))
        script = self.outcomes.get(intent) or ["OK"]
        done = sum(1 for x in self.shown if x.role == "generator" and x.sections.get("What to try now") == intent)
        outcome = script[min(done, len(script) - 1)]
        self.serial += 1
        marker = f"# OUTCOME {outcome} {self.serial}"
        self.last[intent] = marker
        if outcome in MESSAGES:
            self.failed.append(intent)
        body = (current or OP).rstrip("\n") + f"\n{marker}\n"
        return f"Changed it.\n```python\n{body}```"

    @staticmethod
    def marker_of(source: str) -> str:
        return (re.findall(r"^# OUTCOME .*$", source, re.M) or [""])[-1]

    def critic(self, s: Shown) -> str:
        sec = s.sections
        cand_key = next((k for k in sec if k.startswith("Candidate under review")), "")
        source = code_of(sec.get(cand_key, ""))
        self.need(s, "candidate source", "# OUTCOME" in source)
        self.need(s, "reference source", "return torch.relu(x) * 2.0" in sec.get("Reference operator (relu2)", ""))
        runtime = re.search(r"runtime: ([\d.]+) us", sec.get("Evaluation", ""))
        self.need(s, "measurements", runtime is not None)
        self.need(s, "profile", "roofline: " in sec.get("Profile", ""))
        self.need(s, "reference figures", f"reference runtime: {REF_US:.2f} us" in sec.get("Reference measurements", ""))
        self.need(s, "trajectory", cand_key[-5:-1] in sec.get("What this idea has tried so far (oldest first)", ""))
        rec = f"at {runtime.group(1) if runtime else '?'} us, drop the extra pass"
        self.recommendations[self.marker_of(source)] = rec
        return json.dumps({"bottleneck_type": "memory", "specific_issue": "an extra pass", "recommendation": rec, "confidence": 0.7})

    def intents(self, s: Shown) -> str:
        sec = s.sections
        self.need(s, "reference source", "return torch.relu(x) * 2.0" in sec.get("Reference operator (relu2), backend triton", ""))
        self.need(s, "what just happened", sec.get("What just happened", "(none)") != "(none)")
        n = len(self.prompts("intents"))
        if n:  # after the first plan the tree is there, with ids the ops refer to
            self.need(s, "the tree", "- i1 [" in sec.get("The intent tree so far (status, priority, outcomes)", ""))
        plan = self.plans[min(n, len(self.plans) - 1)] if self.plans else []
        return json.dumps(plan)

    def reflection(self, s: Shown) -> str:
        return self.reflection_reply
