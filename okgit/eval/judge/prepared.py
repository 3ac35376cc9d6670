"""What the judge keeps of a prepared reference (its arms, per-case statistics, the expected
outputs it caches), when it hands device memory back, and how it picks the shapes it prepares
(okgit.eval.judge.process)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from okgit.eval.judge.tolerance import OutputSummary
from okgit.eval.protocol.checks import LeafTolerance
from okgit.eval.protocol.jobs import Case, Job
from okgit.eval.worker.measure import TIMING_SET_BYTES


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
    case_bytes: int = 0  # the largest case's inputs and outputs


def must_release(recomputed: bool, free: int, case_bytes: int) -> bool:
    """Whether the judge empties its allocator's cache after a check. A recomputed (or salted)
    case's memory stays cached in the judge's allocator once the check is over; handing it back
    costs seconds at large sizes (cudaFree now, cudaMalloc again at the next check: 2.5 s of
    release in an evaluation of KernelBench L1/39 on an H200, ~16 checks), so it goes back only
    when the device's `free` bytes are below what the candidate's worker may add before the next
    check: its next case twice over (inputs, their copy, outputs, and temporaries as large) and
    the timing's input sets. A candidate never runs short for what the judge merely caches while
    that much is free; a device shared with other problems has less free, and the judge
    releases."""
    return recomputed and free < 2 * case_bytes + TIMING_SET_BYTES


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
