"""The reference, prepared once per problem and kept by the parent.

A reference worker draws the inputs of every case (seeds, the second distribution, extra
shapes), computes the expected outputs natively and in float64, and writes the inputs for
candidate workers to a private directory. The parent reads the expected outputs into memory
and deletes their file at once: they never sit where a candidate could read them. Tolerances,
the reference's own determinism and aliasing, degeneracy and the roofline floor are all fixed
here, before any candidate runs.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from okgit.eval.compare import LeafTolerance, bitwise_equal, degenerate_reason, leaf_tolerance, reference_error
from okgit.eval.jobs import Case


@dataclass
class PreparedReference:
    data_dir: Path
    shapes: list[dict[str, int]]  # indexed by Case.shape; a shape whose cases were all dropped stays unused
    cases: list[Case]
    expected: dict[str, dict[str, Any]]  # case id -> {"native": [leaves], "f64": [leaves] | None}
    calls: dict[str, dict[str, Any]]  # the reference's own call facts (aliasing, inputs changed)
    tolerances: dict[str, list[LeafTolerance]]
    deterministic: bool
    degenerate: str | None
    cost: dict[str, Any]
    dropped: list[str] = field(default_factory=list)
    timing: dict[str, Any] | None = None
    kernels: dict[str, Any] | None = None
    peaks: dict[str, Any] | None = None

    def close(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)


def new_data_dir() -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    return Path(tempfile.mkdtemp(prefix="okgit-ref-", dir=base))


def finish(data_dir: Path, result: dict[str, Any], expected: dict[str, Any], problem_rtol: float | None,
           problem_atol: float | None) -> PreparedReference:
    """Turn a reference worker's result into the fixed facts every candidate is judged by."""
    cases = [Case(**c) for c in result["cases"]]
    shapes = result["shapes"]
    base_finite = _all_finite(expected.get("s0", {}).get("native", []))
    kept: list[Case] = []
    dropped = list(result.get("dropped_shapes", []))
    for case in cases:
        # a variant (distribution, shape) where the reference stops being finite proves nothing
        if case.kind != "seed" and base_finite and not _all_finite(expected[case.id]["native"]):
            dropped.append(f"{case.id}: the reference is not finite there")
            continue
        kept.append(case)
    tolerances: dict[str, list[LeafTolerance]] = {}
    # the reference's own error, worst over the cases of the same shape: fixed per leaf up front
    worst: dict[tuple[int, int], float] = {}
    for case in kept:
        exp = expected[case.id]
        for j, native in enumerate(exp["native"]):
            f64 = exp["f64"][j] if exp["f64"] else None
            key = (case.shape, j)
            worst[key] = max(worst.get(key, 0.0), reference_error(native, f64))
    for case in kept:
        exp = expected[case.id]
        tolerances[case.id] = [
            leaf_tolerance(native, exp["f64"][j] if exp["f64"] else None, worst[(case.shape, j)], problem_rtol, problem_atol)
            for j, native in enumerate(exp["native"])
        ]
    again = expected.get("s0#again", {}).get("native")
    deterministic = again is not None and all(bitwise_equal(a, b) for a, b in zip(again, expected["s0"]["native"]))
    degenerate = degenerate_reason(expected, [c.id for c in kept if c.kind in ("seed", "distribution")])
    return PreparedReference(
        data_dir=data_dir,
        shapes=shapes,
        cases=kept,
        expected=expected,
        calls=result["calls"],
        tolerances=tolerances,
        deterministic=deterministic,
        degenerate=degenerate,
        cost=result.get("cost", {}),
        dropped=dropped,
        timing=result.get("timing"),
        kernels=result.get("profile"),
    )


def _all_finite(leaves: list[Any]) -> bool:
    import torch

    return all(not (t.is_floating_point() or t.is_complex()) or bool(torch.isfinite(t).all()) for t in leaves if t is not None)
