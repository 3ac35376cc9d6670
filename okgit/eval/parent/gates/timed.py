"""The gates of the timed calls (okgit.eval.worker.timing): every stream's work must be done when
the call returns (okgit.eval.parent.streams), their outputs are checked like the others, and no
time may fall below the roofline floor. On a CPU nothing is timed: the timed calls' outputs are
still checked, on the same protocol."""

from __future__ import annotations

import os
from statistics import median
from typing import TYPE_CHECKING, Any

from okgit.eval import roofline
from okgit.eval.parent.gates.base import Evidence, Findings, Gate, gate
from okgit.eval.parent.streams import check_streams
from okgit.eval.protocol.keys import CallKind

if TYPE_CHECKING:
    from okgit.eval.parent.reference import PreparedReference

SIDE_STREAM_MIN_US = 200.0  # device work left after a back-to-back batch that is more than a synchronize's noise
NO_ROOFLINE = "OKGIT_TEST_NO_ROOFLINE"  # tests only: the roofline gate off, to show the other gates catch a cheat alone


@gate(230)
class TimedOutputs(Gate):
    name = "timed_outputs"
    rule = "Outputs of the timed calls must be as correct as the checked ones."
    rejects = True
    judges = (CallKind.timed.value,)

    def applies(self, ev: Evidence) -> bool:
        return bool(ev.timed_keys())


class _TimingGate(Gate):
    rejects = True

    def applies(self, ev: Evidence) -> bool:
        return bool(ev.timing)


@gate(220)
class Streams(_TimingGate):
    name = "streams"
    rule = ("Work on other streams is allowed only if the caller's stream waits for it before the call returns "
            "(wait_stream / events): outputs must be complete in the caller's stream order.")

    def check(self, ev: Evidence, found: Findings) -> None:
        timing = ev.timing
        if not timing:
            return
        streams = check_streams(timing)
        residual, host = timing["residual_sync_us"], timing["batch_host_us"] * timing.get("batch_calls", 1)
        if streams.escaped:
            found.fail(self.name, f"the outputs of {', '.join(streams.escaped[:3])} were still being written after "
                       "the call's own stream had finished: its work runs on a stream the caller never waits for "
                       "(make the caller's stream wait for it before returning, e.g. "
                       "torch.cuda.current_stream().wait_stream(side))")
        elif residual > max(SIDE_STREAM_MIN_US, 0.1 * host):
            found.fail(self.name, f"{residual:.0f} us of device work was still running after the timed stream "
                       f"finished: work escapes the timed stream")
        elif streams.device_wide:
            found.note(self.name, streams.note())


@gate(240)
class Roofline(_TimingGate):
    name = "roofline"
    # the op's work: the fewest FLOPs of the exact rewrites okgit knows (okgit.problem.least_work)
    rule = "A time below the roofline floor (less work than the op needs) is rejected as implausible."

    def check(self, ev: Evidence, found: Findings) -> None:
        prep, timing = ev.prep, ev.timing
        rate, peaks = allowed_matmul_rate(prep)
        flops, min_bytes = prep.cost.get("flops"), prep.cost.get("min_bytes")
        if not timing or not peaks or flops is None or min_bytes is None or os.environ.get(NO_ROOFLINE):
            return
        runtime = check_streams(timing).runtime_us
        ref_runtime = median(prep.timing["samples_us"]) if prep.timing else None
        floor = roofline.plausible_floor_us(flops, min_bytes, peaks, rate)
        if ref_runtime is not None and ref_runtime < roofline.PLAUSIBLE_FRACTION * floor:
            found.note(self.name, f"skipped: the reference itself runs below the floor {floor:.2f} us")
        elif floor > 0 and runtime < roofline.PLAUSIBLE_FRACTION * floor:
            rewrites = prep.cost.get("rewrites") or []
            by = f", the op's work by its exact rewrites ({', '.join(rewrites)})" if rewrites else ""
            found.fail(self.name, f"{runtime:.2f} us is below the roofline floor {floor:.2f} us "
                       f"({flops:.3g} FLOP{by}, {min_bytes:.3g} B): the kernel does less work than the op needs")


def allowed_matmul_rate(prep: PreparedReference) -> tuple[float, dict[str, Any] | None]:
    """The matmul rate the floor assumes: the fastest the tolerance allows (okgit.eval.roofline),
    with the device's measured peaks (None where none were measured)."""
    peaks = prep.peaks
    if not peaks:
        return 0.0, None
    tols = [t for leaves in prep.tolerances.values() for t in leaves if t.relative > 0]
    allowed = max((t.relative for t in tols), default=1e-4)
    dtypes = {d.replace("float16", "fp16").replace("bfloat16", "bf16") for d in prep.cost.get("dtypes", [])}
    return roofline.allowed_rate(peaks, dtypes, allowed), peaks
