"""ProfileData as text, with units and the tool behind each figure: the critic's prompt, report.md,
`okgit show`, the progress lines and the live view all read a profile through these, so they say
the same thing the same way.
"""

from __future__ import annotations

from typing import Any

from okgit.eval.types import KernelTime, ProfileData, Stall

# what a stall reason means, for a reader (a model, a person) who does not know Nsight's names
STALL_MEANING = {
    "long_scoreboard": "waiting for global or local memory (an L1TEX load)",
    "short_scoreboard": "waiting for shared memory or a special math result (MIO)",
    "lg_throttle": "the queue of global/local memory instructions is full",
    "mio_throttle": "the queue of shared-memory and special instructions is full",
    "math_pipe_throttle": "the math unit it needs is busy",
    "wait": "a fixed latency between dependent instructions",
    "barrier": "waiting at __syncthreads / tl barrier for the other warps",
    "membar": "waiting on a memory fence",
    "not_selected": "ready, but another warp issued (plenty of warps)",
    "no_instruction": "instruction cache miss or a branch target",
    "dispatch_stall": "the dispatcher could not issue",
    "branch_resolving": "waiting for a branch target",
    "drain": "draining memory stores at exit",
    "tex_throttle": "the texture unit's queue is full",
    "imc_miss": "constant cache miss",
}


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%" if value >= 0.1 else f"{value * 100:.1f}%"


def _tool(p: ProfileData | KernelTime, *fields: str) -> str:
    tools = dict.fromkeys(p.sources[f] for f in fields if f in p.sources)
    return f" [{', '.join(tools)}]" if tools else ""


def as_profile(p: ProfileData | dict[str, Any] | None) -> ProfileData | None:
    """A profile as the journal holds it (a dict) or as the evaluator returns it."""
    if p is None or isinstance(p, ProfileData):
        return p
    try:
        return ProfileData.model_validate(p)
    except ValueError:
        return None


def stalls_text(stalls: list[Stall], n: int = 3) -> str:
    return ", ".join(f"{s.reason} {_pct(s.share)}" + (f" ({s.line})" if s.line else "") for s in stalls[:n])


def occupancy_text(p: ProfileData | KernelTime) -> str:
    parts = []
    if p.occupancy is not None:
        parts.append(f"achieved {_pct(p.occupancy)}")
    if p.occupancy_theoretical is not None:
        parts.append(f"theoretical {_pct(p.occupancy_theoretical)}")
    text = ", ".join(parts) + (" of the SM's warp slots" if parts else "")
    if p.occupancy_limiter:
        text += f", limited by {p.occupancy_limiter.replace('_', ' ')}"
    return text


def bandwidth_text(p: ProfileData | KernelTime) -> str:
    if p.bandwidth is not None:
        return f"{_si(p.bandwidth, 'B/s')} from DRAM, {_pct(p.bandwidth_utilization)} of its peak"
    if p.bandwidth_utilization is not None:  # the roofline's: minimum bytes over the time
        return f"at least {_pct(p.bandwidth_utilization)} of the measured bandwidth (minimum bytes / time)"
    return ""


def profile_lines(p: ProfileData | dict[str, Any] | None) -> list[str]:
    """Every figure of a profile, one per line, with its unit and its tool in brackets."""
    prof = as_profile(p)
    if prof is None:
        return ["not measured on this device"]
    lines = [f"bottleneck: {prof.bottleneck_type}" + (f" ({prof.bottleneck_why})" if prof.bottleneck_why else "")
             + _tool(prof, "bottleneck_type")]
    if prof.roofline:
        lines.append(f"roofline: {prof.roofline}")
    elif prof.roofline_position is not None:
        floor = f" of {prof.floor_us:.4g} us" if prof.floor_us else ""
        lines.append(f"roofline: the call runs at {_pct(prof.roofline_position)} of its floor{floor}")
    if prof.flops or prof.min_bytes:
        lines.append(f"work: {prof.flops or 0:.3g} FLOP in matmuls/convolutions, {prof.min_bytes or 0:.3g} B at least moved")
    if bandwidth_text(prof):
        lines.append(f"memory: {bandwidth_text(prof)}" + _tool(prof, "bandwidth", "bandwidth_utilization"))
    if prof.compute_utilization is not None:
        what = "SM throughput" if prof.sources.get("compute_utilization") == "ncu" else "matmul rate (FLOPs / time)"
        lines.append(f"compute: {what} at {_pct(prof.compute_utilization)} of its peak" + _tool(prof, "compute_utilization"))
    if occupancy_text(prof):
        lines.append(f"occupancy: {occupancy_text(prof)}"
                     + _tool(prof, "occupancy", "occupancy_theoretical", "occupancy_limiter"))
    if prof.cache_hit_rate is not None:
        lines.append(f"L2 hit rate: {_pct(prof.cache_hit_rate)}" + _tool(prof, "cache_hit_rate"))
    if prof.stalls:
        lines.append(f"warp stalls, share of stalled time: {stalls_text(prof.stalls, 5)}" + _tool(prof, "stalls"))
        lines += [f"  {s.reason}: {STALL_MEANING[s.reason]}" for s in prof.stalls[:3] if s.reason in STALL_MEANING]
    if prof.launch_count is not None:
        lines.append(f"launches of its own kernels per call: {prof.launch_count}")
    lines += [f"kernel {kernel_text(k)}" for k in prof.top_kernels[:5]]
    lines += [f"not measured by {tool}: {why}" for tool, why in prof.not_run.items()]
    return lines


