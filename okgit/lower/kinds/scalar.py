"""Scalar: reductions to one value (losses, a global mean) and the elementwise outputs that
use them, in two stages without atomics. Per reduction level, a partial kernel folds blocks
p, p + programs, ... into one partial per statistic (scalar_partial.py.tmpl) and a final
kernel folds the partials in a fixed order (scalar_final.py.tmpl); an apply kernel writes
the elementwise outputs (scalar_apply.py.tmpl); one launcher runs them (scalar.py.tmpl)."""

from __future__ import annotations

from okgit.lower.graph import Node, Unsupported
from okgit.lower.kernelcode import NEUTRAL, KernelCode, Scope, prod, store_outputs
from okgit.lower.kinds.base import (
    Rendered,
    TemplateKind,
    first_leaf_device,
    output_names,
    template_kind,
)
from okgit.lower.template import fill, template

LAUNCHER = template(__package__, "scalar.py.tmpl")
PARTIAL = template(__package__, "scalar_partial.py.tmpl")
FINAL = template(__package__, "scalar_final.py.tmpl")
APPLY = template(__package__, "scalar_apply.py.tmpl")


@template_kind(order=50)
class Scalar(TemplateKind):
    name = "scalar"

    def claims(self, g, low) -> bool:
        return g.seed is None and bool(g.red) and g.folds_all()

    def what(self, g) -> str:
        return "a two-stage reduction to a scalar"

    def tunables(self, NAME: str) -> dict[str, int]:
        return {f"{NAME}_BLOCK": 4096, f"{NAME}_PROGRAMS": 2048, f"{NAME}_NUM_WARPS": 8}

    def lower(self, low, g, name, code: KernelCode, leaves, args, params) -> Rendered:
        reduces = [n for n in g.nodes if n.kind == "reduce"]
        if any(r.op.startswith("arg") for r in reduces):
            raise Unsupported("arg-reduction over everything")
        slot = {id(r): i for i, r in enumerate(reduces)}
        levels = sorted({g.level(r.args[0]) for r in reduces})
        outs = output_names(g)
        passes = []  # (partial prologue, loop body, partial stores, final scope) per level
        for lv in levels:
            mine = [r for r in reduces if g.level(r.args[0]) == lv]
            root = Scope(None, "0", None)
            _load_stats(code, root, reduces, slot, lv)
            loop = Scope(root, "flat", "mask", row=root)
            inits, updates, stores = [], [], []
            for j, r in enumerate(mine):
                v = code.as_float(r.args[0], code.value(r.args[0], loop))
                w = f"tl.where(mask, {v}, {NEUTRAL[r.op]})"
                if r.op == "sum":
                    inits.append(f"acc{j} = tl.zeros([BLOCK], dtype=tl.float32)")
                    updates.append(f"acc{j} += {w}")
                else:  # a NaN sticks to its lane, and wins the folds (torch's max is NaN then)
                    inits.append(f"acc{j} = tl.full([BLOCK], {NEUTRAL[r.op]}, tl.float32)")
                    updates.append(f"acc{j} = tl.{r.op}imum(acc{j}, {w}, propagate_nan=tl.PropagateNan.ALL)")
                stores.append(f"tl.store(partials_ptr + {j} * programs + pid, {code.fold(root, r.op, f'acc{j}', '', 'axis=0')})")
            fin = Scope(None, "0", None)
            _load_stats(code, fin, reduces, slot, lv)
            for j, r in enumerate(mine):
                part = code.emit(fin, f"tl.load(partials_ptr + {j} * programs + p, mask=pmask, other={NEUTRAL[r.op]})")
                var = code.emit(fin, code.fold(fin, r.op, part, "", "axis=0"), r)
                fin.lines.append(f"tl.store(stats_ptr + {slot[id(r)]}, {var})")
            passes.append((root.lines + inits, loop.lines + updates, stores, fin))
        store_outputs(code, g, passes[-1][3], passes[-1][3], outs, only="row")
        apply = None
        if any(code.placement(n) == "full" for n in g.outputs):
            apply = Scope(None, "flat", "mask")
            _load_stats(code, apply, reduces, slot, max(levels) + 1)
            store_outputs(code, g, apply, None, outs, only="full")
        device = first_leaf_device(leaves)
        prep, sig, call, largs, returns = low.launcher_parts(g, code, leaves, args, params, device)
        call = " ".join(call.splitlines())
        NAME = name.upper()
        kernels, launches = [], []
        for p, (prologue, body, stores, fin) in enumerate(passes):
            kernels.append(fill(PARTIAL, name=f"{name}_p{p}", params=sig, npass=str(p), prologue="\n".join(prologue), body="\n".join(body), store="\n".join(stores)))
            kernels.append(fill(FINAL, name=f"{name}_f{p}", params=sig, npass=str(p), body="\n".join(fin.lines)))
            launches.append(f"{name}_p{p}_kernel[(programs,)]({call} stats, partials, n_red, float(n_red), programs, BLOCK={NAME}_BLOCK, num_warps={NAME}_NUM_WARPS)")
            launches.append(f"{name}_f{p}_kernel[(1,)]({call} stats, partials, float(n_red), programs, BLOCK_P=block_p)")
        if apply is not None:
            kernels.append(fill(APPLY, name=f"{name}_apply", params=sig, body="\n".join(apply.lines)))
            launches.append(
                f"{name}_apply_kernel[(triton.cdiv(n_red, {NAME}_BLOCK),)]({call} stats, n_red, float(n_red), "
                f"BLOCK={NAME}_BLOCK, WIDE=n_red >= 2**31, num_warps={NAME}_NUM_WARPS)"
            )
        src = fill(
            LAUNCHER, name=name, NAME=NAME, kernels="\n\n\n".join(kernels), args=largs, doc=self.describe(g),
            prepare="\n".join(prep), n_red=prod([code.dom[d] for d in code.covered if d in g.red]), device=device,
            n_stats=str(len(reduces)), n_partials=str(max(sum(g.level(r.args[0]) == lv for r in reduces) for lv in levels)),
            launches="\n".join(launches), returns=returns,
        )
        return Rendered(name, src, self.tunables(NAME), args, g.outputs, self.describe(g))


SCALAR = Scalar()


def _load_stats(code: KernelCode, scope: Scope, reduces: list[Node], slot: dict, before: int) -> None:
    """Statistics folded by earlier passes, read back from the stats buffer."""
    for r in reduces:
        if code.g.level(r.args[0]) < before:
            code.emit(scope, f"tl.load(stats_ptr + {slot[id(r)]})", r)
