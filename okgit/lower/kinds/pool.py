"""Pooling: max and average pooling over 1, 2 or 3 spatial dims as one direct Triton kernel
(pool.py.tmpl), the elementwise epilogue after it fused: any window, stride and padding,
dilation (max), ceil mode, count_include_pad and divisor_override (average). Optional and
before the candidate without it: that one keeps PyTorch's pooling (origin vendor_pool) with
the epilogue as its own kernel, and the search times both.

Recognition: a pooling call (POOL_OPS) on a floating tensor seeds a group of its own; inside
the kernel its value is the pooled one, and the domain's sizes are the input's leading dims
and the output sizes the window gives (`_window`, window.py.tmpl, evaluated by the launcher
from the call's arguments at run time: a window a knob sets is read from the module's
attribute, okgit.lower.binding.bind_ints). `return_indices` (the *_with_indices calls) is
declined: it stays PyTorch's, and the note says no template covers it.

Against Inductor (torch 2.13's lowering.py): Inductor makes a pooling window a reduction per
output, unrolled below 8 taps (25 for an average) and otherwise a reduction loop whose
reduction axis is the window (27 taps of a 3x3x3 window fill few lanes); an average window of
more than 25 taps with its stride unequal to it falls back to ATen. Here every window is
unrolled over its constexpr sizes (the depth dim looped) in tiles of neighbouring outputs,
the index arithmetic per tile row and column, bounds checked only in tiles at the input's
edges, and a window row can be spread over lanes so that strided windows still read
contiguous memory. Where neighbouring output rows' windows overlap down the height, a tile of
them reads each input row once between them (SHARED_ROWS). The settings come from the window's
shape (`pool_tunables`).
"""

from __future__ import annotations

from typing import Any

from okgit.lower.graph import Node
from okgit.lower.kernelcode import KernelCode
from okgit.lower.kinds.base import Rendered, template_kind
from okgit.lower.kinds.window import (
    WindowKind,
    input_parts,
    last,
    prologue_note,
    spatial_input,
)
from okgit.lower.template import template
from okgit.lower.translate import schema_args

TEMPLATE = template(__package__, "pool.py.tmpl")
POOL_OPS = {f"{kind}_pool{n}d": n for kind in ("max", "avg") for n in (1, 2, 3)}  # ATen call -> spatial dims
LOAD_LINES = 4  # cache lines one warp's load may span before a window row goes across lanes (pool_tunables)
MAX_LANES = 16  # lanes of one window row
STEP_TAPS = 256  # taps one step of a program reads: 2 a thread at 4 warps
SHARED_ROWS = 8  # output rows of a tile that read their input rows once between them (pool_tunables)
SHARE_GAIN = 2  # the reads of an input row by those rows' windows, at least, for that path


@template_kind(order=2)
class Pool(WindowKind):
    name = "pool"
    label = "Triton pooling"
    label_off = "vendor pooling"
    stands_in_for = "PyTorch's pooling"
    OPS = POOL_OPS
    template = TEMPLATE
    leading = [f"xshape[{i}]" for i in range(4)]

    def takes(self, n: Node) -> bool:
        """A max or average pooling call without indices, on a floating (N,) C, *spatial input."""
        return spatial_input(n, POOL_OPS[n.target._opname])

    def extern_origin(self, n: Node, low) -> str | None:
        return "vendor_pool" if self.seeds(n) else None

    def what(self, g) -> str:
        op = g.seed.target._opname
        return f"a direct {'max' if op.startswith('max') else 'average'} pooling over {POOL_OPS[op]}D windows{prologue_note(g)}, the epilogue on its result"

    def tunables(self, NAME: str, window: dict[str, Any]) -> dict[str, int]:
        stride = window["stride"] or window["kernel_size"]  # an empty stride is the window
        k, s, d = (window["kernel_size"], stride, window["dilation"])
        return pool_tunables(NAME, (_height(k), last(k, 1)), (_height(s), last(s, 1)), (_height(d), last(d, 1)))

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        pool = g.seed
        a = schema_args(pool.target, pool.args, pool.kwargs)
        is_max = pool.target._opname.startswith("max")
        if is_max:
            low.helpers.add("_folds")
        code.seed_value = "pooled"
        read = input_parts(low, g, code, leaves, args, params, a["self"], self.dims(g), 'float("-inf")' if is_max else "0.0", "v")
        window = {
            "kernel_size": a["kernel_size"], "stride": a.get("stride", []), "padding": a.get("padding", 0),
            "dilation": a.get("dilation", 1) if is_max else 1, "ceil_mode": a.get("ceil_mode", False),
            "count_include_pad": a.get("count_include_pad", True), "divisor_override": a.get("divisor_override"),
        }
        return self.render(low, g, name, code, leaves, args, params, read, {}, window, is_max=str(is_max))


