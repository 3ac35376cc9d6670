"""Parametric autotuning of the Triton kernels in the current best file (the user's own too).

The source is parsed, not run: `@triton.jit` kernels and their `tl.constexpr` parameters,
launch sites `kernel[grid](..., BLOCK=128, num_warps=2)`, and module constants whose names
say they are launch settings (`*BLOCK*`, `*TILE*`, `*CHUNK*`, `*LANES*`, `*WARPS*`, `*STAGES*`,
`*GROUP*`, `*PROGRAMS*`, as the template proposer writes them; `NAME_MAX` beside one is its
bound, not a setting: the template's launcher caps NAME there); never a constant the problem
is made of, nor anything in a file without a Triton kernel (okgit.search.proposers.sites).
Each variant changes one setting and is an ordinary complete file, so the evaluator times
exactly one configuration per file (no triton.autotune inside proposals: its own timing would
hide in the first call).

A split-precision GEMM's `*_PRECISION` (okgit.lower.kinds.gemm) is a setting too: its
alternatives in the order measured fastest at fp32 accuracy, each judged by the evaluator's
precision rule like any candidate (the only way to know whether bf16x3 passes on a problem). So
are how its tiles write C (`*_STORE`: TMA, streamed, plain) and whether its grid is persistent
(`*_PERSISTENT`, a switch: the other value), the levers of a GEMM bound by writing its output.

A kernel that did not run at the timed shape (a seed's dynamic-shape kernel beside its static
one, which runs there) has nothing to tune: where the best's profile lists every kernel the timed
call launched, the other kernels' settings are left out, and the journal names them.

Order: a GEMM's precision first, then the nearest values (a factor of 2 before 4), settings
interleaved, so the cheap, likely wins come first; blocks above the padded problem size and
GEMM tiles that cannot fit in shared memory (as the GEMM kind counts it) are pruned, and a
best already near its roofline floor, and no farther from it than the reference, is left alone. When a variant becomes the new best, the
neighbourhood of that one is explored next (hill climb). When a literal block size also
appears in the launch's grid expression (`cdiv(n, 1024)`), both change together so the grid
stays derived from the block.

Which settings come first follows what bounds the kernel, as the base file's profile says
(ProfileData.bottleneck_type: from Nsight Compute's counters where the profiling pass ran them,
else the roofline and torch.profiler's kernel times; okgit.search.profiling); where a library's
kernels share the time, what bounds the candidate's own kernels alone, as each kernel's counters
say (no launch setting changes a cuDNN convolution beside a Triton epilogue). Memory-bound: the
block shape, the loads in flight (stages) and the vector width (warps per block) first; compute-
bound: the tile shape, stages, warps, the GEMM's group; latency-bound: the persistent program count
and the block (fewer, larger programs), since fusion and fewer launches, the real levers, are not
launch settings. A GEMM's precision comes before them whatever bounds the kernel. Among the
settings the focus names, at one distance from their values, those of the kernels that take more
of the time come first (on KernelBench L2/63 and L2/59 on an H100 the unfocused phase reached
2.30x and 2.39x with the GEMM's BLOCK_K third, while a focus that put warps and stages first, and
its operand split's and reduction's settings before the GEMM's tile, ended at 1.83x and 1.85x in
eight candidates without trying it: bench/profile_pass.py --autotune, 2026-12-07). The settings the
bottleneck does not name follow, in the order they have without a profile: the focus orders the
variants, never drops one (on KernelBench L2/63 on an H100 the phase that left them out ended at
1.94x, the one without a focus at 2.31x: bench/profile_pass.py --autotune). Where the occupancy
of a kernel bound by memory or latency is held low, smaller values come first for what sizes the
limiting resource: by shared memory, the blocks and the stages; by registers, the blocks but a
reduction's K tile (`_shrinks`). Not where it is compute-bound (on L2/63 that rule put the GEMM's
BLOCK_K=16 where 64 won: a tensor-core GEMM's tiles hold its occupancy low by design). The
journal says which settings come first and why, and which follow, each time the bottleneck it
tunes for changes. The settings of a kernel that takes under MINOR_SHARE of the timed call's
kernel time come last whatever it is bound by: however well tuned, it can save no more than its
share (on KernelBench L2/63 the GEMM's operand split, a pass over the operands beside the
product, had its warps among the first variants of a compute-bound focus).

Where nothing is timed (a CPU, Triton's interpreter) a launch setting cannot change the
result, only the speed nobody measures there: the phase proposes nothing and says so once in
the journal, leaving the iterations to proposers whose candidates can still differ.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

from okgit.eval.types import TOP_KERNELS, ProfileData
from okgit.lower.graph import Unsupported
from okgit.lower.kinds import gemm
from okgit.lower.trace import input_extent
from okgit.search.proposers.sites import CHOICES, PATHS, Site, apply, constants, find_sites
from okgit.search.types import Context, Proposal, propose_several

WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
GROUPS = (1, 4, 8, 16)
MIN_BLOCK = 16
SMALL_TILE = re.compile(r"_(ROWS|LANES)$")  # a count of rows or lanes in a tile (a windowed kind's): down to 1
REDUCTION_TILE = re.compile(r"(^|_)K$")  # a GEMM's or a convolution's tile along the sum (BLOCK_K)
MAX_VARIANTS = 24  # per parent file
ROOFLINE_DONE = 0.9  # a best at >= 90% of its roofline floor, and nearer than the reference, has nothing left to tune
# bottleneck -> (the controls to vary first, in order; what they are, for the journal)
FOCUS: dict[str, tuple[tuple[str, ...], str]] = {
    "memory": (("path", "store", "switch", "block", "stages", "warps"), "a kernel's other path where it has one (a "
               "direct convolution rolled or not; a GEMM's stores of C and its persistent grid), the block shape, the "
               "loads in flight (stages) and the vector width (warps)"),
    "compute": (("block", "stages", "warps", "group", "switch"), "the tile shape, the pipeline stages, the warps, the "
                "GEMM's group and its persistent grid"),
    "latency": (("programs", "block"), "the persistent program count and the block (fewer, larger programs), since "
                "fusion and fewer launches, the levers there, are not launch settings"),
}
LOW_OCCUPANCY = 0.5  # held below this by registers or shared memory: what sizes that resource shrinks first (_shrinks)
MINOR_SHARE = 0.1  # a kernel under this share of the kernel time: its settings last


@dataclass(frozen=True)
class Focus:
    """What the bottleneck says to vary first (okgit.eval.types.ProfileData.bottleneck_type), and
    which kernels take too little of the time to be tuned before the others."""

    bottleneck: str
    controls: tuple[str, ...]
    shrink: str | None  # what holds the occupancy down where it counts (registers, shared_memory), or None
    why: str
    minor: frozenset[str] = frozenset()  # kernels under MINOR_SHARE of the profile's kernel time
    shares: tuple[tuple[str, float], ...] = ()  # (kernel, its share of the profile's kernel time)

    @classmethod
    def of(cls, profile: ProfileData | None) -> Focus | None:
        if profile is None:
            return None
        bound = _own_bound(profile) or _Bound(profile.bottleneck_type, profile.occupancy_limiter,
                                              profile.occupancy_theoretical, profile.bottleneck_why
                                              or profile.sources.get("bottleneck_type", "the roofline"))
        if bound.kind not in FOCUS:
            return None
        controls, what = FOCUS[bound.kind]
        # occupancy hides the latency of a kernel bound by memory or latency; a compute-bound one
        # keeps its math busy at low occupancy (a tensor-core GEMM's large tiles are what hold it low)
        low = (bound.kind != "compute" and bound.limiter in ("registers", "shared_memory")
               and (bound.theoretical or 1.0) < LOW_OCCUPANCY)
        shrink = bound.limiter if low else None
        why = f"{bound.kind}-bound ({bound.how}): first {what}"
        if shrink == "registers":
            why += (f"; registers hold the occupancy to {bound.theoretical:.0%}, so smaller blocks first "
                    "(a reduction's K tile and the stages as they come: they do not size a program's registers)")
        elif shrink == "shared_memory":
            why += (f"; shared memory holds the occupancy to {bound.theoretical:.0%}, so smaller blocks "
                    "and fewer stages first")
        total = sum(k.time_us for k in profile.top_kernels)
        shares = {k.name: k.time_us / total for k in profile.top_kernels} if total > 0 else {}
        minor = frozenset(name for name, share in shares.items() if share < MINOR_SHARE)
        if minor:
            why += "; last, the settings of " + ", ".join(f"{name} ({shares[name]:.0%} of the kernel time)"
                                                          for name in sorted(minor))
        return cls(bound.kind, controls, shrink, why, minor, tuple(sorted(shares.items())))

    def place(self, site: Site) -> int | None:
        """Where the site's variants go among the first (a GEMM's precision before all), or None:
        they follow."""
        if site.control == "precision":
            return -1
        return self.controls.index(site.control) if site.control in self.controls else None

    def is_minor(self, site: Site) -> bool:
        """Whether every kernel the site sets takes under MINOR_SHARE of the time (a site no
        kernel is known to read is not)."""
        kernels = _kernels(site)
        return bool(kernels) and kernels <= self.minor

    def weight(self, site: Site) -> float:
        """How much of the time the site's kernels take (the largest share among them; 0 where the
        profile names none of them), a GEMM's precision above all."""
        if site.control == "precision":
            return 2.0
        shares = dict(self.shares)
        return max((shares.get(k, 0.0) for k in _kernels(site)), default=0.0)


