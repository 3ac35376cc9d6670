"""Parametric autotuning of the Triton kernels in the current best file (the user's own too).

The source is parsed, not run: `@triton.jit` kernels and their `tl.constexpr` parameters,
launch sites `kernel[grid](..., BLOCK=128, num_warps=2)`, and module constants whose names
say they are launch settings (`*BLOCK*`, `*TILE*`, `*CHUNK*`, `*LANES*`, `*WARPS*`, `*STAGES*`,
`*GROUP*`, `*PROGRAMS*`, as the template proposer writes them; `NAME_MAX` beside one is its
bound, not a setting: the template's launcher caps NAME there). Each variant changes one
setting and is an ordinary complete file, so the evaluator times exactly one configuration
per file (no triton.autotune inside proposals: its own timing would hide in the first call).

A split-precision GEMM's `*_PRECISION` (okgit.lower.kinds.gemm) is a setting too: its
alternatives in the order measured fastest at fp32 accuracy, each judged by the evaluator's
precision rule like any candidate (the only way to know whether bf16x3 passes on a problem). So
are how its tiles write C (`*_STORE`: TMA, streamed, plain) and whether its grid is persistent
(`*_PERSISTENT`, a switch: the other value), the levers of a GEMM bound by writing its output.

Order: a GEMM's precision first, then the nearest values (a factor of 2 before 4), settings
interleaved, so the cheap, likely wins come first; blocks above the padded problem size and
GEMM tiles that cannot fit in shared memory (as the GEMM kind counts it) are pruned, and a
best already near its roofline floor is left alone. When a variant becomes the new best, the
neighbourhood of that one is explored next (hill climb). When a literal block size also
appears in the launch's grid expression (`cdiv(n, 1024)`), both change together so the grid
stays derived from the block.

Which settings it varies follows what bounds the kernel, as the base file's profile says
(ProfileData.bottleneck_type: from Nsight Compute's counters where the profiling pass ran them,
else the roofline and torch.profiler's kernel times; okgit.search.profiling). Memory-bound: the
block shape, the loads in flight (stages) and the vector width (warps per block) first; compute-
bound: warps, stages, the tile shape, the GEMM's group; latency-bound: the persistent program count
and the block (fewer, larger programs), since fusion and fewer launches, the real levers, are not
launch settings. Settings the bottleneck does not name are left out (a GEMM's precision never is: it
comes first whatever bounds the kernel); where the occupancy is held
low by registers or shared memory, smaller blocks and fewer stages come first. The journal says
which settings and why, each time the bottleneck it tunes for changes.

Where nothing is timed (a CPU, Triton's interpreter) a launch setting cannot change the
result, only the speed nobody measures there: the phase proposes nothing and says so once in
the journal, leaving the iterations to proposers whose candidates can still differ.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

from okgit.eval.types import ProfileData
from okgit.lower.graph import Unsupported
from okgit.lower.kinds import gemm, grouped_conv, pool, rows
from okgit.lower.trace import input_extent
from okgit.search.types import Context, Proposal, propose_several

WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
GROUPS = (1, 4, 8, 16)
MIN_BLOCK = 16
# a template's switch between two paths that is also the size on one of them: its value when switched on
PATHS = {"_ROLL_CHUNK": grouped_conv.ROLL_CHUNK, "_SHARED_ROWS": pool.SHARED_ROWS, "_L2_SHARE": rows.L2_SHARE}
BOUND = "_MAX"  # NAME_MAX: the most NAME may be (_constant_sites)
SMALL_TILE = re.compile(r"_(ROWS|LANES)$")  # a count of rows or lanes in a tile (a windowed kind's): down to 1
MAX_VARIANTS = 24  # per parent file
ROOFLINE_DONE = 0.9  # a best at >= 90% of its roofline floor has nothing left to tune
SETTING = re.compile(r"BLOCK|TILE|CHUNK|LANES|WARPS|STAGES|GROUP|PROGRAMS", re.IGNORECASE)
# bottleneck -> (the controls to vary, in order; what they are, for the journal)
FOCUS: dict[str, tuple[tuple[str, ...], str]] = {
    "memory": (("path", "store", "switch", "block", "stages", "warps"), "a kernel's other path where it has one (a "
               "direct convolution rolled or not; a GEMM's stores of C and its persistent grid), the block shape, the "
               "loads in flight (stages) and the vector width (warps)"),
    "compute": (("warps", "stages", "block", "group", "switch"), "the warps, the pipeline stages, the tile shape, the "
                "GEMM's group and its persistent grid"),
    "latency": (("programs", "block"), "the persistent program count and the block (fewer, larger programs) only: "
                "fusion and fewer launches are the levers there, and they are not launch settings"),
}
# a GEMM's string settings: the suffix of the name, its control, its values in the order they are tried
CHOICES = {"_PRECISION": ("precision", gemm.TUNED_PRECISIONS), "_STORE": ("store", gemm.STORES)}
LOW_OCCUPANCY = 0.5  # held below this by registers or shared memory: smaller tiles and fewer stages first


@dataclass(frozen=True)
class Focus:
    """What the bottleneck says to vary (okgit.eval.types.ProfileData.bottleneck_type)."""

    bottleneck: str
    controls: tuple[str, ...]
    smaller_first: bool  # registers or shared memory hold the occupancy down
    why: str

    @classmethod
    def of(cls, profile: ProfileData | None) -> Focus | None:
        if profile is None or profile.bottleneck_type not in FOCUS:
            return None
        controls, what = FOCUS[profile.bottleneck_type]
        smaller = (profile.occupancy_limiter in ("registers", "shared_memory")
                   and (profile.occupancy_theoretical or 1.0) < LOW_OCCUPANCY)
        how = profile.bottleneck_why or profile.sources.get("bottleneck_type", "the roofline")
        why = f"{profile.bottleneck_type}-bound ({how}): varying {what}"
        if smaller:
            why += (f"; {profile.occupancy_limiter.replace('_', ' ')} hold the occupancy to "  # type: ignore[union-attr]
                    f"{profile.occupancy_theoretical:.0%}, so smaller blocks and fewer stages first")
        return cls(profile.bottleneck_type, controls, smaller, why)


@dataclass
class Site:
    """One launch setting in the source and where to write a new value."""

    name: str  # "FUSED_ROWS_0_TILE" or "kernel.BLOCK_SIZE"
    control: str  # what the value sets: block | warps | stages | group | programs | path | switch | precision | store
    value: int | str
    spans: list[tuple[int, int]]  # source offsets holding the value (grid literals included)
    insert_at: int | None = None  # absent keyword: where ", name=value" goes
    keyword: str = ""
    kernel: str = ""
    most: int | None = None  # the source's NAME_MAX beside it: a value above it would run as it anyway


def _control(name: str) -> str | None:
    up = name.upper()
    if up.endswith(tuple(PATHS)):  # a template's switch between two paths as well as a size (0: the other path;
        # a long row's persistent grid sized by its share of L2, 0: one program per row block)
        return "path"
    if up.endswith("_PERSISTENT"):  # a GEMM's grid: one program per tile (0) or one per SM walking the tiles (1)
        return "switch"
    if "WARPS" in up:
        return "warps"
    if "STAGES" in up:
        return "stages"
    if "GROUP" in up:
        return "group"
    if "PROGRAMS" in up:
        return "programs"
    if SETTING.search(up):
        return "block"
    return None


class _Offsets:
    """ast (line, byte column) positions to string offsets."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def __call__(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    def span(self, node: ast.expr) -> tuple[int, int]:
        return self(node.lineno, node.col_offset), self.end(node)

    def end(self, node: ast.expr) -> int:
        assert node.end_lineno is not None and node.end_col_offset is not None  # ast.parse sets both
        return self(node.end_lineno, node.end_col_offset)


