"""ProfileData in the parent: from what a worker's torch.profiler recorded (okgit.eval.worker.profiler),
with the counters of a profiling pass merged in (okgit.eval.parent.ncu, okgit.eval.parent.proton),
and the bottleneck read from the best figures there are.

A kernel is the candidate's own ("custom") when its name is one the backend launched: a Triton
kernel's function name, or a `__global__` function of the candidate's CUDA sources. Everything
else (cuBLAS, cuDNN, ATen elementwise kernels) is library work.

Every figure names its tool in `sources`: "torch.profiler" (kernel times and launches), "occupancy
calculator" (theoretical occupancy from the launch), "roofline" (the problem's FLOPs and minimum
bytes against the device's measured peaks), "ncu" (hardware counters), "proton" (PC sampling).
"""

from __future__ import annotations

from typing import Any

from okgit.eval.types import TOP_KERNELS, Bottleneck, KernelTime, ProfileData, Stall

CPU_REASON = ("no GPU here: Triton ran under its interpreter, so nothing was timed or profiled "
              "(no kernel times, no hardware counters)")
BOUND = 0.6  # a unit busier than this share of its peak bounds the kernel (Nsight Compute's guidance)
LATENCY_GAP = 0.5  # kernels busy for less than this share of the call: launches and gaps dominate
LAUNCH_FIELDS = ("grid", "block", "registers", "shared_bytes", "occupancy_theoretical", "occupancy_limiter", "waves")
NCU_FIELDS = ("occupancy", "occupancy_theoretical", "occupancy_limiter", "dram_bytes", "bandwidth",
              "bandwidth_utilization", "compute_utilization", "l2_hit_rate", "registers", "shared_bytes", "waves",
              "grid", "block")


def profile_data(kernels: dict[str, dict[str, Any]], custom_names: set[str], *, launch_count: int | None,
                 flops: float | None, min_bytes: float | None, roofline: dict[str, Any] | None,
                 raw: dict[str, Any] | None = None) -> ProfileData:
    top = sorted((_kernel(name, v, custom_names) for name, v in kernels.items()), key=lambda k: -k.time_us)
    fields = dict(roofline or {})
    total = sum(k.time_us for k in top)
    custom = sum(k.time_us for k in top if k.custom)
    extra = {"kernel_time_us": total, "custom_kernel_time_us": custom} if top else {}
    prof = ProfileData(
        flops=flops, min_bytes=min_bytes, launch_count=launch_count, top_kernels=top[:TOP_KERNELS],
        raw={**extra, **(raw or {})}, **fields,
    )
    prof.sources.update({k: "roofline" for k in ("bottleneck_type", "roofline_position", "bandwidth_utilization",
                                                 "compute_utilization") if fields.get(k) is not None})
    if top:
        prof.sources["top_kernels"] = "torch.profiler"
    _launch_totals(prof)
    prof.roofline = roofline_sentence(prof)
    return prof


def _kernel(name: str, v: dict[str, Any], custom_names: set[str]) -> KernelTime:
    k = KernelTime(name=name, time_us=v["time_us"], calls=int(v["calls"]), custom=_is_custom(name, custom_names))
    for field in LAUNCH_FIELDS:
        if v.get(field) is not None:
            setattr(k, field, v[field])
            k.sources[field] = "occupancy calculator" if field.startswith(("occupancy", "waves")) else "torch.profiler"
    return k


def _launch_totals(prof: ProfileData) -> None:
    """The theoretical occupancy over the kernels (by time), and the limiter of the longest one."""
    known = [k for k in prof.top_kernels if k.occupancy_theoretical is not None]
    weight = sum(k.time_us for k in known)
    if known and weight > 0:
        prof.occupancy_theoretical = sum((k.occupancy_theoretical or 0.0) * k.time_us for k in known) / weight
        prof.occupancy_limiter = known[0].occupancy_limiter
        prof.sources.update(occupancy_theoretical=known[0].sources["occupancy_theoretical"],
                            occupancy_limiter=known[0].sources["occupancy_theoretical"])


def roofline_sentence(p: ProfileData) -> str:
    """What the roofline says of a measured time, in a sentence ("" without a floor)."""
    if not p.floor_us or p.roofline_position is None:
        return ""
    side = "compute" if p.bottleneck_type == "compute" else "memory"
    work = (f"{p.flops:.3g} FLOP at the fastest matmul rate the tolerance allows" if side == "compute" and p.flops
            else f"{p.min_bytes:.3g} B moved once at the measured bandwidth" if p.min_bytes else "the work")
    return f"{side}-bound: its floor is {p.floor_us:.4g} us ({work}); the call runs at {p.roofline_position:.0%} of it"