@dataclass(frozen=True)
class _Bound:
    kind: str
    limiter: str | None
    theoretical: float | None
    how: str


def _own_bound(profile: ProfileData) -> _Bound | None:
    """What bounds the candidate's own kernels, where the pass read each kernel's counters and a
    library's kernels take part of the time: no launch setting changes a cuDNN or cuBLAS kernel, so
    its bottleneck says nothing of how the Triton kernels beside it should be launched (on
    KernelBench L2/71, H200, 81% of the kernel time compute-bound, the convolution's, set a compute
    focus for the one-pass Triton epilogue beside it). None where every kernel read is the
    candidate's own, or none is."""
    read = [k for k in profile.top_kernels if k.bottleneck_type in FOCUS]
    own = [k for k in read if k.custom]
    if not own or len(own) == len(read):
        return None
    by_kind: dict[str, float] = {}
    for k in own:
        by_kind[str(k.bottleneck_type)] = by_kind.get(str(k.bottleneck_type), 0.0) + k.time_us
    kind = max(by_kind, key=lambda b: by_kind[b])
    own_us, library_us = sum(k.time_us for k in own), sum(k.time_us for k in read if not k.custom)
    longest = max(own, key=lambda k: k.time_us)
    tool = longest.sources.get("bottleneck_type", "the profile")
    how = (f"{tool}: {by_kind[kind] / own_us:.0%} of its own kernels' time is {kind}-bound; the library kernels' "
           f"{library_us / (own_us + library_us):.0%} of the kernel time left aside, no setting here changes them")
    return _Bound(kind, longest.occupancy_limiter, longest.occupancy_theoretical, how)