def _is_jit(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "jit" or isinstance(target, ast.Name) and target.id == "jit":
            return True
    return False


def _is_autotuned(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "autotune" for d in fn.decorator_list)


def _constexprs(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def find_sites(source: str) -> list[Site]:
    """Every launch setting the source exposes: its module constants, then each launch's
    keywords and the num_warps / num_stages a launch leaves to Triton's defaults."""
    tree = ast.parse(source)
    at = _Offsets(source)
    sites = _constant_sites(tree, at)
    kernels = {fn.name: fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and _is_jit(fn) and not _is_autotuned(fn)}
    for fn, call, label in _launches(tree, kernels):
        sub = call.func
        assert isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name)  # _launches found kernel[grid](...)
        kernel = kernels[sub.value.id]
        sites += _keyword_sites(call, label, kernel, _grid_exprs(fn, sub.slice, call), at)
        sites += _default_sites(call, label, kernel, at)
    return sites


def _constants(tree: ast.Module) -> list[tuple[str, ast.Constant]]:
    """The module's `NAME = literal` (or `NAME: type = literal`) assignments."""
    found: list[tuple[str, ast.Constant]] = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
            found.append((target.id, node.value))
    return found


def _constant_sites(tree: ast.Module, at: _Offsets) -> list[Site]:
    """Module constants that are launch settings; `NAME_MAX` beside a constant NAME is not one but
    bounds NAME (a template's cap that its launcher applies, such as a window row's lanes: a value
    above it would compile the same kernel again under another name). Without a NAME beside it,
    a `*_MAX` is a setting like any other (the rows kind's BLOCK_N_MAX, the widest row kept whole)."""
    sites = []
    found = _constants(tree)
    names = {name for name, _ in found}
    bounds = {name[: -len(BOUND)]: _int(node) for name, node in found
              if name.endswith(BOUND) and name[: -len(BOUND)] in names}
    for name, node in found:
        value, control = _int(node), _control(name)
        choice = next((c for suffix, c in CHOICES.items() if name.endswith(suffix)), None)
        if name.endswith(BOUND) and name[: -len(BOUND)] in bounds:
            continue
        if value is not None and control is not None and (value > 0 or control in ("path", "switch")):
            sites.append(Site(name, control, value, [at.span(node)], most=bounds.get(name)))
        elif choice is not None and node.value in choice[1]:
            sites.append(Site(name, choice[0], node.value, [at.span(node)]))
    return sites


def _launches(tree: ast.Module, kernels: dict[str, ast.FunctionDef]) -> list[tuple[ast.FunctionDef, ast.Call, str]]:
    """Each `kernel[grid](...)` call of a kernel in `kernels`, in the function that makes it,
    labelled by the kernel's name (`name#2` for its second launch)."""
    seen: dict[str, int] = {}
    found = []
    for fn in (f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)):
        for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call)):
            sub = call.func
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id in kernels:
                kernel = sub.value.id
                seen[kernel] = seen.get(kernel, 0) + 1
                found.append((fn, call, kernel if seen[kernel] == 1 else f"{kernel}#{seen[kernel]}"))
    return found


