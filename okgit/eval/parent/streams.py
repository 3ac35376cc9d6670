"""Every stream's work in the figure: what the parent makes of the worker's stream checks.

The worker's timer (okgit.eval.worker.timing) records, beside its samples on the caller's stream: which
checked calls' outputs were still changing after the call's own stream had finished (`escaped`),
the fenced calls (device idle before the start event, a device-wide synchronize before the last
one: every stream's work inside, plus the synchronize's wake-up, measured apart on empty calls),
and the host time of each call. From these:

- escaped outputs mean the call returned before its work was done: in a user's program the
  caller's next operation reads outputs that are still being written. That is a wrong kernel,
  whatever its speed: gate `streams` rejects it (okgit.eval.parent.gates.timed).
- a fenced call much slower than the samples, by more than the host's own launch time, means
  work ran on another stream while the caller's stream was held before its start event: the
  call is then timed by its fenced calls, which hold all of it (`device_wide`). An honest call
  is never slower fenced than its samples plus the time the host takes to launch it, since the
  device idles only while waiting for launches.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

FENCE_MARGIN = 0.10  # of the samples' median: fenced calls this much slower (after the host time) are not noise
FENCE_MIN_US = 20.0  # nor is anything under this (a loaded host's wake-up jitter)


@dataclass
class StreamCheck:
    runtime_us: float  # what the call is timed by
    device_wide: bool  # True: by its fenced calls, which hold every stream's work
    escaped: list[str]  # checked calls whose outputs changed after their own stream finished
    fenced_us: float | None  # the fenced calls' median, less the synchronize's wake-up
    excess_us: float  # fenced - samples - host launch time

    def note(self) -> str:
        """What the figure is, where it is not the samples' median."""
        if not self.device_wide or self.fenced_us is None:
            return ""
        return (f"timed device-wide ({self.fenced_us:.1f} us): with every stream fenced its calls took "
                f"{self.excess_us:.1f} us longer than on its own stream, beyond the host's launch time")


def check_streams(timing: dict[str, Any]) -> StreamCheck:
    """The figure a timed call gets, and what escaped its stream (see the module's docstring)."""
    samples = statistics.median(timing["samples_us"])
    escaped = list(timing.get("escaped", []))
    fenced = timing.get("fenced") or []
    if not fenced:  # a worker of an older protocol, or a timing without fenced calls
        return StreamCheck(samples, False, escaped, None, 0.0)
    wake = statistics.median(timing["wake_us"]) if timing.get("wake_us") else 0.0
    fenced_us = max(0.0, statistics.median(f["all_us"] for f in fenced) - wake)
    hosts = [statistics.median(f["host_us"] for f in fenced)]
    if timing.get("host_us"):
        hosts.append(statistics.median(timing["host_us"]))
    excess = fenced_us - samples - min(hosts)
    device_wide = bool(escaped) or excess > max(FENCE_MARGIN * samples, FENCE_MIN_US)
    return StreamCheck(max(samples, fenced_us) if device_wide else samples, device_wide, escaped, fenced_us, excess)