def _kernels(site: Site) -> frozenset[str]:
    return frozenset({site.kernel}) if site.kernel else site.read_by


def _candidates(site: Site, cap_numel: int, cap_dim: int, shrink: str | None = None) -> list:
    v = site.value
    if isinstance(v, str):  # a GEMM's precision or store: the others, in their order
        return [p for control, values in CHOICES.values() if control == site.control for p in values if p != v]
    if site.control == "switch":
        return [1 - v] if v in (0, 1) else []
    pool: tuple[float, ...]
    if site.control == "warps":
        pool = WARPS
    elif site.control == "stages":
        pool = STAGES
    elif site.control == "group":
        pool = GROUPS
    elif site.control == "programs":
        pool = tuple(v * f for f in (0.25, 0.5, 2, 4) if 32 <= v * f <= 4096)
    elif site.control == "path":  # the other path first (0 turns it off), then the size on this one
        return [0, v * 2] if v else [PATHS[next(s for s in PATHS if site.name.upper().endswith(s))]]
    else:
        if v & (v - 1):  # not a power of two: not ours to move
            return []
        # a block along one dim (GEMM tiles, a row's chunk, the column layout's J and R) needs no more than the largest dim
        tile_dim = re.search(r"(^|_)(M|N|K|J|R|N_MAX|CHUNK)$", site.name.split(".")[-1].upper())
        cap = _pow2_ceil(cap_dim if tile_dim else cap_numel)
        low = 1 if SMALL_TILE.search(site.name.upper()) else MIN_BLOCK
        pool = tuple(int(v * f) for f in (0.5, 2, 0.25, 4) if low <= v * f <= max(cap, MIN_BLOCK))
    others = [int(p) for p in pool if int(p) != v and (site.most is None or p <= site.most)]
    # nearest first; on a tie the larger (realistic GPU sizes favour bigger tiles), unless registers
    # or shared memory hold the occupancy down
    smaller = _shrinks(site, shrink)
    return sorted(others, key=lambda p: (max(p / v, v / p), p if smaller else -p))