def _keyword_sites(call: ast.Call, label: str, kernel: ast.FunctionDef, grid: list[ast.AST], at: _Offsets) -> list[Site]:
    """The launch's integer keywords that set num_warps, num_stages or a power-of-two constexpr."""
    constexprs = _constexprs(kernel)
    sites = []
    for kw in call.keywords:
        value = _int(kw.value)
        if value is None or kw.arg is None:
            continue
        control = {"num_warps": "warps", "num_stages": "stages"}.get(kw.arg) or (
            _control(kw.arg) if kw.arg in constexprs and value & (value - 1) == 0 else None
        )
        if control is None:
            continue
        spans = [at.span(kw.value)]
        if control == "block":  # the same literal in the grid moves with it
            spans += [at.span(c) for g in grid for c in ast.walk(g) if isinstance(c, ast.Constant) and _int(c) == value]
        sites.append(Site(f"{label}.{kw.arg}", control, value, spans, kernel=kernel.name))
    return sites


def _default_sites(call: ast.Call, label: str, kernel: ast.FunctionDef, at: _Offsets) -> list[Site]:
    """num_warps, and num_stages where the kernel loops, when the launch leaves them to Triton:
    inserted after its last argument."""
    last = (call.keywords[-1].value if call.keywords else call.args[-1]) if (call.keywords or call.args) else None
    if last is None:
        return []
    present = {kw.arg for kw in call.keywords}
    pipelined = any(isinstance(n, ast.For) for n in ast.walk(kernel))
    return [Site(f"{label}.{setting}", control, default, [], insert_at=at.end(last), keyword=setting, kernel=kernel.name)
            for setting, control, default in (("num_warps", "warps", 4), ("num_stages", "stages", 3))
            if setting not in present and (control == "warps" or pipelined)]


