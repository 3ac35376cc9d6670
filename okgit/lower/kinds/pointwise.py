"""Pointwise: an elementwise chain, parameters and broadcasts included, one pass over the
output in BLOCK-sized programs (pointwise.py.tmpl)."""

from __future__ import annotations

import math

from okgit.lower.fusion import Group
from okgit.lower.kernelcode import KernelCode, Scope, prod, store_outputs
from okgit.lower.kinds.base import (
    Rendered,
    TemplateKind,
    first_leaf_device,
    output_names,
    template_kind,
)
from okgit.lower.template import fill, template

TEMPLATE = template(__package__, "pointwise.py.tmpl")


def elementwise(g: Group) -> bool:
    """A group that folds no dim, scans none and computes no PyTorch call of its own."""
    return g.seed is None and not g.red and not g.scan


@template_kind(order=30)
class Pointwise(TemplateKind):
    name = "pointwise"

    def claims(self, g, low) -> bool:
        return elementwise(g)

    def what(self, g) -> str:
        return "one elementwise pass"

    def tunables(self, NAME: str, numel: int) -> dict[str, int]:
        return {f"{NAME}_BLOCK": 1024 if numel >= 1 << 20 else 256, f"{NAME}_NUM_WARPS": 4}

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        body = Scope(None, "flat", "mask")
        store_outputs(code, g, body, None, output_names(g))
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, first_leaf_device(leaves))
        src = fill(
            TEMPLATE, name=name, NAME=name.upper(), params=sig, body="\n".join(body.lines),
            args=largs, doc=self.describe(g), prepare="\n".join(prep), numel=prod(code.dom) if any(d != "1" for d in code.dom) else "1",
            call_args=call, returns=returns,
        )
        return Rendered(name, src, self.tunables(name.upper(), math.prod(g.shape)), args, g.outputs, self.describe(g))
