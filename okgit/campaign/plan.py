"""Pre-screening and the budget split of a campaign: pure functions of what each reference told.

Each problem's reference is timed (where the device can) and placed against its roofline
floor. Its estimated gain is the time that could go: reference time x headroom, with headroom
1 - floor/time. The campaign's iterations, seconds and dollars are shared in proportion to the
gain; a problem already at its floor gets nothing and is reported as such.

On a CPU nothing is timed and there are no measured peaks: problems are ordered by the work
they must do (their roofline floor at nominal peaks, from counted FLOPs and bytes), headroom is
unknown and counted as full, so every problem gets budget in proportion to its work.
"""

from __future__ import annotations

from dataclasses import dataclass

from okgit.eval.roofline import floor_us
from okgit.eval.types import Reference

AT_FLOOR = 0.8  # a reference within 1/0.8 = 1.25x of its floor leaves nothing worth a search
# Nominal peaks for ordering untimed problems by their work (about an H100's fp32 rate and
# memory bandwidth): only the ratio of FLOPs to bytes matters for the order.
NOMINAL_RATE = 5.0e13
NOMINAL_PEAKS = {"copy_bandwidth": 3.0e12, "read_bandwidth": 3.0e12}


@dataclass(frozen=True)
class Screen:
    """What the pre-screen learned of one problem."""

    op: str
    timed: bool
    runtime_us: float | None  # the reference's median time; None where untimed
    floor_us: float | None  # the roofline floor (measured peaks where timed, nominal ones where not)
    flops: float | None
    min_bytes: float | None
    weight_us: float | None = None  # a measured share of a whole model's time, where one is known

    @property
    def headroom(self) -> float | None:
        """The fraction of the reference's time above its floor; None where it is not known."""
        if not self.timed or not self.runtime_us or not self.floor_us:
            return None
        return max(0.0, 1.0 - self.floor_us / self.runtime_us)

    @property
    def at_floor(self) -> bool:
        return self.headroom is not None and self.headroom <= 1.0 - AT_FLOOR

    @property
    def gain_us(self) -> float:
        """Estimated time a search could save (on a CPU: the work estimate, headroom taken as 1)."""
        if self.at_floor:
            return 0.0
        time_us = self.weight_us or (self.runtime_us if self.timed else self.floor_us)
        return (time_us or 0.0) * (self.headroom if self.headroom is not None else 1.0)


@dataclass(frozen=True)
class Allotment:
    screen: Screen
    iterations: int  # 0: no search (at the floor)
    time_s: float | None
    usd: float | None
    share: float  # of the campaign's estimated gain


def screen(op: str, reference: Reference, weight_us: float | None = None) -> Screen:
    prof = reference.profile
    flops = prof.flops if prof else None
    min_bytes = prof.min_bytes if prof else None
    floor = prof.floor_us if prof and reference.timed else None
    if floor is None and flops is not None and min_bytes is not None:
        floor = floor_us(flops, min_bytes, NOMINAL_PEAKS, NOMINAL_RATE) or None
    return Screen(op=op, timed=reference.timed, runtime_us=reference.runtime_us, floor_us=floor, flops=flops,
                  min_bytes=min_bytes, weight_us=weight_us)


def allot(screens: list[Screen], iterations: int, time_s: float | None, usd: float | None) -> list[Allotment]:
    """Problems in order of estimated gain, each with its part of the campaign's budgets.

    `iterations` is the campaign's total: every problem with headroom gets at least one, the
    rest goes by largest remainder in proportion to the gain. Seconds and dollars are split in
    the same proportion. A problem whose gain is unknown (no cost counted) gets an equal share.
    """
    ranked = sorted(screens, key=lambda s: -s.gain_us)
    live = [s for s in ranked if not s.at_floor]
    if not live:
        return [Allotment(s, 0, None, None, 0.0) for s in ranked]
    gains = [s.gain_us for s in live]
    if not any(gains):
        gains = [1.0] * len(live)
    else:  # a problem whose cost could not be counted still gets the smallest known share
        smallest = min(g for g in gains if g > 0)
        gains = [g if g > 0 else smallest for g in gains]
    total = sum(gains)
    shares = [g / total for g in gains]
    counts = _split(max(iterations, len(live)), shares)
    out = {s.op: Allotment(s, n, time_s * share if time_s else None, usd * share if usd is not None else None, share)
           for s, n, share in zip(live, counts, shares)}
    return [out.get(s.op) or Allotment(s, 0, None, None, 0.0) for s in ranked]


def _split(total: int, shares: list[float]) -> list[int]:
    """`total` whole units by the shares, each at least 1 (largest remainder)."""
    base = [1] * len(shares)
    rest = total - len(shares)
    exact = [rest * s for s in shares]
    floors = [int(x) for x in exact]
    left = rest - sum(floors)
    order = sorted(range(len(shares)), key=lambda i: -(exact[i] - floors[i]))
    for i in order[:left]:
        floors[i] += 1
    return [b + f for b, f in zip(base, floors)]
