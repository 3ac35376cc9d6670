"""Attention: softmax(scale * Q K^T [mask]) V as one flash-attention-style Triton kernel
(attention.py.tmpl) with the elementwise epilogue on its output tile: keys streamed with an
online softmax, the scores never written, the head dim tiled (Q K^T in chunks of it, a wide
value head dim split across programs), so any head dim runs, 1024 included, which the vendor's
fused kernels refuse. Optional, before the plain candidate (which keeps the vendor call, or the
matmuls and a softmax kernel); both are timed.

Recognition: `torch.nn.functional.scaled_dot_product_attention` (no dropout, one head count
for Q, K and V), causal or not, with or without a boolean or additive mask or a scale; and,
where the capture shows it written out, `softmax(scale * (Q @ K^T) [masked_fill | + mask],
dim=-1) @ V` with the scores used nowhere else, which `rewrite` turns into one such call.
fp32 inputs multiply in three-pass TF32 (fp32 accuracy), half types natively."""

from __future__ import annotations

import dataclasses

import torch

from okgit.lower.fusion import Group
from okgit.lower.graph import Bound, Graph, Node, Unsupported, replaced
from okgit.lower.kernelcode import KernelCode, Scope, literal, store_outputs
from okgit.lower.kinds.base import Rendered, TemplateKind, output_names, template_kind
from okgit.lower.template import fill, template

TEMPLATE = template(__package__, "attention.py.tmpl")
SDPA = "aten.scaled_dot_product_attention.default"
WRITTEN_OUT = "attention"  # the op of a call `rewrite` made of the written-out pattern
MATMULS = ("aten.matmul.default", "aten.bmm.default")
MASK_KEEP, MASK_ADD, MASK_FILL = 1, 2, 3  # the kernel's MASK: boolean keep, additive, boolean fill (masked_fill)


@dataclasses.dataclass
class Call:
    """One attention call as the kernel takes it."""

    q: Node
    k: Node  # [..., S, E]; `k_transposed`: the node holds K^T ([..., E, S])
    v: Node
    mask: Node | None = None
    mask_kind: int = 0
    fill: float = float("-inf")
    causal: bool = False
    scale: float | None = None  # None: 1 / sqrt(E), at run time
    safe: bool = True  # a fully masked row gives 0 (SDPA) rather than NaN (a softmax)
    k_transposed: bool = False


