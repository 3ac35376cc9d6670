"""GEMM: a matmul, batched matmul or linear with its elementwise epilogue on the accumulator, one
Triton GEMM (gemm.py.tmpl) on tensor cores at fp32 accuracy. Optional, its candidate first: the
one without it keeps the vendor GEMM (a PyTorch call, origin vendor_gemm, cuBLAS on the CUDA
cores in strict fp32) with the epilogue as its own kernel.

The GEMM family (gemm_plan.py.tmpl, _GemmPlan): fp32 operands multiplied in split precision,
`<NAME>_PRECISION`: "tf32x3-split" splits each operand with one pass into a TF32 high part and a
TF32 remainder (K-major, K padded to whole blocks) and sums three TF32 products per K step into
a partial of their own, added to the accumulator in fp32 (a tensor core truncates its sum after
every 8 products: the running total must not be the one it sums into), the plain TF32 GEMM a
tensor core runs best; the plan splits ahead where the GEMM does enough work per operand
element to win the pass back, and leaves the split to Triton inside the kernel elsewhere.
"tf32x3", "bf16x3", "bf16x6" let Triton split inside the kernel; "ieee" is strict fp32 on the
CUDA cores. Either way its error against float64 is what the evaluator's precision rule for
contractions judges (docs/evaluation.md); autotune tries TUNED_PRECISIONS. On Hopper the
operands go through TMA descriptors where their layout allows, tiles persistent or not
(`PERSISTENT`) and warp-specialised or not (`WARP_SPECIALIZE`); on other GPUs and under
Triton's interpreter through pointers (the interpreter computes in fp32 whatever the
precision). Where the output has fewer tiles than the GPU has SMs, K is split into ranges
(`SPLIT_K`, 0: chosen from the shape) whose sums a second kernel adds in a fixed order before
the epilogue: bitwise deterministic, no atomics.

How the tiles write C (`<NAME>_STORE`, STORES): plainly, streamed (st.global.cs: first out of
L2, so a C far larger than L2 leaves the operands there) or through a TMA descriptor over C,
which the persistent tile loop does not wait for; the plan falls back to plain stores where a
descriptor cannot take the tile. A GEMM bound by writing its output (store_bound: a K of at most
STORE_BOUND_K and a C no smaller than the operands) gets STORE_BOUND's defaults: tiles walked
persistently, the next tile's operands loading while one is written, through TMA.

Recognition: a fp32 matmul-like PyTorch call (GEMM_OPS) with operands of 2 or more dims whose
batch dims agree (or one operand 2D) seeds a group of its own, its elementwise epilogue after
it; inside the kernel its value is the accumulator (plus the bias of a linear or addmm), and
the domain's sizes are A's rows and B's columns (and the batch dims). A matmul that a rewrite
made may say that it is triangular (`kwargs["triangle"]`, TRIANGLES: causal attention written
out, kinds/attention_gemms.py; a matmul whose one reader keeps its lower triangle, `rewrite`):
the kernel then skips the products that cannot count; and that
its A comes split into TF32 highs and remainders (`split_rest`): the GEMM then splits B alone."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import torch

from okgit.lower.fusion import Group
from okgit.lower.graph import Bound, Graph, Node, Unsupported, replaced
from okgit.lower.kernelcode import KernelCode, Leaf, Scope, store_outputs
from okgit.lower.kinds.base import Rendered, TemplateKind, constants, output_names, template_kind
from okgit.lower.template import fill, template

if TYPE_CHECKING:
    from okgit.lower.template import Traversable

TEMPLATE = template(__package__, "gemm.py.tmpl")
EXTERN = template(__package__, "gemm_extern.py.tmpl")  # stand-ins for torch.mm / addmm / bmm
GEMM_OPS = {"linear", "mm", "addmm", "matmul", "bmm"}  # the ATen calls a Triton GEMM may replace
PRECISION = "tf32x3-split"  # the default of <NAME>_PRECISION (the module docstring lists the others)
# The precisions autotune tries, fastest first at fp32 accuracy as measured on the H200 (4096^3 and
# level-2 problem 63's linear, bench/results/2026-12-02-h200-kernels): bf16x3 is the fastest where
# Triton splits inside the kernel but passes the precision rule only where the reference's own
# error leaves room, which only the evaluator can tell; bf16x6 beats Triton's tf32x3 where an
# operand is read through pointers. Triton's tf32x3 is the default's own path where it does not
# split ahead, and "ieee" is cuBLAS's arithmetic at a fraction of its speed: neither is tried.
TUNED_PRECISIONS = ("tf32x3-split", "bf16x3", "bf16x6")
# A triangular matmul's K loop (`kwargs["triangle"]` of its node): "output", where its epilogue
# keeps only the elements on or below the diagonal (column <= row): a tile wholly above it skips
# its products, and the grid takes the tiles that hold a kept element first (KEPT_FIRST: a dense
# grid over the triangle, the masked tiles a short tail after it, as they still write what the
# epilogue makes of them); "a", where A is zero above its diagonal: K stops at the tile's last
# row (every tile of C holds work: the grid is the plain one). A masked tile's K loop runs zero
# times (its accumulator is never read: at a head dim of 64, one K block of two would be half a
# tile's work), but one K block where the loop nest is flattened (PERSISTENT) or warp-specialised
# (WS_K), which Triton does not promise to run zero times; "a" always leaves one K block, as
# every other tile has one.
KEPT_FIRST = {"output"}
TRIANGLES = {
    "output": "k_hi = tl.where(off_n < min(M, off_m + BLOCK_M), k_hi, min(k_hi, ks * k_len + BLOCK_K * (PERSISTENT + WS_K)))"
              "  # the epilogue masks such a tile whole",
    "a": "k_hi = min(k_hi, max(off_m + BLOCK_M, ks * k_len + BLOCK_K))  # A's columns past the tile's last row are zero",
}
# Shared memory a block may take on an H100/H200 (227 KiB), less room for Triton's barriers.
SHARED_LIMIT = 232448 - 1024
# How the tile epilogue writes C (`<NAME>_STORE`, gemm_plan.py.tmpl's _gemm_store), in the order
# autotune tries them: a TMA store from shared memory, st.global.cs (evict first from L2), st.global.
STORES = ("tma", "stream", "plain")
# A GEMM bound by writing its output: 2K FLOPs per 4-byte element of C, against the H200's ~110
# TFLOP/s of split-precision products and ~4 TB/s of writes, is store-bound below K ~ 55 (L1/9's
# 32768 x 32 x 32768: a 4 GiB C from a K of 32, 2545 us in cuBLAS at 1.7 TB/s). There its tiles
# are walked persistently with the next tile's operands loading during a tile's epilogue (2 stages;
# 1734 us against the defaults' 2555 us in bench/results/2026-12-02-h200-gemm) and C leaves
# through TMA stores, which the tile loop does not wait for. Where C is no larger than the
# operands the GEMM is bound by them, not by C.
STORE_BOUND_K = 64
STORE_BOUND: dict[str, int | str] = {"PERSISTENT": 1, "NUM_STAGES": 2, "STORE": "tma"}


@template_kind(order=0)
class Gemm(TemplateKind):
    name = "gemm"
    optional = True
    label = "Triton GEMM"
    label_off = "vendor GEMM"
    before_plain = True  # expected faster than cuBLAS's strict fp32: its candidate first
    stands_in_for = "cuBLAS's GEMM"
    helpers: ClassVar[dict[str, Traversable]] = {"_gemm_plan": template(__package__, "gemm_plan.py.tmpl")}

    def seeds(self, n: Node) -> bool:
        """A matmul-like fp32 call whose operands have 2 or more dims, batch dims alike or one 2D."""
        if n.kind != "extern" or not isinstance(n.target, torch._ops.OpOverload) or n.target._opname not in GEMM_OPS:
            return False
        try:
            a, b, _ = gemm_operands(n)
        except Unsupported:
            return False
        if not (isinstance(a, Node) and isinstance(b, Node)) or n.dtype != torch.float32:
            return False
        sa, sb = a.shape, b.shape
        if a.dtype != torch.float32 or b.dtype != torch.float32 or len(sa) < 2 or len(sb) < 2:
            return False
        return len(sb) == 2 or len(sa) == 2 or sa[:-2] == sb[:-2]

    def offered(self, graph) -> bool:
        return any(self.seeds(n) for n in graph.nodes)

    def changes(self, items: list) -> bool:
        """Whether a call is left for its kernel (a sum folded into the weight leaves none)."""
        return any(isinstance(it, Group) and it.seed is not None and self.seeds(it.seed) for it in items)

    def rewrite(self, graph: Graph) -> Graph:
        """Each matmul it takes whose one reader keeps only its lower triangle (`torch.tril(a @ b)`,
        a diagonal of 0 or below) marked triangular ("output"): its kernel skips the tiles wholly
        above the diagonal, whose elements the reader sets to zero whatever the products are."""
        while True:
            users, outs = graph.users(), {id(o) for o in graph.outputs}
            mm = next((n for n in graph.nodes if self.seeds(n) and "triangle" not in n.kwargs and id(n) not in outs
                       and len(users[id(n)]) == 1 and _keeps_lower(users[id(n)][0], n)), None)
            if mm is None:
                return graph
            graph = replaced(graph, [mm], [dataclasses.replace(mm, kwargs={**mm.kwargs, "triangle": "output"})])

    def claims(self, g, low) -> bool:
        return g.seed is not None and self.seeds(g.seed)

    def domain_source(self, g, d: int) -> str | None:
        """The output's last dim is B's columns, the one before A's rows, the others the batch
        dims of whichever operand has them all."""
        rank = len(g.shape)
        if d >= rank - 2:
            return "b.shape[-1]" if d == rank - 1 else "a.shape[-2]"
        a, _, _ = gemm_operands(g.seed)
        return f"{'a' if len(a.shape) == rank else 'b'}.shape[{d}]"

    def extern_origin(self, n: Node, low) -> str | None:
        return "vendor_gemm" if self.seeds(n) else None

    def what(self, g) -> str:
        return "a Triton GEMM on tensor cores at fp32 accuracy with the epilogue on its accumulator"

    def tunables(self, NAME: str, store_bound: bool = False) -> dict[str, int | str]:
        """The defaults; a store-bound GEMM's (`store_bound`, STORE_BOUND_K) persistent with TMA stores."""
        settings: dict[str, int | str] = {
            "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "NUM_WARPS": 8, "NUM_STAGES": 3,
            "PRECISION": PRECISION, "SPLIT_K": 0, "PERSISTENT": 0, "WARP_SPECIALIZE": 0, "STORE": "plain",
        }
        return {f"{NAME}_{k}": v for k, v in {**settings, **(STORE_BOUND if store_bound else {})}.items()}

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        mm = g.seed
        a, b, bias = gemm_operands(mm)
        code.seed_value = "acc"
        if bias is not None:
            m = _align_bias(bias, g.shape)
            leaf = Leaf(bias, bias, m, f"in{len(args)}", f"in{len(args)}_ptr")
            leaves[id(bias)] = leaf
            g.smap[id(bias)] = m
            args.append(low.tensor(bias))
            params.append(leaf.ptr)
            code.seed_value = "acc + " + code.expr(bias, Scope(None, "flat", "mask"))
        body = Scope(None, "flat", "mask")
        outs = output_names(g)
        store_outputs(code, g, body, None, outs)
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, "a.device")
        tile_body, tile_call = _tile_stores(body.lines, call, [o for n, o in zip(g.outputs, outs) if n.dtype == torch.float32])
        operands = [low.tensor(a), low.tensor(b) + (".t()" if mm.op.startswith("aten.linear") else "")]
        rest = split_rest(mm)
        if rest is not None:
            operands.append(low.tensor(rest))
        low.helpers.add("_gemm_plan")
        src = fill(
            TEMPLATE, name=name, NAME=name.upper(), params=sig, body="\n".join(body.lines),
            args=", ".join(["a", "b"] + (["a_rest"] if rest is not None else []) + ([largs] if largs else [])),
            doc=self.describe(g), prepare="\n".join(prep), call_args=call, returns=returns, tile_body=tile_body,
            tile_call_args=tile_call,
            triangle=TRIANGLES.get(mm.kwargs.get("triangle", ""), ""),
            kept_first=str(mm.kwargs.get("triangle") in KEPT_FIRST), a_rest="a_rest" if rest is not None else "None",
        )
        return Rendered(name, src, self.tunables(name.upper(), store_bound(a, b, mm)), operands + args, g.outputs,
                        self.describe(g))


