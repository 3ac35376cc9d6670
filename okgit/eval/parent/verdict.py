"""From what a candidate's worker recorded and what the judge found to an EvalResult.

The judge compared every output on the device (okgit.eval.judge.process); the worker recorded the facts
of each call. Here the gates are decided in a fixed order; the first that fails sets the status
and EvalError. A gate that catches cheating (replaced entry points, aliasing, a tensor subclass,
no completed kernel of the backend, outputs that change once timed, work escaping the
caller's stream, a time below the roofline) gives `rejected`; a wrong answer gives `incorrect`; a crash
gives `error`. Timing figures are taken from the raw samples here, not from the worker's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from okgit.eval import roofline
from okgit.eval.parent.profile import profile_data
from okgit.eval.parent.reference import PreparedReference
from okgit.eval.parent.sandbox import Outcome
from okgit.eval.parent.streams import check_streams
from okgit.eval.protocol.checks import LeafCheck
from okgit.eval.protocol.jobs import CASE_GATES, MODE_GATES, PINNED_FLAGS, Case
from okgit.eval.types import EvalError, EvalResult, GateResult, KernelShape, Mode, ProfileData, Status

GATES = [
    "static", "compile", "device", "entry_points", "output_type", "aliasing", "inputs_unchanged", "outputs_written", "nan_pattern",
    "seeds", "repeat", "determinism", "fresh_inputs", "remembered", "distribution", "extra_shapes", "init_inputs",
    "train_mode", "state", "eval_mode", "backend_kernel", "own_shape",
    "streams", "timed_outputs", "roofline",
]
REJECTING = {"static", "entry_points", "aliasing", "remembered", "backend_kernel", "own_shape", "timed_outputs",
             "streams", "roofline"}
SIDE_STREAM_MIN_US = 200.0  # device work left after a back-to-back batch that is more than a synchronize's noise
NO_ROOFLINE = "OKGIT_TEST_NO_ROOFLINE"  # tests only: the roofline gate off, to show the other gates catch a cheat alone


@dataclass
class Findings:
    """The first failure per gate, and the worst errors seen on passing leaves."""

    failures: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, Status] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    max_abs: float = 0.0
    max_rel: float = 0.0

    def fail(self, gate: str, message: str, status: Status | None = None) -> None:
        if gate not in self.failures:
            self.failures[gate] = message
            self.statuses[gate] = status or (Status.rejected if gate in REJECTING else Status.incorrect)

    def leaf(self, check: LeafCheck, where: str) -> None:
        if check.ok:
            self.max_abs, self.max_rel = max(self.max_abs, check.max_abs), max(self.max_rel, check.max_rel)
            return
        subclass = check.gate == "output_type" and "not exactly" in check.message
        self.fail(check.gate, f"{where}: {check.message}", Status.rejected if subclass else None)


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


def judge(prep: PreparedReference, cases: list[Case], result: dict[str, Any], checks: dict[str, Any], *,
          backend: str, device: str, mode: Mode, base: dict[str, Any]) -> EvalResult:
    """`checks`: per call key, the judge's answer for that call's outputs."""
    failure = result.get("failure")
    if failure:
        status = Status(failure["status"])
        passed = [GateResult(name="static", passed=True)]
        if failure["gate"] != "compile":
            passed.append(GateResult(name="compile", passed=True))
        return _result(status, failure["gate"], failure["message"],
                       passed + [GateResult(name=failure["gate"], passed=False, detail=failure["message"][:300])], base)

    f = Findings()
    for key, facts in result.get("calls", {}).items():
        if facts.get("returned_before"):
            f.fail("remembered", f"{key}: returned the tensor that call {facts['returned_before']} returned, still held "
                   "by the candidate: a remembered output (and an earlier caller's result overwritten)")
    if result.get("replaced"):
        f.fail("entry_points", "the candidate replaced what the evaluator relies on: " + ", ".join(result["replaced"]))
    calls = result.get("calls", {})
    seeds = [c for c in cases if c.kind == "seed"]
    for case in cases:
        _check_call(f, prep, case.id, case.id, calls, checks, CASE_GATES[case.kind], what=case.note or None)
        if case.kind == "seed":
            key = f"{case.id}#repeat"
            _check_call(f, prep, case.id, key, calls, checks, "repeat")
            first, again = checks.get(case.id, {}).get("fingerprints"), checks.get(key, {}).get("fingerprints")
            if prep.deterministic and first is not None and again is not None and first != again:
                f.fail("determinism", f"{case.id}: two calls on identical inputs gave different outputs")
    if not any(c.kind == "init_inputs" for c in cases):
        why = next((d.split(": ", 1)[1] for d in prep.dropped if d.startswith(("init_inputs: ", "i0: "))), "")
        f.notes["init_inputs"] = "skipped" + (f": {why}" if why else "")
    if not prep.deterministic:
        f.notes["determinism"] = "skipped: the reference itself is not deterministic"
    if len(seeds) >= 2 and "fresh" in calls:
        _check_call(f, prep, seeds[1].id, "fresh", calls, checks, "fresh_inputs",
                    what="same input buffers refilled with new values")
    failed = result.get("failed_launches", {}).get(backend, 0)
    if failed:
        f.fail("backend_kernel", f"{failed} {backend} kernel launch(es) raised and the calls went on: their outputs "
               "came from something else (only launches that completed count)")
    launches = result.get("backend_launches", {}).get(backend, 0)
    if launches == 0:
        f.fail("backend_kernel", f"no {backend} kernel was launched in {len(calls)} calls: not an optimization "
               f"of the op (pure PyTorch or another backend)")
    shapes = kernel_shapes(prep, cases, result, backend)
    own = next((s for s in shapes if s.own), None)
    if launches and own is not None and own.launches == 0:
        f.fail("own_shape", f"its own kernels did not run at the op file's own shape ({_knobs(own.knobs)}): other "
               "code (the original forward kept as a fallback, a library call) produced the outputs there, so what "
               "was checked is not what a user of the op gets")
    elif own is not None and own.launches is None:
        f.notes["own_shape"] = f"not told at {_knobs(own.knobs)}: {own.why}"
    elif launches:
        others = [s for s in shapes if not s.ran() and not s.own]
        if others:
            f.notes["own_shape"] = f"only other code ran at {'; '.join(_knobs(s.knobs) for s in others)}"

    timing = result.get("timing")
    runtime = ref_runtime = None
    prof: ProfileData | None = None
    s0 = calls.get(seeds[0].id, {}) if seeds else {}
    custom = set(s0.get("kernels", [])) | set(result.get("cuda_kernel_names", []))
    rate, peaks = allowed_matmul_rate(prep)
    flops, min_bytes = prep.cost.get("flops"), prep.cost.get("min_bytes")
    roof: dict[str, Any] | None = None
    for key in calls:  # timed calls' outputs (on a CPU: the same protocol's, untimed)
        if key.startswith("timed:"):
            _check_call(f, prep, key.split(":", 1)[1].split("~")[0], key, calls, checks, "timed_outputs",
                        what="an output of a timed call, on its own salted inputs")
    if timing:
        streams = check_streams(timing)
        runtime = streams.runtime_us
        ref_runtime = median(prep.timing["samples_us"]) if prep.timing else None
        residual, host = timing["residual_sync_us"], timing["batch_host_us"] * timing.get("batch_calls", 1)
        if streams.escaped:
            f.fail("streams", f"the outputs of {', '.join(streams.escaped[:3])} were still being written after the "
                   "call's own stream had finished: its work runs on a stream the caller never waits for (make the "
                   "caller's stream wait for it before returning, e.g. torch.cuda.current_stream().wait_stream(side))")
        elif residual > max(SIDE_STREAM_MIN_US, 0.1 * host):
            f.fail("streams", f"{residual:.0f} us of device work was still running after the timed stream "
                   f"finished: work escapes the timed stream")
        elif streams.device_wide:
            f.notes["streams"] = streams.note()
        if peaks and flops is not None and min_bytes is not None and not os.environ.get(NO_ROOFLINE):
            floor = roofline.floor_us(flops, min_bytes, peaks, rate)
            ref_ok = ref_runtime is None or ref_runtime >= roofline.PLAUSIBLE_FRACTION * floor
            if not ref_ok:
                f.notes["roofline"] = f"skipped: the reference itself runs below the floor {floor:.2f} us"
            elif floor > 0 and runtime < roofline.PLAUSIBLE_FRACTION * floor:
                f.fail("roofline", f"{runtime:.2f} us is below the roofline floor {floor:.2f} us "
                       f"({flops:.3g} FLOP, {min_bytes:.3g} B): the kernel does less work than the op needs")
            roof = roofline.position(flops, min_bytes, runtime, peaks, rate)
    launches_per_call = s0.get("launches", {}).get(backend)
    if timing or result.get("profile") or device == "cpu":
        prof = profile_data(result.get("profile") or {}, custom, launch_count=launches_per_call, flops=flops,
                            min_bytes=min_bytes, roofline=roof,
                            raw={"timing": {k: v for k, v in timing.items() if k != "spot"}} if timing else None)

    gates = [GateResult(name="static", passed=True), GateResult(name="compile", passed=True)]
    for gate in GATES[3:]:
        if gate in ("streams", "roofline") and not timing:
            continue
        if gate == "timed_outputs" and not any(key.startswith("timed:") for key in calls):
            continue
        if gate in MODE_GATES and not any(c.kind == "modes" for c in cases):
            continue
        if gate in f.failures:
            gates.append(GateResult(name=gate, passed=False, detail=f.failures[gate][:300]))
        else:
            gates.append(GateResult(name=gate, passed=True, detail=f.notes.get(gate, "")))
    first = next((g for g in GATES if g in f.failures), None)
    out = EvalResult(
        status=f.statuses[first] if first else Status.correct,
        correct=first is None,
        error=EvalError(gate=first, message=f.failures[first]) if first else None,
        gates=gates,
        max_abs_error=f.max_abs,
        max_rel_error=f.max_rel,
        profile=prof,
        kernel_shapes=shapes,
        **base,
    )
    if timing and first is None:
        out.timed = True
        out.runtime_us = runtime
        out.ref_runtime_us = ref_runtime
        out.speedup = ref_runtime / runtime if ref_runtime and runtime else None
    return out


def kernel_shapes(prep: PreparedReference, cases: list[Case], result: dict[str, Any], backend: str) -> list[KernelShape]:
    """Per checked shape, the backend's launches over the calls made at it; the op file's own shape
    is the first where it was checked (a GPU's), else the worker's meta-device call there."""
    shape_of = {c.id: c.shape for c in cases}
    totals: dict[int, int] = {}
    for key, facts in result.get("calls", {}).items():
        if "launches" not in facts:
            continue  # timed calls: their launches are the seed's
        case_id = key.split("#", 1)[0]
        shape = shape_of.get(case_id, 0)  # fresh, fresh#1: the main shape's buffers
        totals[shape] = totals.get(shape, 0) + int(facts["launches"].get(backend, 0))
    meta = result.get("own_shape")
    shapes = [KernelShape(knobs=prep.shapes[i], launches=n, own=i == 0 and meta is None)
              for i, n in sorted(totals.items())]
    if meta is not None:
        launched = meta["launches"]
        shapes.append(KernelShape(knobs=meta["knobs"], launches=None if launched is None else int(launched.get(backend, 0)),
                                  own=True, how="meta", why=meta.get("why", "")))
    return shapes


def _knobs(knobs: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items()) or "no shape knobs"


def _check_call(f: Findings, prep: PreparedReference, case_id: str, key: str, calls: dict[str, Any],
                checks: dict[str, Any], gate: str, what: str | None = None) -> None:
    where = f"{key}" if what is None else f"{key} ({what})"
    facts = calls.get(key)
    found = checks.get(key)
    if facts is None or found is None:
        f.fail(gate, f"{where}: no outputs recorded", Status.error)
        return
    ref_facts = prep.calls.get(case_id, {})
    if facts["spec"] != ref_facts.get("spec", facts["spec"]):
        f.fail("output_type", f"{where}: returned structure {facts['spec']}, expected {ref_facts.get('spec')}")
        return
    for j, leaf in enumerate(facts["leaves"]):
        ref_leaf = ref_facts["leaves"][j] if j < len(ref_facts.get("leaves", [])) else {}
        if leaf["alias"] is not None and leaf["alias"] != ref_leaf.get("alias"):
            f.fail("aliasing", f"{where}: output {j} aliases input {leaf['alias']} (the reference's does not)")
        if leaf["device"] != ref_leaf.get("device", leaf["device"]):
            f.fail("output_type", f"{where}: output {j} on {leaf['device']}, expected {ref_leaf.get('device')}")
    changed = set(facts.get("inputs_changed", [])) - set(ref_facts.get("inputs_changed", []))
    if changed:
        f.fail("inputs_unchanged", f"{where}: the call modified input(s) {sorted(changed)}")
    parts = ref_facts.get("parts") or []  # the modes case: which mode, or which buffer, each output is
    for j, check in enumerate(found["checks"]):
        f.leaf(LeafCheck(**check), f"{where}, {parts[j][1] if j < len(parts) else f'output {j}'}")


def allowed_matmul_rate(prep: PreparedReference) -> tuple[float, dict[str, Any] | None]:
    peaks = prep.peaks
    if not peaks:
        return 0.0, None
    tols = [t for leaves in prep.tolerances.values() for t in leaves if t.relative > 0]
    allowed = max((t.relative for t in tols), default=1e-4)
    dtypes = {d.replace("float16", "fp16").replace("bfloat16", "bf16") for d in prep.cost.get("dtypes", [])}
    return roofline.allowed_rate(peaks, dtypes, allowed), peaks


def _result(status: Status, gate: str, message: str, gates: list[GateResult], base: dict[str, Any]) -> EvalResult:
    return EvalResult(status=status, correct=False, error=EvalError(gate=gate, message=message), gates=gates, **base)


def base_fields(prep: PreparedReference | None, cases: list[Case], *, device: str, mode: Mode) -> dict[str, Any]:
    shapes = [] if prep is None else [prep.shapes[i] for i in sorted({c.shape for c in cases})]
    return {"device": device, "mode": mode, "shapes": shapes, "flags": dict(PINNED_FLAGS)}