def pool_tunables(NAME: str, k: tuple[int, int], s: tuple[int, int], d: tuple[int, int]) -> dict[str, int]:
    """The pooling kernel's launch settings for a window of k = (kh, kw) taps, stride s and
    dilation d (height and width).

    ROW_LANES (T): a warp's load of one tap spans (32 / T) x sw floats, about sw / T cache lines,
    with T lanes per window row (T = 1: one lane per output). ATen's pooling reads one lane per
    output and is at the DRAM peak at sw = 11 (L1/45), so lines are cheap up to a point; lanes
    idle on a row's padding (T - kw % T of every T) cost instructions. T is the fewest lanes that
    keep a load within LOAD_LINES lines (dilation 1; a dilated row stays one lane per output):
    1 up to stride 4 (overlapping and 2x2 windows), 4 at L1/45's stride 11 (12 taps read for 11,
    about 4 lines a load instead of 12), never wider than the row or MAX_LANES (ROW_LANES_MAX: the
    launcher's cap, which also bounds the autotune's values).

    BLOCK_ROWS x BLOCK_W x T, the taps a program reads in one step, is held to STEP_TAPS: every
    lane keeps an fp32 accumulator per tap of the tile (folded across lanes once, after the
    window: a fold per step would cost log2(T) shuffles a tap) beside the step's loads in flight,
    so the tile, not the window, sets the registers. Compiled for sm_90 (Triton 3.9, no GPU) at
    L1/45's window (11 x 11, stride 11), 4 warps: the old default's 4 x 64 x 16 tile took 255
    registers and spilled (the 12% occupancy measured), 1 x 64 x 16 101, 1 x 32 x 16 64, and
    1 x 64 x 4 and 4 x 64 x 1 32.

    SHARED_ROWS: where SHARED_ROWS neighbouring output rows' windows read each input row at
    least SHARE_GAIN times between them (windows overlapping down the height: L1/42's 4 x 4 at
    stride 1, 2.9 times), the kernel reads each input row once for all of them (0: each row's
    windows read on their own), its tile one row of BLOCK_W x T = 128 taps (one a thread at
    4 warps: a narrower one is loaded by several threads). At L1/42's window, compiled for
    sm_90: 5.5 loads an output instead of 16, 40 registers. Not timed yet (bench/pool_speed.py
    times both paths). All five are module constants the autotune varies."""
    (kh, kw), (sh, sw), (dh, dw) = k, s, d
    lanes = 1
    if dw == 1:
        lanes = min(MAX_LANES, _pow2(kw), _pow2(-(-sw // LOAD_LINES)))
    block_w = min(64, STEP_TAPS // lanes)
    rows = max(1, min(4, STEP_TAPS // (block_w * lanes)))
    shared = SHARED_ROWS * kh >= SHARE_GAIN * ((SHARED_ROWS - 1) * sh + (kh - 1) * dh + 1)
    if shared:
        block_w = max(1, 128 // lanes)
    return {f"{NAME}_BLOCK_ROWS": rows, f"{NAME}_BLOCK_W": block_w, f"{NAME}_ROW_LANES": lanes,
            f"{NAME}_ROW_LANES_MAX": min(MAX_LANES, _pow2(kw)), f"{NAME}_NUM_WARPS": 4,
            f"{NAME}_SHARED_ROWS": SHARED_ROWS if shared else 0}


def _height(v: Any) -> int:
    """The height's entry of a window argument as traced (an int, one value for every dim, or
    one per dim: the second last); 1 where it has none."""
    if isinstance(v, int):
        return v
    return int(v[-2] if len(v) >= 2 else v[0]) if v else 1


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
