"""What the windowed kinds share (kinds/pool.py, kinds/grouped_conv.py): `WindowKind`, their
base (an optional kind seeded by its calls, before the vendor candidate, its input computed at
the window's taps where a prologue makes it), its output domain, the epilogue on a tile of
outputs, and `_window` (window.py.tmpl), the launcher-side helper that turns the call's window
arguments into per-dim sizes and output sizes at run time.

The kernels take the window as launch-time constants, rendered as the call's arguments: where
the shape knobs set one, capture binds it to the module's attribute that holds it
(okgit.lower.binding.bind_ints), so a candidate follows the knobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from okgit.lower.fusion import Group
from okgit.lower.graph import FLOAT, Node
from okgit.lower.kernelcode import KernelCode, Scope, index_by_part, prod, store_outputs
from okgit.lower.kinds.base import Lowering, Rendered, TemplateKind, output_names
from okgit.lower.template import fill, template

if TYPE_CHECKING:
    from okgit.lower.template import Traversable

WINDOW = template(__package__, "window.py.tmpl")


class WindowKind(TemplateKind):
    """A kind whose kernel slides a window over a call's input: seeded by its calls (`OPS`: the
    ATen names, overload aside, with their spatial dims; `takes` checks the rest), optional and
    before the candidate that keeps the vendor call; the elementwise group that only makes the
    call's input becomes its prologue, computed at each tap (`input_parts`)."""

    optional = True
    before_plain = True
    helpers: ClassVar[dict[str, Traversable]] = {"_window": WINDOW}
    OPS: ClassVar[dict[str, int]] = {}
    leading: ClassVar[list[str]] = []  # the launcher's sizes of the output's dims before the spatial ones
    template: ClassVar[Traversable]  # its kernel and launcher

    def takes(self, n: Node) -> bool:
        raise NotImplementedError

    def seeds(self, n: Node) -> bool:
        return (n.kind == "extern" and isinstance(n.target, torch._ops.OpOverload) and n.target._opname in self.OPS
                and self.takes(n))

    def dims(self, g: Group) -> int:
        """The spatial dims of g's seed."""
        assert g.seed is not None  # a group this kind claims
        return self.OPS[g.seed.target._opname]

    def offered(self, graph) -> bool:
        return any(self.seeds(n) for n in graph.nodes)

    def claims(self, g, low) -> bool:
        return g.seed is not None and self.seeds(g.seed)

    def domain_source(self, g, d: int) -> str | None:
        return spatial_domain(g.shape, self.dims(g), d, self.leading)

    def prologue_input(self, n: Node) -> Node | None:
        return n.args[0]

    def render(self, low: Lowering, g: Group, name: str, code: KernelCode, leaves: dict, args: list[str],
               params: list[str], read: tuple[dict[str, str], list[str], list[str]], head: dict[str, str],
               window: dict[str, Any], **more: str) -> Rendered:
        """The kernel and launcher `name` from the kind's template: the input as `input_parts`
        reads it (`read`), then the launcher parameters `head` (name -> forward expression) and
        `window` (the call's window arguments, as the forward passes them), the epilogue on the
        tile of outputs; `more` fills the template's own parameters."""
        blocks, x_param, x_forward = read
        low.helpers.add("_window")
        body = epilogue_lines(code, g, leaves)
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, blocks["device"])
        src = fill(
            self.template, name=name, NAME=name.upper(), params=sig, body="\n".join(body), **blocks,
            args=", ".join(x_param + list(head) + list(window) + ([largs] if largs else [])), doc=self.describe(g),
            prepare="\n".join(prep), n_spatial=str(self.dims(g)), rows=prod(code.dom[:-1]), call_args=call,
            returns=returns, **more,
        )
        device = f"{low.graph.forward_args[0]}.device"  # (no window argument is a device)
        forward = x_forward + list(head.values()) + [low.pyarg(v, device) for v in window.values()]
        return Rendered(name, src, self.tunables(name.upper(), window), forward + args, g.outputs, self.describe(g))

    def tunables(self, NAME: str, window: dict[str, Any]) -> dict[str, int]:
        """The kernel's launch settings as the candidate's module constants, from the call's
        window arguments as traced: the tiles (tile_tunables)."""
        stride = window["stride"] or window.get("kernel_size")  # an empty stride is the window
        return tile_tunables(NAME, last(stride, 1))


def last(v: Any, default: int) -> int:
    """The last spatial dim's entry of a window argument as traced (an int or a list)."""
    if isinstance(v, int):
        return v
    return int(v[-1]) if v else default


def spatial_input(n: Node, dims: int, batched_only: bool = False) -> bool:
    """Whether n's first operand is a floating tensor over `dims` spatial dims after a channel dim
    (and a batch dim, which `batched_only` requires), and n a floating result."""
    x = n.args[0] if n.args else None
    ranks = (dims + 2,) if batched_only else (dims + 1, dims + 2)
    return isinstance(x, Node) and len(x.shape) in ranks and x.dtype in FLOAT and n.dtype in FLOAT