def with_counters(base: ProfileData, ncu_launches: list[dict[str, Any]] | None,
                  proton_kernels: dict[str, dict[str, Any]] | None) -> ProfileData:
    """`base` (an evaluation's profile) with a profiling pass's counters put into its kernels and
    totals; kernels ncu or Proton saw that torch.profiler did not are added."""
    prof = base.model_copy(deep=True)
    if ncu_launches:
        _merge_ncu(prof, ncu_launches)
        prof.tools.append("ncu")
    if proton_kernels:
        _merge_proton(prof, proton_kernels)
        prof.tools.append("proton")
    return prof


def _match(prof: ProfileData, name: str, add: bool = True) -> KernelTime | None:
    """The kernel of `prof` a tool names (tools spell names alike, or one holds the other's base
    name); where torch.profiler did not see it, a new entry (`add`) or None."""
    for k in prof.top_kernels:
        if k.name == name:
            return k
    base = name.split("(")[0].split("<")[0].split()[-1] if name.strip() else name
    for k in prof.top_kernels:
        if base and (base in k.name or k.name.split("(")[0] in name):
            return k
    if not add:
        return None
    k = KernelTime(name=name, time_us=0.0)
    prof.top_kernels.append(k)
    return k


def _merge_ncu(prof: ProfileData, launches: list[dict[str, Any]]) -> None:
    from okgit.eval.parent.ncu import counters

    per_kernel: dict[str, list[dict[str, Any]]] = {}
    for launch in launches:
        per_kernel.setdefault(launch["name"], []).append(counters(launch))
    weights: list[tuple[float, dict[str, Any]]] = []
    for name, runs in per_kernel.items():
        k, c = _match(prof, name), _combine(runs)
        assert k is not None  # added where torch.profiler did not see it
        if k.time_us == 0.0 and c["time_s"]:
            k.time_us, k.calls = c["time_s"] * 1e6, len(runs)
        for field in NCU_FIELDS:
            if c.get(field) is not None:
                setattr(k, field, c[field])
                k.sources[field] = "ncu"
        k.stalls = [Stall(reason=r, share=s) for r, s in c["stalls"][:5]]
        if k.stalls:
            k.sources["stalls"] = "ncu"
        k.bottleneck_type = kernel_bottleneck(c)
        k.sources["bottleneck_type"] = "ncu"
        weights.append((c["time_s"] or 0.0, c))
    _ncu_totals(prof, weights)
    prof.top_kernels.sort(key=lambda k: -k.time_us)