def _keeps_lower(reader: Node, mm: Node) -> bool:
    """Whether `reader` is where(column - row <= k, mm, 0) over mm's own shape with k <= 0: the
    lower triangle as okgit.lower.aten_matrices writes torch.tril."""
    if reader.kind != "op" or reader.op != "where" or reader.args[1] is not mm or reader.args[2] != 0:
        return False
    keep = reader.args[0]
    if not (isinstance(keep, Node) and keep.op == "le" and isinstance(keep.args[1], (int, float)) and keep.args[1] <= 0):
        return False
    diff = keep.args[0]
    if not (isinstance(diff, Node) and diff.op == "sub" and all(isinstance(a, Node) for a in diff.args)):
        return False
    rank = len(mm.shape)
    cols, rows = diff.args
    return all(a.kind == "iota" and a.shape == mm.shape for a in (cols, rows)) and (cols.dims, rows.dims) == (
        (rank - 1,), (rank - 2,))


def store_bound(a: Node, b: Node, mm: Node) -> bool:
    """Whether writing C bounds the GEMM (STORE_BOUND_K): a K of at most STORE_BOUND_K and a C
    (its batches included) at least as large as the operands."""
    return a.shape[-1] <= STORE_BOUND_K and math.prod(mm.shape) >= math.prod(a.shape) + math.prod(b.shape)


