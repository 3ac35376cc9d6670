"""The gate `own_shape` (docs/design.md, "The kernel judged is the kernel that runs"): the
candidate's own kernels must run at the op file's own shape, not only at the shapes checked.
Where the checked shapes are smaller (the interpreter's), the worker calls the candidate at the
op file's shape on the meta device, launches counted and not run (`result["own_shape"]`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from okgit.eval.parent.gates.base import Evidence, Findings, Gate, gate
from okgit.eval.protocol.jobs import Case
from okgit.eval.protocol.keys import CallKey
from okgit.eval.types import KernelShape

if TYPE_CHECKING:
    from okgit.eval.parent.reference import PreparedReference


@gate(210)
class OwnShape(Gate):
    name = "own_shape"
    rule = ("Your kernels must run at every shape the op takes, the op file's own included: no fallback to the "
            "original code at shapes you did not compile for.")
    rejects = True

    def check(self, ev: Evidence, found: Findings) -> None:
        launches = ev.result.get("backend_launches", {}).get(ev.backend, 0)
        shapes = kernel_shapes(ev.prep, ev.cases, ev.result, ev.backend)
        own = next((s for s in shapes if s.own), None)
        if launches and own is not None and own.launches == 0:
            found.fail(self.name, f"its own kernels did not run at the op file's own shape ({_knobs(own.knobs)}): "
                       "other code (the original forward kept as a fallback, a library call) produced the outputs "
                       "there, so what was checked is not what a user of the op gets")
        elif own is not None and own.launches is None:
            found.note(self.name, f"not told at {_knobs(own.knobs)}: {own.why}")
        elif launches:
            others = [s for s in shapes if not s.ran() and not s.own]
            if others:
                found.note(self.name, f"only other code ran at {'; '.join(_knobs(s.knobs) for s in others)}")


def kernel_shapes(prep: PreparedReference, cases: list[Case], result: dict[str, Any], backend: str) -> list[KernelShape]:
    """Per checked shape, the backend's launches over the calls made at it; the op file's own shape
    is the first where it was checked (a GPU's), else the worker's meta-device call there."""
    shape_of = {c.id: c.shape for c in cases}
    totals: dict[int, int] = {}
    for key, facts in result.get("calls", {}).items():
        if "launches" not in facts:
            continue  # timed calls: their launches are the seed's
        call = CallKey.parse(key)
        shape = shape_of.get(call.case, 0) if call is not None else 0  # fresh, fresh#1: the main shape's buffers
        totals[shape] = totals.get(shape, 0) + int(facts["launches"].get(backend, 0))
    meta = result.get("own_shape")
    shapes = [KernelShape(knobs=prep.shapes[i], launches=n, own=i == 0 and meta is None)
              for i, n in sorted(totals.items())]
    if meta is not None:
        launched = meta["launches"]
        shapes.append(KernelShape(knobs=meta["knobs"], launches=None if launched is None else int(launched.get(backend, 0)),
                                  own=True, how="meta", why=meta.get("why", "")))
    return shapes


def _knobs(knobs: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items()) or "no shape knobs"
