"""The theoretical occupancy of a kernel launch and what limits it, as CUDA's occupancy calculator
(cuda_occupancy.h) works it out: from the registers per thread, the shared memory per block and
the block size that CUPTI's launch record holds, and the SM's limits. Pure: the worker calls it
with its device's properties on torch.profiler's launch records (okgit.eval.worker.profiler).

An SM holds as many blocks as the tightest of four limits allows: its registers (allocated per
warp in units of 256, split over 4 sub-partitions), its shared memory (allocated per block in
units of 128 bytes, plus 1 KiB the system reserves per block from compute capability 8.0 on), its
warp slots, and its block slots. Theoretical occupancy is the warps those blocks bring over the
SM's warp slots; achieved occupancy (what ncu measures) is lower where blocks end unevenly or
too few are launched to fill every SM (`waves` below 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# compute capability (major, minor) -> (warp slots, block slots) per SM (CUDA's occupancy tables);
# the largest earlier entry serves a newer device
SM_SLOTS: dict[tuple[int, int], tuple[int, int]] = {
    (7, 0): (64, 32), (7, 5): (32, 16), (8, 0): (64, 32), (8, 6): (48, 16), (8, 7): (48, 16), (8, 9): (48, 24),
    (9, 0): (64, 32), (10, 0): (64, 32), (12, 0): (48, 32),
}
REGISTER_UNIT = 256  # registers are allocated per warp in multiples of this
SUB_PARTITIONS = 4  # an SM's register file is split between its 4 schedulers
SHARED_UNIT = 128  # bytes: shared memory is allocated per block in multiples of this
LIMITERS = ("registers", "shared_memory", "warps", "blocks")  # the order ties are named in


@dataclass(frozen=True)
class SmLimits:
    """What one SM of a device holds."""

    warps: int
    blocks: int
    registers: int
    shared_bytes: int  # the most shared memory a carve-out gives the SM
    reserved_shared_bytes: int  # per block, by the system
    sms: int

    @classmethod
    def of(cls, major: int, minor: int, *, registers: int, shared_bytes: int, sms: int,
           threads: int | None = None) -> SmLimits:
        known = [cc for cc in SM_SLOTS if cc <= (major, minor)]
        warps, blocks = SM_SLOTS[max(known)] if known else (64, 32)
        if threads:  # the device's own figure, where it says
            warps = threads // 32
        return cls(warps=warps, blocks=blocks, registers=registers, shared_bytes=shared_bytes,
                   reserved_shared_bytes=1024 if major >= 8 else 0, sms=sms)

    @classmethod
    def of_device(cls, props: Any) -> SmLimits:
        """From torch.cuda.get_device_properties(...)."""
        return cls.of(props.major, props.minor, registers=int(getattr(props, "regs_per_multiprocessor", 65536)),
                      shared_bytes=int(getattr(props, "shared_memory_per_multiprocessor", 0)),
                      sms=int(props.multi_processor_count),
                      threads=int(getattr(props, "max_threads_per_multi_processor", 0)) or None)


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    theoretical: float  # warps held / warp slots, in [0, 1]
    limiter: str  # one of LIMITERS
    waves: float | None  # blocks launched / (blocks_per_sm x SMs)


def occupancy(limits: SmLimits, threads_per_block: int, registers_per_thread: int, shared_bytes: int,
              blocks: int | None = None) -> Occupancy | None:
    """None for a launch no SM can hold (a block above the SM's limits) or an empty block."""
    if threads_per_block <= 0:
        return None
    warps = -(-threads_per_block // 32)
    by: dict[str, int] = {"warps": limits.warps // warps, "blocks": limits.blocks}
    if registers_per_thread > 0:
        per_warp = -(-registers_per_thread * 32 // REGISTER_UNIT) * REGISTER_UNIT
        warps_by_registers = (limits.registers // SUB_PARTITIONS // per_warp) * SUB_PARTITIONS
        by["registers"] = warps_by_registers // warps
    if shared_bytes > 0 and limits.shared_bytes > 0:
        per_block = -(-(shared_bytes + limits.reserved_shared_bytes) // SHARED_UNIT) * SHARED_UNIT
        by["shared_memory"] = limits.shared_bytes // per_block
    held = min(by.values())
    if held <= 0:
        return None
    limiter = next(name for name in LIMITERS if by.get(name) == held)
    waves = blocks / (held * limits.sms) if blocks and limits.sms else None
    return Occupancy(blocks_per_sm=held, theoretical=min(1.0, held * warps / limits.warps), limiter=limiter,
                     waves=waves)