def _shrinks(site: Site, limiter: str | None) -> bool:
    """Whether the site's smaller values come first where `limiter` holds the occupancy down: every
    block and the stages for shared memory (each stage holds a copy of the tiles); for registers the
    blocks but a reduction's K tile, which sizes no accumulator (on KernelBench L2/63 and L2/59 on
    an H100 a GEMM's BLOCK_K=16 went first and lost, where 64 won by 1.2x)."""
    if limiter == "shared_memory":
        return site.control in ("block", "stages")
    if limiter == "registers":
        return site.control == "block" and not REDUCTION_TILE.search(site.name.split(".")[-1].upper())
    return False


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _fits(constants: dict[str, int | str], changed: Site, value: int | str) -> bool:
    """GEMM tiles (a group's module constants BLOCK_M, BLOCK_N, BLOCK_K and their neighbours) must
    fit in shared memory as the GEMM kind counts it (okgit.lower.kinds.gemm.shared_bytes)."""
    prefix = re.match(r"(.*?)_?(BLOCK_[MNK]|NUM_STAGES|PRECISION|PERSISTENT|STORE)$", changed.name)
    if prefix is None or "." in changed.name:
        return True
    start = f"{prefix[1]}_" if prefix[1] else ""
    group = {name[len(start):]: v for name, v in constants.items() if name.startswith(start)}
    group[prefix[2]] = value
    if not all(isinstance(group.get(f"BLOCK_{d}"), int) for d in "MNK"):
        return True
    return gemm.shared_bytes(group) <= gemm.SHARED_LIMIT


def variants(source: str, cap_numel: int, cap_dim: int, focus: Focus | None = None,
             sites: list[Site] | None = None) -> list[tuple[Site, int | str]]:
    """One-setting changes of source, at most MAX_VARIANTS: nearest first, settings interleaved,
    a GEMM's precision before its launch settings (between precisions the H200 measured the largest
    differences). A focus reorders the same variants: the precision and the controls it names
    first, in its order, then the others as they come without it. `sites`: those to vary, where
    the caller found them (default: every site of the source). The settings of the kernels the
    focus calls minor come after all the others."""
    tree = ast.parse(source)
    # a GEMM's precision and a kernel's path before its launch settings: they change the kernel most
    found = sorted(find_sites(source) if sites is None else sites,
                   key=lambda s: (s.control != "precision", s.control != "path"))
    known = {name: node.value for name, node in constants(tree) if isinstance(node.value, (int, str))}

    def values(site: Site, shrink: str | None) -> list[int | str]:
        return [v for v in _candidates(site, cap_numel, cap_dim, shrink) if _fits(known, site, v)]

    per_site = [values(s, None) for s in found]
    # (rank, site, value): every setting's nearest value, then every setting's next one, ...
    out = sorted(((rank, i, v) for i, vs in enumerate(per_site) for rank, v in enumerate(vs)),
                 key=lambda x: (x[0], x[1]))[:MAX_VARIANTS]
    if focus is not None:  # the same variants (cut above, as without a focus), what the bottleneck names first
        places = [focus.place(s) for s in found]
        minor = [focus.is_minor(s) for s in found]
        # among the focus's settings at one distance, those of the kernels with more of the time first
        weights = [focus.weight(s) if place is not None else 0.0 for s, place in zip(found, places, strict=True)]
        ranks = [values(s, focus.shrink) for s in found] if focus.shrink else per_site
        out.sort(key=lambda x: (minor[x[1]], places[x[1]] is None, ranks[x[1]].index(x[2]), -weights[x[1]],
                                places[x[1]] or 0, x[1]))
    return [(found[i], v) for _, i, v in out]


def launched_kernels(profile: ProfileData | None) -> frozenset[str] | None:
    """The kernels the timed call launched, by name (its profile's list, where that is whole:
    shorter than the most a profile lists), or None where that is not known."""
    if profile is None or not profile.top_kernels or len(profile.top_kernels) >= TOP_KERNELS:
        return None
    return frozenset(k.name for k in profile.top_kernels)