def _tile_stores(lines: list[str], call: str, outs: list[str]) -> tuple[str, str]:
    """The epilogue as the tile kernel runs it: each fp32 output's store through _gemm_store (the
    plan's STORE), its launch argument what the plan says to write it through (`plan.target`)."""
    body, args = list(lines), call.split("\n")
    for o in outs:
        head, tail = f"tl.store({o}_ptr + flat, ", ", mask=mask)"
        body = [f"_gemm_store({o}_ptr, flat, {line[len(head):-len(tail)]}, mask, z * M + off_m, off_n, STORE)"
                if line.startswith(head) and line.endswith(tail) else line for line in body]
        args = [f"plan.target({o})," if a == f"{o}," else a for a in args]
    return "\n".join(body), "\n".join(args)


def shared_bytes(settings: Mapping[str, int | str]) -> int:
    """Shared memory the kernel takes at `settings` (BLOCK_M, BLOCK_N, BLOCK_K, NUM_STAGES,
    PRECISION, PERSISTENT, STORE, without the group's prefix): each pipeline stage holds A's and
    B's tiles in fp32, twice where the operands may come split ahead (tf32x3-split: TF32 high parts
    and remainders);
    a persistent kernel keeps its epilogue's fp32 tile beside the stages, which are still
    loading the next tile, and so does a TMA store (the tile it writes from). Triton 3.6 asked for
    exactly this on the H200 (plus < 100 bytes of barriers) in every configuration that failed for
    want of it; Triton 3.9 compiling for sm_90 the same with TMA stores (tests/lower/test_gemm_store.py)."""
    bm, bn, bk = (int(settings[f"BLOCK_{d}"]) for d in "MNK")
    operands = 2 if settings.get("PRECISION", PRECISION) == "tf32x3-split" else 1
    stages = max(int(settings.get("NUM_STAGES", 2)), 1)
    epilogue = bm * bn * 4 if settings.get("PERSISTENT") or settings.get("STORE") == "tma" else 0
    return (bm + bn) * bk * 4 * operands * stages + epilogue