def _combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A kernel launched several times in the call: times and bytes add, the rest weighs by time."""
    if len(runs) == 1:
        return runs[0]
    times = [r["time_s"] or 0.0 for r in runs]
    total = sum(times) or 1.0
    out = dict(runs[max(range(len(runs)), key=lambda i: times[i])])
    out["time_s"] = sum(times)
    dram = [r["dram_bytes"] for r in runs if r["dram_bytes"] is not None]
    out["dram_bytes"] = sum(dram) if dram else None
    out["bandwidth"] = out["dram_bytes"] / out["time_s"] if out["dram_bytes"] and out["time_s"] else None
    for field in ("bandwidth_utilization", "memory_utilization", "compute_utilization", "occupancy", "l2_hit_rate"):
        known = [(t, r[field]) for t, r in zip(times, runs, strict=True) if r[field] is not None]
        out[field] = sum(t * v for t, v in known) / total if known else None
    out["stalls"] = _weighed_stalls([(t, r["stalls"]) for t, r in zip(times, runs, strict=True)])
    return out


def _weighed_stalls(parts: list[tuple[float, list[tuple[str, float]]]]) -> list[tuple[str, float]]:
    shares: dict[str, float] = {}
    total = sum(w for w, s in parts if s) or 1.0
    for w, stalls in parts:
        for reason, share in stalls:
            shares[reason] = shares.get(reason, 0.0) + w * share / total
    return sorted(shares.items(), key=lambda kv: -kv[1])


def kernel_bottleneck(c: dict[str, Any]) -> Bottleneck:
    """Memory- or compute-bound when its busiest unit runs above BOUND of its peak; latency-bound
    when neither does (warps wait on something other than throughput: too few of them, dependent
    loads, synchronization, launches)."""
    memory = max(c.get("bandwidth_utilization") or 0.0, c.get("memory_utilization") or 0.0)
    compute = c.get("compute_utilization") or 0.0
    if max(memory, compute) < BOUND:
        return "latency"
    return "memory" if memory >= compute else "compute"


def _ncu_totals(prof: ProfileData, weights: list[tuple[float, dict[str, Any]]]) -> None:
    total = sum(w for w, _ in weights)
    if total <= 0:
        return
    for field, into in (("bandwidth_utilization", "bandwidth_utilization"), ("compute_utilization", "compute_utilization"),
                        ("occupancy", "occupancy"), ("occupancy_theoretical", "occupancy_theoretical"),
                        ("l2_hit_rate", "cache_hit_rate")):
        known = [(w, c[field]) for w, c in weights if c.get(field) is not None]
        if known:
            setattr(prof, into, sum(w * v for w, v in known) / sum(w for w, _ in known))
            prof.sources[into] = "ncu"
    dram = [c["dram_bytes"] for _, c in weights if c.get("dram_bytes") is not None]
    if dram:
        prof.bandwidth = sum(dram) / total
        prof.sources["bandwidth"] = "ncu"
    longest = max(weights, key=lambda wc: wc[0])[1]
    if longest.get("occupancy_limiter"):
        prof.occupancy_limiter = longest["occupancy_limiter"]
        prof.sources["occupancy_limiter"] = "ncu"
    stalls = _weighed_stalls([(w, c["stalls"]) for w, c in weights])
    if stalls:
        prof.stalls = [Stall(reason=r, share=s) for r, s in stalls[:5]]
        prof.sources["stalls"] = "ncu"
    by_kind: dict[Bottleneck, float] = {}
    for w, c in weights:
        kind = kernel_bottleneck(c)
        by_kind[kind] = by_kind.get(kind, 0.0) + w
    kind = max(by_kind, key=lambda k: by_kind[k])
    busiest = max(longest.get("bandwidth_utilization") or 0.0, longest.get("memory_utilization") or 0.0)
    prof.bottleneck_type = kind
    prof.sources["bottleneck_type"] = "ncu"
    prof.bottleneck_why = (f"ncu: {by_kind[kind] / total:.0%} of the kernel time is {kind}-bound; the longest kernel's "
                           f"memory units at {busiest:.0%} and SMs at {longest.get('compute_utilization') or 0.0:.0%} "
                           "of their peaks")


def _merge_proton(prof: ProfileData, kernels: dict[str, dict[str, Any]]) -> None:
    """Stall shares (and the source line behind each) from PC sampling, where ncu gave none."""
    parts = []
    for name, v in kernels.items():
        k = _match(prof, name, add=False)  # a library kernel's name may be mangled here: it weighs in the totals only
        parts.append((v["samples"], v))  # samples fall in proportion to a kernel's time
        if k is None:
            continue
        stalls = [Stall(reason=r, share=s, line=v["lines"].get(r)) for r, s in v["stalls"][:5]]
        if not k.stalls or k.sources.get("stalls") == "proton":
            k.stalls, k.sources["stalls"] = stalls, "proton"
        else:  # ncu's shares stay; Proton adds where in the source they fall
            for s in k.stalls:
                s.line = s.line or v["lines"].get(s.reason)
        if any(s.line for s in k.stalls):
            k.sources["stall_lines"] = "proton"
    if not prof.stalls or prof.sources.get("stalls") == "proton":  # over the kernels: each line is its kernel's
        weighed = _weighed_stalls([(w, v["stalls"]) for w, v in parts])
        prof.stalls = [Stall(reason=r, share=s) for r, s in weighed[:5]]
        if prof.stalls:
            prof.sources["stalls"] = "proton"


def classify(prof: ProfileData, runtime_us: float | None) -> None:
    """Without counters, the roofline's bottleneck stands, but a call whose kernels are busy for
    less than LATENCY_GAP of its time is latency-bound (launches and the gaps between them)."""
    if prof.sources.get("bottleneck_type") == "ncu":
        return
    busy = prof.raw.get("kernel_time_us")
    if runtime_us and busy and busy < LATENCY_GAP * runtime_us:
        prof.bottleneck_type = "latency"
        prof.sources["bottleneck_type"] = "torch.profiler"
        prof.bottleneck_why = (f"torch.profiler: the kernels run {busy:.4g} us of the call's {runtime_us:.4g} us "
                               f"over {prof.launch_count or len(prof.top_kernels)} launches: the gaps dominate")


def _is_custom(kernel: str, names: set[str]) -> bool:
    # Triton names its kernels after the function (with suffixes); CUDA names may be mangled.
    return any(n and n in kernel for n in names)