def _grid_exprs(fn: ast.FunctionDef, grid: ast.AST, call: ast.Call) -> list[ast.AST]:
    """The grid expression of a launch, following a local name to its last assignment."""
    if isinstance(grid, ast.Name):
        assigns: list[ast.AST] = [
            n.value for n in ast.walk(fn)
            if isinstance(n, ast.Assign) and n.lineno < call.lineno and any(isinstance(t, ast.Name) and t.id == grid.id for t in n.targets)
        ]
        return assigns[-1:]
    return [grid]


def _candidates(site: Site, cap_numel: int, cap_dim: int, smaller_first: bool = False) -> list:
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
    smaller = smaller_first and site.control in ("block", "stages")
    return sorted(others, key=lambda p: (max(p / v, v / p), p if smaller else -p))


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


def apply(source: str, site: Site, value: int | str) -> str:
    if site.insert_at is not None:
        return source[: site.insert_at] + f", {site.keyword}={value}" + source[site.insert_at :]
    out = source
    text = f'"{value}"' if isinstance(value, str) else str(value)
    for start, end in sorted(site.spans, reverse=True):
        out = out[:start] + text + out[end:]
    return out


def variants(source: str, cap_numel: int, cap_dim: int, focus: Focus | None = None) -> list[tuple[Site, int | str]]:
    """One-setting changes of source, nearest first, settings interleaved, a GEMM's precision
    before its launch settings (between precisions the H200 measured the largest differences);
    with a focus, of the launch settings only the controls it names, in its order."""
    tree = ast.parse(source)
    found = find_sites(source)
    launch = [s for s in found if s.control != "precision"]
    if focus is not None:
        launch = sorted((s for s in launch if s.control in focus.controls), key=lambda s: focus.controls.index(s.control))
    # a GEMM's precision and a kernel's path before its launch settings: they change the kernel most
    sites = [s for s in found if s.control == "precision"] + sorted(launch, key=lambda s: s.control != "path")
    smaller = focus is not None and focus.smaller_first
    constants = {name: node.value for name, node in _constants(tree) if isinstance(node.value, (int, str))}
    per_site = [[(s, v) for v in _candidates(s, cap_numel, cap_dim, smaller) if _fits(constants, s, v)] for s in sites]
    out: list[tuple[Site, int | str]] = []
    for rank in range(max((len(p) for p in per_site), default=0)):
        out += [p[rank] for p in per_site if rank < len(p)]
    return out[:MAX_VARIANTS]


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
        if profile is not None and (profile.roofline_position or 0.0) >= ROOFLINE_DONE:
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
        try:
            found = variants(source, *self._extent, focus)
        except SyntaxError:
            return
        if focus is not None and focus.why != self._focus_noted and find_sites(source):
            left = sorted({s.control for s in find_sites(source)} - set(focus.controls) - {"precision"})
            ctx.log("note", message=f"autotune around {parent or 'the reference'}: {focus.why}"
                    + (f"; left out: {', '.join(left)}" if left else "")
                    + ("" if found else "; nothing of those to vary in this file"))
            self._focus_noted = focus.why
        # a new best's neighbourhood goes first: that is where the next gain is likeliest
        self._queue[:0] = [(source, parent, site, value) for site, value in found]
