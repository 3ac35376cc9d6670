"""GEMM: a matmul or linear with its elementwise epilogue on the accumulator, one Triton GEMM
(gemm.py.tmpl). Optional: the first candidate keeps the vendor GEMM (a PyTorch call, origin
vendor_gemm) with the epilogue as its own kernel, since cuBLAS beats a Triton GEMM in strict
fp32; the second turns this kind on.

Recognition: a 2D fp32 matmul-like PyTorch call (GEMM_OPS) seeds a group of its own, its
elementwise epilogue after it; inside the kernel its value is the accumulator (plus the bias of
a linear or addmm), and the domain's sizes are A's rows and B's columns."""

from __future__ import annotations

import torch

from okgit.lower.graph import Bound, Node, Unsupported
from okgit.lower.kernelcode import KernelCode, Leaf, Scope, store_outputs
from okgit.lower.kinds.base import Rendered, TemplateKind, output_names, template_kind
from okgit.lower.template import fill, template

TEMPLATE = template(__package__, "gemm.py.tmpl")
GEMM_OPS = {"linear", "mm", "addmm", "matmul"}  # the ATen calls a Triton GEMM may replace


@template_kind(order=0)
class Gemm(TemplateKind):
    name = "gemm"
    optional = True
    label = "Triton GEMM"
    label_off = "vendor GEMM"

    def seeds(self, n: Node) -> bool:
        """A matmul-like call whose first two tensor operands are 2D, in fp32."""
        if n.kind != "extern" or not isinstance(n.target, torch._ops.OpOverload) or n.target._opname not in GEMM_OPS:
            return False
        operands = [a for a in _flatten(n.args) if isinstance(a, Node)]
        return len(operands) >= 2 and all(len(a.shape) == 2 for a in operands[:2]) and n.dtype == torch.float32

    def offered(self, graph) -> bool:
        return any(self.seeds(n) for n in graph.nodes)

    def claims(self, g, low) -> bool:
        return g.seed is not None and self.seeds(g.seed)

    def domain_source(self, g, d: int) -> str | None:
        return ("a.shape[0]", "b.shape[1]")[d]

    def extern_origin(self, n: Node, low) -> str | None:
        return "vendor_gemm" if self.seeds(n) else None

    def what(self, g) -> str:
        return "a Triton GEMM with the epilogue on its accumulator"

    def tunables(self, NAME: str) -> dict[str, int]:
        return {
            f"{NAME}_BLOCK_M": 64, f"{NAME}_BLOCK_N": 64, f"{NAME}_BLOCK_K": 32,
            f"{NAME}_GROUP_M": 8, f"{NAME}_NUM_WARPS": 4, f"{NAME}_NUM_STAGES": 3,
        }

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
        store_outputs(code, g, body, None, output_names(g))
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, "a.device")
        a_expr = low.tensor(a)
        b_expr = low.tensor(b) + (".t()" if mm.op.startswith("aten.linear") else "")
        src = fill(
            TEMPLATE, name=name, NAME=name.upper(), params=sig, body="\n".join(body.lines),
            args=", ".join(["a", "b"] + ([largs] if largs else [])), doc=self.describe(g), prepare="\n".join(prep),
            call_args=call, returns=returns,
        )
        return Rendered(name, src, self.tunables(name.upper()), [a_expr, b_expr] + args, g.outputs, self.describe(g))


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


def _flatten(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flatten(a)
        else:
            yield a


def _align_bias(bias: Node, shape: tuple[int, ...]) -> tuple:
    off = len(shape) - len(bias.shape)
    return tuple(None if s == 1 else off + j for j, s in enumerate(bias.shape))