def kernel_text(k: KernelTime) -> str:
    parts = [f"{k.name[:90]} ({'custom' if k.custom else 'library'}): {k.time_us:.2f} us x{k.calls}"]
    if k.grid and k.block:
        launch = f"grid {'x'.join(map(str, k.grid))}, block {'x'.join(map(str, k.block))}"
        if k.registers is not None:
            launch += f", {k.registers} registers/thread"
        if k.shared_bytes is not None:
            launch += f", {k.shared_bytes} B shared/block"
        parts.append(launch)
    if occupancy_text(k):
        parts.append(f"occupancy {occupancy_text(k)}")
    if k.bandwidth is not None:
        parts.append(bandwidth_text(k))
    if k.compute_utilization is not None:
        parts.append(f"SM throughput {_pct(k.compute_utilization)}")
    if k.l2_hit_rate is not None:
        parts.append(f"L2 hits {_pct(k.l2_hit_rate)}")
    if k.stalls:
        parts.append(f"stalls {stalls_text(k.stalls)}")
    if k.bottleneck_type:
        parts.append(f"{k.bottleneck_type}-bound")
    tools = dict.fromkeys(t for f, t in k.sources.items() if f != "top_kernels")
    return "; ".join(parts) + (f" [{', '.join(tools)}]" if tools else "")


def summary(p: ProfileData | dict[str, Any] | None) -> str:
    """One line: the bottleneck and the figures that say it."""
    prof = as_profile(p)
    if prof is None:
        return "no profile"
    parts = [f"{prof.bottleneck_type}-bound"]
    if prof.roofline_position is not None:
        parts.append(f"{_pct(prof.roofline_position)} of the roofline")
    if prof.bandwidth is not None:
        parts.append(f"DRAM {_si(prof.bandwidth, 'B/s')} ({_pct(prof.bandwidth_utilization)})")
    if prof.sources.get("compute_utilization") == "ncu":
        parts.append(f"SM {_pct(prof.compute_utilization)}")
    if prof.occupancy is not None or prof.occupancy_theoretical is not None:
        parts.append(f"occupancy {_pct(prof.occupancy)}/{_pct(prof.occupancy_theoretical)}"
                     + (f" ({prof.occupancy_limiter.replace('_', ' ')})" if prof.occupancy_limiter else ""))
    if prof.cache_hit_rate is not None:
        parts.append(f"L2 {_pct(prof.cache_hit_rate)}")
    if prof.stalls:
        parts.append(f"stalls {stalls_text(prof.stalls, 2)}")
    return ", ".join(parts)


# figure -> how to read it off a profile, for a table of the winner beside the reference
_ROWS: list[tuple[str, Any, tuple[str, ...]]] = [
    # "unknown" says nothing (a CPU's profile, a kernel without counters): no row of it
    ("bottleneck", lambda p: p.bottleneck_type if p.bottleneck_type != "unknown" else None, ("bottleneck_type",)),
    ("roofline position", lambda p: _pct(p.roofline_position) if p.roofline_position is not None else None,
     ("roofline_position",)),
    ("DRAM bandwidth", lambda p: f"{_si(p.bandwidth, 'B/s')} ({_pct(p.bandwidth_utilization)} of peak)"
     if p.bandwidth is not None else None, ("bandwidth",)),
    ("compute (SM) throughput", lambda p: _pct(p.compute_utilization) if p.sources.get("compute_utilization") == "ncu"
     else None, ("compute_utilization",)),
    ("occupancy, achieved / theoretical", lambda p: f"{_pct(p.occupancy)} / {_pct(p.occupancy_theoretical)}"
     if p.occupancy is not None or p.occupancy_theoretical is not None else None,
     ("occupancy", "occupancy_theoretical")),
    ("occupancy limiter", lambda p: p.occupancy_limiter.replace("_", " ") if p.occupancy_limiter else None,
     ("occupancy_limiter",)),
    ("L2 hit rate", lambda p: _pct(p.cache_hit_rate) if p.cache_hit_rate is not None else None, ("cache_hit_rate",)),
    ("top warp stalls", lambda p: stalls_text(p.stalls) or None, ("stalls",)),
    ("kernels, launches per call", lambda p: f"{len(p.top_kernels)}, {p.launch_count}" if p.top_kernels else None,
     ("top_kernels",)),
]


def side_by_side(winner: ProfileData | dict[str, Any] | None,
                 reference: ProfileData | dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """(figure, the winner's, the reference's) for every figure either has, each with its tool."""
    profiles = [as_profile(winner), as_profile(reference)]
    rows = []
    for label, read, fields in _ROWS:
        cells = []
        for p in profiles:
            value = read(p) if p is not None else None
            cells.append("-" if value is None else f"{value}{_tool(p, *fields)}" if p else "-")
        if any(c != "-" for c in cells):
            rows.append((label, cells[0], cells[1]))
    return rows