# the stand-ins' epilogue: alpha * A @ B (+ beta * bias) written through out's strides, bias broadcast
_EXTERN_PARAMS = ["bias_ptr", "out_ptr", "alpha", "beta", "n_rows", "n_cols", "bias_z", "bias_m", "bias_n", "out_z",
                  "out_m", "out_n", "HAS_BIAS: tl.constexpr"]
_EXTERN_ARGS = ["bias3", "out3", "alpha", "beta", "out3.shape[1]", "out3.shape[2]", "bias3.stride(0)", "bias3.stride(1)",
                "bias3.stride(2)", "out3.stride(0)", "out3.stride(1)", "out3.stride(2)", "bias is not None and beta != 0"]
_EXTERN_BODY = """o_n = flat % n_cols
o_m = (flat // n_cols) % n_rows
o_z = flat // (n_cols * n_rows)
v = acc * alpha
if HAS_BIAS:
    v += beta * tl.load(bias_ptr + o_z * bias_z + o_m * bias_m + o_n * bias_n, mask=mask, other=0.0)
tl.store(out_ptr + o_z * out_z + o_m * out_m + o_n * out_n, v, mask=mask)"""
_EXTERN_PREPARE = """out3 = out if out.dim() == 3 else out.unsqueeze(0)
bias3 = out3 if bias is None else bias.expand(out.shape)
bias3 = bias3 if bias3.dim() == 3 else bias3.unsqueeze(0)"""
# max-autotune's bias_addmm is addmm with a broadcast bias passed as 1D (okgit.inductor.externs): the same stand-in
VENDOR_STAND_INS = {"mm": "_split_mm", "addmm": "_split_addmm", "bias_addmm": "_split_addmm", "bmm": "_split_bmm"}