def input_parts(low: Lowering, g: Group, code: KernelCode, leaves: dict, args: list[str], params: list[str], x: Node,
                spatial: int, pad: str, value: str) -> tuple[dict[str, str], list[str], list[str]]:
    """How a windowed kernel reads the seed's input `x` (`spatial` dims after its planes) at its
    taps `off` (int64 offsets into the contiguous input) where `ok`, `tplane` being the taps'
    plane: the template's blocks (`inputs`, `input_arg`, `shape`, which sets the launcher's
    `xshape`, and `load`, which sets `value` in fp32, `pad` where not ok) and the launcher's
    `device`; the launcher's leading parameters; the forward's expressions for them.

    Without a prologue x is a tensor in memory, the launcher's `x`. With one (fusion: the
    elementwise group that makes x and nothing else), x is computed at each tap from the
    prologue's operands, which join the kernel's (`leaves`, `args`, `params`) and share its size
    and constant arguments; the epilogue's names come after the prologue's. A padding tap is
    `pad`, not the prologue of 0."""
    pro = g.prologue
    if pro is None:
        blocks = {"inputs": "x_ptr,", "input_arg": "x,", "shape": "x = x.contiguous()\nxshape = x.shape",
                  "load": f"{value} = tl.load(x_ptr + off, mask=ok, other={pad}).to(tl.float32)", "device": "x.device"}
        return blocks, ["x"], [low.tensor(x)]
    own = low.read(pro, args, params)
    dom, sources = low.domain(pro, own, None, "p")
    pcode = KernelCode(pro, own, dom, low.helpers)
    pcode.sizes, pcode.scalars = code.sizes, code.scalars  # one kernel: one set of size and constant arguments
    # an operand of one value per input plane (a per-channel parameter) is read once per row of taps
    leading = set(range(len(pro.shape) - spatial))
    index_by_part(pcode, own.values(), (("tplane", leading, "ok"),))
    taps = Scope(None, "off", "ok")
    v = pcode.value(x, taps)
    code.count = pcode.count
    leaves.update({("prologue", key): leaf for key, leaf in own.items()})
    shape = [f"{var} = {src}" for var, src in sources] + [f"xshape = ({', '.join(dom)},)"]
    load = "\n".join(taps.lines + [f"{value} = tl.where(ok, {v}, {pad})"])
    blocks = {"inputs": "", "input_arg": "", "shape": "\n".join(shape), "load": load, "device": f"{next(iter(own.values())).arg}.device"}
    return blocks, [], []


def epilogue_lines(code: KernelCode, g: Group, leaves: dict) -> list[str]:
    """The epilogue on a windowed kernel's [ROWS, BLOCK_W] tile of outputs (`flat`, `mask`):
    an operand that varies along the output rows only (a per-channel parameter) is read per row
    (`orow`), one along the last dim only per column (`ocol`); the outputs' stores."""
    rank = len(g.shape)
    index_by_part(code, leaves.values(), (("orow", set(range(rank - 1)), "row_ok"), ("ocol", {rank - 1}, "col_ok")))
    body = Scope(None, "flat", "mask")
    store_outputs(code, g, body, None, output_names(g))
    return body.lines


def tile_tunables(NAME: str, stride_w: int) -> dict[str, int]:
    """A windowed kernel's launch settings: tiles of BLOCK_ROWS output rows by BLOCK_W outputs
    (more rows where a row is narrower); ROW_LANES taps of a window row read by neighbouring
    lanes (capped by the window's width): with stride 1 neighbouring outputs' taps are
    neighbours already, so one lane per output; with a wider stride a window row across lanes
    keeps the reads contiguous. Guesses until bench/pool_conv.py measures them."""
    return {f"{NAME}_BLOCK_ROWS": 4, f"{NAME}_BLOCK_W": 64, f"{NAME}_ROW_LANES": 1 if stride_w == 1 else 16,
            f"{NAME}_NUM_WARPS": 4}


def prologue_note(g: Group) -> str:
    """What a windowed kind's description adds for a prologue: its ops."""
    if g.prologue is None:
        return ""
    ops = ", ".join(dict.fromkeys(n.op for n in g.prologue.nodes if n.kind == "op"))
    return f", its input computed at each tap ({ops})"


def spatial_domain(shape: tuple[int, ...], dims: int, d: int, leading: list[str]) -> str | None:
    """The launcher's expression for domain dim d of a windowed output of `shape` whose last
    `dims` dims are spatial (`out_size`, padded to 3 dims by `_window`); the others are
    `leading`. None for a dim of size 1, which the lowering takes as 1 (as for every kind)."""
    if shape[d] == 1:
        return None
    rank = len(shape)
    return leading[d] if d < rank - dims else f"out_size[{3 - rank + d}]"