@template_kind(order=5)
class Attention(TemplateKind):
    name = "attention"
    optional = True
    label = "flash attention"
    label_off = "vendor attention"
    before_plain = True

    def offered(self, graph: Graph) -> bool:
        return any(self.seeds(n) for n in graph.nodes) or bool(_written_out(graph))

    def changes(self, items: list) -> bool:
        """Whether a call is left for its kernel: attention as GEMMs, turned on too, writes each out."""
        return any(isinstance(it, Group) and it.seed is not None and self.seeds(it.seed) for it in items)

    def rewrite(self, graph: Graph) -> Graph:
        """The graph with each written-out attention made one call (op `attention`)."""
        for found, call in _written_out(graph):
            out = found[-1]
            operands = (call.q, call.k, call.v) + ((call.mask,) if call.mask is not None else ())
            node = Node("extern", WRITTEN_OUT, operands, out.shape, out.dtype, kwargs={"call": call})
            graph = replaced(graph, found, [node])
        return graph

    def seeds(self, n: Node) -> bool:
        return attention_of(n) is not None

    def claims(self, g, low) -> bool:
        return g.seed is not None and self.seeds(g.seed)

    def domain_source(self, g, d: int) -> str | None:
        rank = len(g.shape)
        return f"q.shape[{d}]" if d < rank - 1 else "v.shape[-1]"

    def extern_origin(self, n: Node, low) -> str | None:
        return "vendor_attention" if n.op == SDPA else None

    def what(self, g) -> str:
        return "a flash-attention kernel with the epilogue on its output"

    def tunables(self, NAME: str, e: int, ev: int) -> dict[str, int]:
        """Q K^T in one chunk of the head dim up to 128 (Q in registers); past that 64 at a time,
        and the value head dim split into 128-wide column blocks."""
        block_e = max(16, 1 << (e - 1).bit_length()) if e <= 128 else 64
        block_dv = max(16, 1 << (ev - 1).bit_length()) if ev <= 128 else 128
        wide = block_e * block_dv > 128 * 64
        return {f"{NAME}_BLOCK_M": 64, f"{NAME}_BLOCK_N": 32 if wide else 64, f"{NAME}_BLOCK_E": block_e,
                f"{NAME}_BLOCK_DV": block_dv, f"{NAME}_NUM_WARPS": 8 if wide else 4, f"{NAME}_NUM_STAGES": 2}

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        call = attention_call(g.seed)
        code.seed_value = "acc"
        body = Scope(None, "flat", "mask")
        store_outputs(code, g, body, None, output_names(g))
        prep, sig, call_args, largs, returns = low.launcher_parts(g, code, leaves, args, params, "q.device")
        k_expr = low.tensor(call.k) + (".transpose(-2, -1)" if call.k_transposed else "")
        q_expr = low.tensor(call.q)
        if isinstance(call.scale, Bound):
            scale = f"float({call.scale.expr})"
        else:  # SDPA's default follows the head dim the call gets
            scale = f"1.0 / math.sqrt({q_expr}.shape[-1])" if call.scale is None else literal(float(call.scale))
        forward_args = [q_expr, k_expr, low.tensor(call.v),
                        low.tensor(call.mask) if call.mask is not None else "None", scale, literal(float(call.fill))]
        src = fill(
            TEMPLATE, name=name, NAME=name.upper(), params=sig, body="\n".join(body.lines),
            args=f", {largs}" if largs else "", doc=self.describe(g), prepare="\n".join(prep),
            call_args=call_args, returns=returns, causal=str(call.causal), mask_kind=str(call.mask_kind),
            safe=str(call.safe),
        )
        e, ev = call.q.shape[-1], call.v.shape[-1]
        return Rendered(name, src, self.tunables(name.upper(), e, ev), forward_args + args, g.outputs, self.describe(g))


def attention_of(n: Node) -> Call | None:
    """The attention n computes where n is such a call (SDPA, or one `rewrite` made) of a form the
    kernel takes: one batch shape for Q, K and V, Q's head dim K's, one floating dtype."""
    if n.kind != "extern" or n.op not in (SDPA, WRITTEN_OUT):
        return None
    try:
        call = attention_call(n)
    except Unsupported:
        return None
    q, k, v = call.q.shape, call.k.shape, call.v.shape
    if call.k_transposed:
        k = (*k[:-2], k[-1], k[-2])
    fits = (len(q) >= 3 and len(q) == len(k) == len(v) and q[:-2] == k[:-2] == v[:-2] and q[-1] == k[-1]
            and k[-2] == v[-2] and call.q.dtype == call.k.dtype == call.v.dtype and call.q.dtype.is_floating_point)
    return call if fits else None


def attention_call(n: Node) -> Call:
    """The attention a seeded call computes; Unsupported for what the kernel does not take
    (dropout, grouped-query heads)."""
    if n.op == WRITTEN_OUT:
        return n.kwargs["call"]
    schema = torch.ops.aten.scaled_dot_product_attention.default._schema
    a = {arg.name: arg.default_value if arg.has_default_value() else None for arg in schema.arguments}
    a.update({arg.name: v for arg, v in zip(schema.arguments, n.args)})
    a.update(n.kwargs)
    if a["dropout_p"] not in (0, 0.0) or a["enable_gqa"]:
        raise Unsupported("attention with dropout or grouped-query heads")
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    if not (isinstance(q, Node) and isinstance(k, Node) and isinstance(v, Node)) or (mask is not None and not isinstance(mask, Node)):
        raise Unsupported("attention on values that are not tensors")
    kind = 0 if mask is None else MASK_KEEP if mask.dtype == torch.bool else MASK_ADD
    return Call(q, k, v, mask, kind, causal=bool(a["is_causal"]), scale=a["scale"])


# the written-out pattern ---------------------------------------------------------------------


