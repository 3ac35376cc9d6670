"""The ATen handlers of scans and flips (registered into okgit.lower.aten.HANDLERS).

cumsum and cumprod become `scan` nodes (kinds/scan.py lowers them). A reversed cumulative sum
is spelled with flips, `x.flip(d).cumsum(d).flip(d)`: a scan of a flipped value becomes a scan
of the value from its last element, flipped back, and a flip of that is absorbed
(Builder.unflip), so no flip is left to move data. A flip no rule absorbs stays a PyTorch call.
"""

from __future__ import annotations

from okgit.lower.aten import _h
from okgit.lower.builder import resolve_dims
from okgit.lower.graph import FLOAT, Unsupported


@_h("cumsum", "cumprod")
def _scan(b, a, t):
    x = a["self"]
    if a.get("dtype") not in (None, x.dtype):
        x = b.op("cast", x, dtype=a["dtype"])
    if x.dtype not in FLOAT:
        raise Unsupported("a scan of integers")
    name = "sum" if t._opname == "cumsum" else "prod"
    if not x.shape:
        return x
    d = a["dim"] % len(x.shape)
    inner = b.unflip(x, {d})
    if inner is None or inner is x:  # x is not a flip along d (or the dim has size 1)
        return b.scan(name, x, d)
    return b.flipped(b.scan(name, inner, d, reverse=True), [d])


@_h("flip")
def _flip(b, a, t):
    x = a["self"]
    if not a["dims"]:
        return x
    return b.unflip(x, set(resolve_dims(x, a["dims"])))