def ran_only(sites: list[Site], launched: frozenset[str] | None) -> list[Site]:
    """The sites that can change the timed call: a kernel's own settings only where it ran there
    (on KernelBench L1/24 the seed's dynamic-shape kernel, which runs at other shapes only, took 2
    of 8 autotune evaluations on an H100). Where no kernel of the file matches a launched name,
    the names are not the file's (nothing is dropped)."""
    if launched is None or not any(s.kernel in launched for s in sites):
        return sites
    return [s for s in sites if not s.kernel or s.kernel in launched]


def _key(source: str) -> str:
    return hashlib.sha256(source.strip().encode()).hexdigest()[:16]


class AutotuneProposer:
    """Variants of the best file's launch settings, one setting at a time, around each new best."""

    name = "autotune"

    def __init__(self) -> None:
        self._queue: list[tuple[str, str | None, Site, int | str]] = []
        self._bases: set[str] = set()
        self._proposed: set[str] = set()
        self._extent: tuple[int, int] | None = None
        self._untimed_noted = False
        self._focus_noted: str | None = None

    def propose(self, ctx: Context) -> Proposal | None:
        if not ctx.reference.timed:
            if not self._untimed_noted:
                self._untimed_noted = True
                ctx.log("note", message=f"autotune: skipped on {ctx.device}: launch settings change only the speed, "
                                        "which is not timed there")
            return None
        best = ctx.best
        profile = best.result.profile if best else None
        # done near the floor, unless the reference is nearer: then the best is still slower than it
        # (KernelBench L1/87 on an H100: the reference at 1.00 of the floor, the best at 0.95, untuned)
        reference = ctx.reference.profile.roofline_position if ctx.reference.profile else None
        if profile is not None and (profile.roofline_position or 0.0) >= max(ROOFLINE_DONE, reference or 0.0):
            return None
        self._refill(ctx, ctx.best_source, best.cand if best else None, profile or ctx.reference.profile)
        if ctx.problem.source != ctx.best_source:
            self._refill(ctx, ctx.problem.source, None, ctx.reference.profile)  # the user's own kernels, if any
        while self._queue:
            base, parent, site, value = self._queue.pop(0)
            source = apply(base, site, value)
            key = _key(source)
            if key in self._proposed:
                continue
            self._proposed.add(key)
            old = "unset" if site.insert_at is not None else site.value
            return Proposal(
                source=source,
                origin=f"autotune:{parent or 'reference'}",
                intent=f"Launch with {site.name}={value} (was {old}).",
                parent=parent,
                meta={"setting": site.name, "value": value, "previous": site.value, "control": site.control,
                      "kernel": site.kernel},
                screen=True,
            )
        return None

    def propose_batch(self, ctx: Context, limit: int) -> list[Proposal]:
        """The next `limit` variants around the current best at once (a phase of the tuning):
        the neighbourhood of a new best found among them is queued after the batch."""
        return propose_several(self, ctx, limit)

    def _refill(self, ctx: Context, source: str, parent: str | None, profile: ProfileData | None) -> None:
        key = _key(source)
        if key in self._bases:
            return
        self._bases.add(key)
        self._proposed.add(key)
        if self._extent is None:
            try:
                self._extent = input_extent(ctx.problem)
            except Unsupported:
                self._extent = (1 << 31, 1 << 16)  # sizes unknown: no size pruning
        focus = Focus.of(profile)
        launched = launched_kernels(profile)
        try:
            every = find_sites(source)
        except SyntaxError:
            return
        sites = ran_only(every, launched)
        found = variants(source, *self._extent, focus, sites)
        idle = sorted({s.kernel for s in every} - {s.kernel for s in sites})
        if idle:
            ctx.log("note", message=f"autotune around {parent or 'the reference'}: left out the settings of "
                                    f"{', '.join(idle)}, which did not run at the timed shape")
        if focus is not None and focus.why != self._focus_noted and sites:
            others = sorted({s.control for s in sites} - set(focus.controls) - {"precision"})
            ctx.log("note", message=f"autotune around {parent or 'the reference'}: {focus.why}"
                    + (f"; then the others, as without a profile: {', '.join(others)}" if others else "")
                    + ("" if found else "; nothing to vary in this file"))
            self._focus_noted = focus.why
        # a new best's neighbourhood goes first: that is where the next gain is likeliest
        self._queue[:0] = [(source, parent, site, value) for site, value in found]