def _written_out(graph: Graph) -> list[tuple[list[Node], Call]]:
    """Each `softmax(scale * (Q @ K^T) [mask]) @ V` whose intermediate values nothing else reads:
    (its nodes, the last the output; the call it is)."""
    users = graph.users()
    outs = {id(o) for o in graph.outputs}
    found = []
    for mm2 in graph.nodes:
        if mm2.kind != "extern" or mm2.op not in MATMULS or len(mm2.inputs) != 2 or mm2.args[0] is not mm2.inputs[0]:
            continue
        chain = _softmax_rows(mm2.args[0])
        if chain is None:
            continue
        nodes, scores = chain
        call = _scores(scores, nodes)
        if call is None:
            continue
        call.v = mm2.args[1]
        nodes = [*nodes, mm2]
        inner = nodes[:-1]
        if any(id(n) in outs or any(u not in nodes for u in users[id(n)]) for n in inner):
            continue
        found.append((sorted(nodes, key=graph.nodes.index), call))
    return found


def _softmax_rows(p: Node) -> tuple[list[Node], Node] | None:
    """(nodes, x) where p = softmax(x, dim=-1) as the capture expands it: exp(x - max) / sum."""
    if not (p.kind == "op" and p.op == "div"):
        return None
    e, total = p.args
    if not (isinstance(e, Node) and isinstance(total, Node) and e.kind == "op" and e.op == "exp"
            and total.kind == "reduce" and total.op == "sum" and total.args[0] is e and _last_dim(total)):
        return None
    sub = e.args[0]
    if not (isinstance(sub, Node) and sub.kind == "op" and sub.op == "sub"):
        return None
    x, top = sub.args
    if not (isinstance(top, Node) and top.kind == "reduce" and top.op == "max" and top.args[0] is x and _last_dim(top)):
        return None
    return [top, sub, e, total, p], x


def _last_dim(r: Node) -> bool:
    rank = len(r.args[0].shape)
    return r.dims == (rank - 1,) and r.keepdim


def _scores(x: Node, nodes: list[Node]) -> Call | None:
    """The call behind scores x = [mask](scale * (Q @ K^T)), its nodes added to `nodes`."""
    call = Call(q=x, k=x, v=x, safe=False)
    if x.kind == "extern" and x.op == "aten.masked_fill.Scalar" and isinstance(x.args[1], Node) and isinstance(x.args[2], (int, float)) \
            and not isinstance(x.args[2], Bound):
        call.mask, call.mask_kind, call.fill = x.args[1], MASK_FILL, float(x.args[2])
        nodes.append(x)
        x = x.args[0]
    elif x.kind == "op" and x.op == "add" and len(x.inputs) == 2:
        scores, mask = x.args if _from_matmul(x.args[0]) else reversed(x.args)
        if not (_from_matmul(scores) and mask.dtype.is_floating_point):
            return None
        call.mask, call.mask_kind = mask, MASK_ADD
        nodes.append(x)
        x = scores
    scale: float | Bound = 1.0
    while x.kind == "op" and x.op in ("mul", "div") and isinstance(x.args[1], (int, float)) and not isinstance(scale, Bound):
        c = x.args[1]
        if isinstance(c, Bound):
            if scale != 1.0:
                return None
            scale = Bound(c if x.op == "mul" else 1.0 / c, c.expr if x.op == "mul" else f"1.0 / ({c.expr})")
        else:
            scale = scale * c if x.op == "mul" else scale / c
        nodes.append(x)
        x = x.args[0]
    if not (x.kind == "extern" and x.op in MATMULS and len(x.args) == 2 and all(isinstance(a, Node) for a in x.args)):
        return None
    nodes.append(x)
    q, kt = x.args
    if len(q.shape) < 3 or len(kt.shape) != len(q.shape):
        return None
    call.q, call.k, call.k_transposed, call.scale = q, kt, True, scale
    return call


def _from_matmul(x: Node) -> bool:
    """Whether x is a matmul, scaled by constants or not."""
    while x.kind == "op" and x.op in ("mul", "div") and not isinstance(x.args[1], Node):
        x = x.args[0]
    return x.kind == "extern" and x.op in MATMULS