def vendor_stand_ins() -> str:
    """Python text defining `_split_mm`, `_split_addmm` and `_split_bmm`: torch.mm, addmm and bmm
    (their arguments, `out=` included) on this kind's GEMM at its default settings, for code
    that calls the vendor (the Inductor seed, okgit.inductor.gemm)."""
    kernel = fill(
        TEMPLATE, name="_split_gemm", NAME="SPLIT_GEMM", params="\n".join(f"{p}," for p in _EXTERN_PARAMS),
        body=_EXTERN_BODY, args="a, b, bias, out, alpha, beta", doc="alpha * a @ b (+ beta * bias) into out.",
        prepare=_EXTERN_PREPARE, call_args="\n".join(f"{a}," for a in _EXTERN_ARGS), returns="out", triangle="", kept_first="False", a_rest="None",
        tile_body=_EXTERN_BODY, tile_call_args="\n".join(f"{a}," for a in _EXTERN_ARGS),
    )
    settings = "\n".join(constants(Gemm().tunables("SPLIT_GEMM")))
    return "\n\n\n".join([fill(Gemm.helpers["_gemm_plan"]), settings, kernel, fill(EXTERN)])


def gemm_operands(mm: Node) -> tuple[Node, Node, Node | None]:
    """(A, B, bias) of a matmul-like extern, B as stored (linear's weight is B transposed)."""
    op = mm.op.split(".")[1]
    if op == "linear":
        x, w = mm.args[0], mm.args[1]
        bias = mm.args[2] if len(mm.args) > 2 and isinstance(mm.args[2], Node) else None
        return x, w, bias
    if op == "addmm":
        beta = mm.kwargs.get("beta", mm.args[3] if len(mm.args) > 3 else 1)
        alpha = mm.kwargs.get("alpha", mm.args[4] if len(mm.args) > 4 else 1)
        if beta != 1 or alpha != 1 or isinstance(beta, Bound) or isinstance(alpha, Bound):
            raise Unsupported("scaled addmm")
        return mm.args[1], mm.args[2], mm.args[0]
    return mm.args[0], mm.args[1], None


def split_rest(mm: Node) -> Node | None:
    """The TF32 remainders of A where a rewrite computed A split (`kwargs["a_split"]`: A, the
    first argument, is then its TF32 highs and the third the remainders; kinds/attention_gemms.py);
    the GEMM reads both and splits only B."""
    return mm.args[2] if mm.kwargs.get("a_split") else None


def _flatten(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flatten(a)
        else:
            yield a


def _align_bias(bias: Node, shape: tuple[int, ...]) -> tuple:
    off = len(shape) - len(bias.shape)
    return tuple(None if s == 1 else off + j for j, s in enumerate(bias.shape))
