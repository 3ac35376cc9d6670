"""From what a candidate's worker recorded and what the judge found to an EvalResult.

The judge compared every output on the device (okgit.eval.judge.process); the worker recorded
the facts of each call. Here each call is compared under the gate its key names, then every
registered gate (okgit.eval.parent.gates) adds its own findings; the first gate in their order
that failed sets the status and EvalError. A gate that catches cheating (`Gate.rejects`:
replaced entry points, aliasing, a tensor subclass, no completed kernel of the backend, outputs
that change once timed, work escaping the caller's stream, a time below the roofline) gives
`rejected`; a wrong answer gives `incorrect`; a crash gives `error`. Timing figures are taken
from the raw samples here, not from the worker's.
"""

from __future__ import annotations

import os
from statistics import median
from typing import Any

from okgit.eval import roofline
from okgit.eval.parent.gates import Evidence, Findings, call_gates, gates
from okgit.eval.parent.gates.outputs import compare_call
from okgit.eval.parent.gates.own_shape import kernel_shapes
from okgit.eval.parent.gates.timed import NO_ROOFLINE, allowed_matmul_rate
from okgit.eval.parent.profile import profile_data
from okgit.eval.parent.reference import PreparedReference
from okgit.eval.parent.sandbox import Outcome
from okgit.eval.parent.streams import check_streams
from okgit.eval.protocol.jobs import PINNED_FLAGS, Case
from okgit.eval.protocol.keys import FRESH, CallKey, CallKind, fresh_case
from okgit.eval.types import EvalError, EvalResult, GateResult, Mode, ProfileData, Status


def crashed(outcome: Outcome, base: dict[str, Any], judge_failure: str | None = None) -> EvalResult:
    """A worker that ended without a result, or a judge that failed during its checks."""
    if judge_failure:
        return _result(Status.error, "judge", f"the evaluation could not be judged: {judge_failure}",
                       [GateResult(name="static", passed=True), GateResult(name="judge", passed=False,
                                                                           detail=judge_failure[:300])], base)
    gate = outcome.phase or "worker"
    tail = "\n".join(outcome.stderr_tail.strip().splitlines()[-6:])
    message = f"{outcome.describe()} during {gate}" + (f"\n{tail}" if tail else "")
    return _result(Status.error, gate, message, [GateResult(name="static", passed=True), GateResult(name=gate, passed=False,
                   detail=outcome.describe())], base)


def decide(prep: PreparedReference, cases: list[Case], result: dict[str, Any], checks: dict[str, Any], *,
           backend: str, device: str, mode: Mode, base: dict[str, Any]) -> EvalResult:
    """The verdict on one evaluation. `checks`: per call key, the judge's answer for that call's outputs."""
    failure = result.get("failure")
    if failure:
        return _worker_failure(failure, base)
    ev = Evidence(prep, cases, result, checks, backend)
    registered = gates()
    found = Findings(rejecting={g.name for g in registered if g.rejects})
    _compare_calls(ev, found)
    for g in registered:
        if g.applies(ev):
            g.check(ev, found)
    listed = [GateResult(name=g.name, passed=g.name not in found.failures,
                         detail=found.failures[g.name][:300] if g.name in found.failures else found.notes.get(g.name, ""))
              for g in registered if g.shown_passed and (g.before_calls or g.applies(ev))]
    # the first failed gate in the registered order (one no registered gate names still fails)
    first = next((g.name for g in registered if g.name in found.failures), next(iter(found.failures), None))
    out = EvalResult(
        status=found.statuses[first] if first is not None else Status.correct,
        correct=first is None,
        error=EvalError(gate=first, message=found.failures[first]) if first is not None else None,
        gates=listed,
        max_abs_error=found.max_abs,
        max_rel_error=found.max_rel,
        profile=_profile(ev, device),
        kernel_shapes=kernel_shapes(prep, cases, result, backend),
        **base,
    )
    timing = ev.timing
    if timing and first is None:
        runtime = check_streams(timing).runtime_us  # every stream's work inside
        ref_runtime = median(prep.timing["samples_us"]) if prep.timing else None
        out.timed = True
        out.runtime_us = runtime
        out.ref_runtime_us = ref_runtime
        out.speedup = ref_runtime / runtime if ref_runtime and runtime else None
    return out


def _worker_failure(failure: dict[str, Any], base: dict[str, Any]) -> EvalResult:
    """The worker stopped at a gate (a call raised, the file did not build): that gate failed."""
    passed = [GateResult(name="static", passed=True)]
    if failure["gate"] != "compile":
        passed.append(GateResult(name="compile", passed=True))
    return _result(Status(failure["status"]), failure["gate"], failure["message"],
                   passed + [GateResult(name=failure["gate"], passed=False, detail=failure["message"][:300])], base)


def _compare_calls(ev: Evidence, found: Findings) -> None:
    """Every call's outputs, in the order the worker made them, each under the gate that judges
    its part of the protocol (`Gate.judges`)."""
    judged = call_gates()
    for case in ev.cases:
        compare_call(ev, found, case.id, CallKey.of(case.id), judged[case.kind], what=case.note or None)
        if case.kind == "seed":
            compare_call(ev, found, case.id, CallKey.repeat(case.id), judged[CallKind.repeat.value])
    second = fresh_case([c.id for c in ev.seeds])
    if second is not None and FRESH.format() in ev.calls:
        compare_call(ev, found, second, FRESH, judged[CallKind.fresh.value],
                     what="same input buffers refilled with new values")
    for key in ev.timed_keys():  # timed calls' outputs (on a CPU: the same protocol's, untimed)
        compare_call(ev, found, key.case, key, judged[CallKind.timed.value],
                     what="an output of a timed call, on its own salted inputs")


def _profile(ev: Evidence, device: str) -> ProfileData | None:
    """Where the time went: the worker's profile, its launches per call, the roofline position."""
    prep, result, timing = ev.prep, ev.result, ev.timing
    if not (timing or result.get("profile") or device == "cpu"):
        return None
    s0 = ev.calls.get(ev.seeds[0].id, {}) if ev.seeds else {}
    custom = set(s0.get("kernels", [])) | set(result.get("cuda_kernel_names", []))
    rate, peaks = allowed_matmul_rate(prep)
    flops, min_bytes = prep.cost.get("flops"), prep.cost.get("min_bytes")
    roof = None
    if timing and peaks and flops is not None and min_bytes is not None and not os.environ.get(NO_ROOFLINE):
        roof = roofline.position(flops, min_bytes, check_streams(timing).runtime_us, peaks, rate)
    return profile_data(result.get("profile") or {}, custom, launch_count=s0.get("launches", {}).get(ev.backend),
                        flops=flops, min_bytes=min_bytes, roofline=roof,
                        raw={"timing": {k: v for k, v in timing.items() if k != "spot"}} if timing else None)


def _result(status: Status, gate: str, message: str, gates: list[GateResult], base: dict[str, Any]) -> EvalResult:
    return EvalResult(status=status, correct=False, error=EvalError(gate=gate, message=message), gates=gates, **base)


def base_fields(prep: PreparedReference | None, cases: list[Case], *, device: str, mode: Mode) -> dict[str, Any]:
    shapes = [] if prep is None else [prep.shapes[i] for i in sorted({c.shape for c in cases})]
    return {"device": device, "mode": mode, "shapes": shapes, "flags": dict(PINNED_FLAGS)}
