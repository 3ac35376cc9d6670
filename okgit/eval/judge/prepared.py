"""What the judge keeps of a prepared reference (its arms, per-case statistics, the expected
outputs it caches) and how it picks the shapes it prepares (okgit.eval.judge.process)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from okgit.eval.judge.tolerance import OutputSummary
from okgit.eval.protocol.checks import LeafTolerance
from okgit.eval.protocol.jobs import Case, Job


@dataclass
class Arm:
    """The reference at one shape (or built from the init_inputs case's arguments)."""

    module: ModuleType
    model: Any
    double: Any  # the float64 copy, None where the op has none or it does not fit
    init: list[Any]
    channels_last: Any = None  # the same model in channels_last, where it has 4-D or 5-D tensors (calls.layout_twin)


@dataclass
class CaseStats:
    """What the preparation keeps of one case's reference outputs."""

    finite: bool
    ref_errors: list[float]
    scales: list[float]
    dtypes: list[str]
    summary: OutputSummary
    nbytes: int  # inputs + outputs


@dataclass
class Prepared:
    job: Job
    shapes: list[dict[str, int]] = field(default_factory=list)
    arms: dict[int | str, Arm] = field(default_factory=dict)
    cases: dict[str, Case] = field(default_factory=dict)
    tolerances: dict[str, list[LeafTolerance]] = field(default_factory=dict)
    cache: dict[str, tuple[list[Any], list[Any] | None]] = field(default_factory=dict)
    cached_bytes: int = 0
    parts: dict[str, list[list[str]]] = field(default_factory=dict)  # modes case: [gate, what] per output


def shapes_of_inputs(torch: Any, module: ModuleType) -> list[Any]:
    """get_inputs() on the meta device (shapes, no data: KernelBench inputs reach 6 GB); on the
    CPU where an op of it has no meta version."""
    torch.manual_seed(0)
    try:
        with torch.device("meta"):
            return list(module.get_inputs())
    except Exception:  # noqa: BLE001 - drawn for real, as the shape is needed
        return list(module.get_inputs())


def shape_variants(main: dict[str, int]) -> list[dict[str, int]]:
    """Odd and smaller shapes from the knobs >= 8: all together first, then one knob at a time."""
    big = {k: v for k, v in main.items() if v >= 8}
    if not big:
        return []
    odd = {k: v - 1 if v % 2 == 0 else v - 2 for k, v in big.items()}
    half = {k: max(3, v // 2 - 1) for k, v in big.items()}
    out = [{**main, **odd}, {**main, **half}]
    out += [{**main, k: odd[k]} for k in big]
    return out
