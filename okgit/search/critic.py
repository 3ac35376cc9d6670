"""The critic: a separate role that reads a correct candidate's measurements and says what
limits it. It never writes code; the generator gets its diagnosis in the next prompt.

Also the plain-text views of measurements (result, profile, hardware) that every prompt uses,
so that the generator, the critic and the intent planner see the same figures.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Literal, Optional, TypeVar

from pydantic import BaseModel, ValidationError, field_validator

from okgit.eval.types import EvalResult, ProfileData
from okgit.llm import Completion, Message, prompt_messages
from okgit.search.extract import extract_json
from okgit.search.profile_text import profile_lines
from okgit.search.types import Attempt, Context

T = TypeVar("T")
# The proposer's way of asking a model: (role, messages, cand, parse) -> (reply, parsed or None).
Ask = Callable[[str, list[Message], Optional[str], Callable[[str], Optional[T]]], tuple[Optional[Completion], Optional[T]]]

BOTTLENECKS = ("memory", "compute", "latency", "unknown")
CONFIDENCE_WORDS = {"very high": 0.9, "high": 0.8, "medium": 0.5, "moderate": 0.5, "low": 0.2, "very low": 0.1}


def _number(value: Any) -> float | None:
    """1.5, "1.5", "1.5x", "~40%" -> a float (percentages as fractions); None when absent."""
    if value is None or isinstance(value, (int, float)):
        return None if value is None else float(value)
    m = re.search(r"-?\d+(?:\.\d+)?", str(value))
    if not m:
        return None
    number = float(m.group())
    return number / 100 if "%" in str(value) else number


class Diagnosis(BaseModel):
    bottleneck_type: Literal["memory", "compute", "latency", "unknown"] = "unknown"
    roofline_position: float | None = None
    specific_issue: str
    recommendation: str
    estimated_headroom: float | None = None
    confidence: float = 0.5

    @field_validator("bottleneck_type", mode="before")
    @classmethod
    def _bottleneck(cls, v: Any) -> str:
        text = str(v or "").lower()
        return next((b for b in BOTTLENECKS if b in text), "unknown")  # "memory-bound" -> memory

    @field_validator("roofline_position", "estimated_headroom", mode="before")
    @classmethod
    def _numbers(cls, v: Any) -> float | None:
        return _number(v)

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, v: Any) -> float:
        if isinstance(v, str) and v.strip().lower() in CONFIDENCE_WORDS:
            return CONFIDENCE_WORDS[v.strip().lower()]
        number = _number(v)
        return 0.5 if number is None else min(max(number, 0.0), 1.0)

    def text(self) -> str:
        lines = [
            f"bottleneck: {self.bottleneck_type}"
            + (f", at {self.roofline_position:.0%} of the roofline" if self.roofline_position else ""),
            f"issue: {self.specific_issue}",
            f"recommendation: {self.recommendation}",
        ]
        if self.estimated_headroom:
            lines.append(f"estimated headroom: {self.estimated_headroom:g}x (confidence {self.confidence:.1f})")
        return "\n".join(lines)


def parse_diagnosis(text: str) -> Diagnosis | None:
    value = extract_json(text)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = value[0]
    if not isinstance(value, dict):
        return None
    try:
        return Diagnosis.model_validate(value)
    except ValidationError:
        return None


REASK = (
    "That reply was not one valid JSON object with the keys bottleneck_type, roofline_position, "
    "specific_issue, recommendation, estimated_headroom, confidence. Reply with only that JSON object."
)


def diagnose(ask: Ask, ctx: Context, attempt: Attempt, hardware: str, trajectory: str = "") -> Diagnosis | None:
    """Ask the critic about a correct candidate; re-ask once on a malformed reply, then give up."""
    messages = prompt_messages(
        "critic.v2",
        op_name=ctx.problem.name,
        reference_source=ctx.problem.source,
        cand=attempt.cand,
        candidate_source=attempt.proposal.source,
        evaluation=describe_result(attempt.result),
        profile=describe_profile(attempt.result.profile),
        hardware=hardware,
        reference_figures=describe_reference(ctx),
        trajectory=trajectory,
    )
    reply, diagnosis = ask("critic", messages, attempt.cand, parse_diagnosis)
    if diagnosis is None and reply is not None:
        retry = [*messages, {"role": "assistant", "content": reply.text}, {"role": "user", "content": REASK}]
        _, diagnosis = ask("critic", retry, attempt.cand, parse_diagnosis)
    if diagnosis is None:
        ctx.log("note", message=f"critic gave no usable diagnosis of {attempt.cand}; going on without one")
        return None
    ctx.log("diagnosis", cand=attempt.cand, **diagnosis.model_dump())
    return diagnosis


# ---- the measurements as prompt text ---------------------------------------------------------


def describe_result(result: EvalResult) -> str:
    lines = [f"status: {result.status.value}"]
    if result.error:
        lines.append(f"failed gate: {result.error.gate}\nmessage: {result.error.message.strip()[-2000:]}")  # a traceback ends with its cause
    if result.max_abs_error is not None or result.max_rel_error is not None:
        lines.append(f"max abs difference: {result.max_abs_error}, max rel difference: {result.max_rel_error}")
    if result.timed and result.runtime_us is not None:
        lines.append(
            f"runtime: {result.runtime_us:.2f} us vs reference {result.ref_runtime_us or 0:.2f} us "
            f"(speedup {result.speedup or 0:.2f}x)"
        )
    elif result.correct:
        lines.append(f"not timed on this device ({result.device}): correctness only")
    if result.shapes:
        lines.append(f"shapes checked: {result.shapes}")
    return "\n".join(lines)


def describe_profile(profile: ProfileData | None) -> str:
    """Every figure with its unit and the tool it came from (okgit.search.profile_text)."""
    return "\n".join(profile_lines(profile))


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _kib(value: float) -> str:
    return f"{value / 2**20:.3g} MiB" if value >= 2**20 else f"{value / 1024:.3g} KiB"


# The device figures okgit measures or reads (okgit.eval.roofline.measure_peaks), with units.
_FIGURES: dict[str, tuple[str, Callable[[Any], str]]] = {
    "compute_capability": ("compute capability", str),
    "sm_count": ("streaming multiprocessors (SMs)", str),
    "shared_memory_per_sm_bytes": ("shared memory per SM", _kib),
    "shared_memory_per_block_bytes": ("shared memory per block (opt-in maximum)", _kib),
    "registers_per_sm": ("registers per SM", lambda v: f"{v} (32-bit)"),
    "l2_bytes": ("L2 cache", _kib),
    "copy_bandwidth": ("measured copy bandwidth (read + write)", lambda v: _si(v, "B/s")),
    "read_bandwidth": ("measured read bandwidth", lambda v: _si(v, "B/s")),
    "peak_bandwidth_gbs": ("peak memory bandwidth", lambda v: f"{v} GB/s"),
    "matmul": ("measured matmul rate", lambda rates: ", ".join(f"{k} {_si(v, 'FLOP/s')}" for k, v in rates.items())),
}


def describe_hardware(ctx: Context) -> str:
    figures = {**ctx.reference.hardware, **ctx.hardware}
    name = figures.pop("device", None) or figures.pop("name", None)
    lines = [f"device: {ctx.device}" + (f" ({name})" if name and name != ctx.device else "")]
    for key, value in figures.items():
        if value in (None, "", 0, {}):
            continue
        label, show = _FIGURES.get(key, (key, str))
        lines.append(f"{label}: {show(value)}")
    if ctx.device == "cpu":
        lines.append("no GPU here: Triton runs under its interpreter on CPU tensors; correctness is checked, speed is not")
    return "\n".join(lines)


def describe_current(attempt: Attempt | None) -> str:
    """The measured figures of the version a prompt asks to change: runtime, roofline, kernels."""
    if attempt is None:
        return "the reference itself (see the reference measurements)"
    result = attempt.result
    if not result.correct:
        return f"{attempt.cand} failed: see the result of your previous attempt"
    lines = [describe_result(result)]
    if result.profile is not None:
        lines.append(describe_profile(result.profile))
    return "\n".join(lines)


def describe_trajectory(attempts: list[Attempt]) -> str:
    """What an intent has tried so far, one line per candidate, for the critic."""
    lines = []
    for a in attempts:
        r = a.result
        speed = f" {r.speedup:.2f}x" if r.timed and r.speedup else ""
        why = f": {r.error.gate}" if r.error else ""
        lines.append(f"- {a.cand} (from {a.proposal.parent or 'the reference'}): {r.status.value}{speed}{why}")
    return "\n".join(lines)


def describe_reference(ctx: Context) -> str:
    ref = ctx.reference
    lines = []
    if ref.runtime_us is not None and ref.timed:
        lines.append(f"reference runtime: {ref.runtime_us:.2f} us")
    if ref.shapes:
        lines.append(f"shapes checked: {ref.shapes}")
    if ref.flags:
        lines.append(f"flags pinned in both arms: {ref.flags}")
    if ref.profile:
        lines.append(describe_profile(ref.profile))
    return "\n".join(lines) or "not timed on this device"
