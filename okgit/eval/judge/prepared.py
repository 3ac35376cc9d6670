"""What the judge keeps of a prepared reference (its arms, per-case statistics, the expected
outputs it caches), what it decides from those statistics once every case ran (the cases
dropped where the reference is not finite, the tolerances fixed per leaf), when it hands
device memory back, how it picks the shapes it prepares (okgit.eval.judge.process), and what a
call of the reference costs (FLOPs, minimum bytes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from okgit.eval.judge.tolerance import OutputSummary, tolerance_from
from okgit.eval.protocol.checks import LeafTolerance
from okgit.eval.protocol.jobs import Case, CheckedTiming, Job, flatten
from okgit.eval.worker import calls
from okgit.eval.worker.measure import TIMING_SET_BYTES, checked_timing_bytes
from okgit.problem import least_work


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
    input_bytes: int  # its inputs alone (a seed case's: one input set of a timing)


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
    # a seed case's inputs and outputs: one input set of a candidate's timing, and one of its outputs
    set_bytes: int = 0
    output_bytes: int = 0

    def forget(self, case: Case) -> None:
        self.arms.pop(case.model, None)
        self.cases.pop(case.id, None)
        nbytes = sum(calls.held_bytes(part or []) for part in self.cache.pop(case.id, ([], None)))
        self.cached_bytes -= nbytes

    def drop_nonfinite(self, stats: dict[str, CaseStats], dropped: list[str]) -> list[Case]:
        # a variant (distribution, shape) where the reference stops being finite proves nothing
        base_finite = stats["s0"].finite
        kept = []
        for case in list(self.cases.values()):
            if case.kind != "seed" and base_finite and not stats[case.id].finite:
                dropped.append(f"{case.id}: the reference is not finite there")
                self.forget(case)
                continue
            kept.append(case)
        return kept

    def fix_tolerances(self, stats: dict[str, CaseStats], kept: list[Case], contraction: bool) -> None:
        """The reference's own error, worst over the cases of the same shape: fixed per leaf up front
        (`contraction`: the op does matmul or convolution FLOPs, its float32 outputs judged by precision)."""
        def key(case: Case) -> int | str:  # the modes case's outputs are its own: training, buffers, eval
            return case.id if case.kind == "modes" else case.shape

        worst: dict[tuple[int | str, int], float] = {}
        for case in kept:
            for j, err in enumerate(stats[case.id].ref_errors):
                worst[(key(case), j)] = max(worst.get((key(case), j), 0.0), err)
        job = self.job
        for case in kept:
            s = stats[case.id]
            self.tolerances[case.id] = [
                tolerance_from(s.dtypes[j], s.scales[j], worst[(key(case), j)], job.rtol, job.atol, contraction)
                if s.dtypes[j] else LeafTolerance(0.0, 0.0, 0.0)
                for j in range(len(s.dtypes))
            ]

    def timing_bytes(self, timing: CheckedTiming | None) -> int | None:
        """What the candidate's timing that keeps its checked outputs holds at its peak, sized as
        the worker sizes it, or None where no such timing is still to come in the job."""
        if timing is None:
            return None
        return checked_timing_bytes(self.set_bytes, self.output_bytes, timing.seeds, timing.samples)


def must_release(recomputed: bool, free: int, case_bytes: int, checked_timing: int | None = None) -> bool:
    """Whether the judge empties its allocator's cache after a check. A recomputed (or salted)
    case's memory stays cached in the judge's allocator once the check is over; handing it back
    costs seconds at large sizes (cudaFree now, cudaMalloc again at the next check: 2.5 s of
    release in an evaluation of KernelBench L1/39 on an H200, ~16 checks), so it goes back only
    when the device's `free` bytes are below what the candidate's worker may add before the next
    check: its next case twice over (inputs, their copy, outputs, and temporaries as large) and
    the timing's input sets. A candidate never runs short for what the judge merely caches while
    that much is free; a device shared with other problems has less free, and the judge
    releases.

    `checked_timing`: where the call checked comes before its job's timing that keeps the checked
    samples' outputs for the judge, what that timing holds at its peak (Prepared.timing_bytes:
    the input sets and their copies, a clone per checked sample, the output in flight), which can
    be far more than the input sets: KernelBench L1/63 on an 80 GB H100 (1 GiB inputs, 7.97 GiB
    outputs, four sets: 47.8 GiB) ran out of memory in its timing beside a judge that kept 28.8
    GiB, 25.9 GiB free being enough by the rule above. The judge then also hands back unless that
    whole timing fits in what is free (the memory the worker already holds, which its timing can
    reuse, is the margin), even after a check of a case it keeps: its allocator may still cache a
    timed check's recomputation from the evaluation before."""
    if recomputed and free < 2 * case_bytes + TIMING_SET_BYTES:
        return True
    return checked_timing is not None and free < checked_timing


PEAK_SALT = 1  # the salt of the check the preparation makes to measure a check's memory (`device_peaks`)



def count_cost(torch: Any, prep: Prepared, device: str) -> dict[str, Any]:
    """FLOPs of one call (as written, and the fewest its exact rewrites need) and its minimum
    bytes: inputs and parameters read once, outputs written once."""
    from torch.utils.flop_counter import FlopCounterMode

    arm = prep.arms[0]
    inputs = calls.draw_inputs(torch, arm.module, prep.cases["s0"], device)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = arm.model(*inputs)
    model = arm.model
    params = sum(t.nbytes for t in model.state_dict().values()) if isinstance(model, torch.nn.Module) else 0
    read = calls.nbytes(inputs) + params
    leaves = flatten(out)
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in leaves + [x for x in inputs
                                                                       if isinstance(x, torch.Tensor)]})
    counted = float(counter.get_total_flops())
    with open(prep.job.source_path, encoding="utf-8") as f:
        flops, rewrites = least_work(f.read(), prep.shapes[0], counted)
    # "flops": the work the op needs (okgit.problem.least_work), what the roofline's floor and position read
    return {"flops": flops, "counted_flops": counted, "rewrites": rewrites,
            "min_bytes": float(read + calls.nbytes(leaves)), "dtypes": dtypes}


def device_peaks(trace: list[list[Any]], cases: list[Case], cached: set[str]) -> tuple[int, int]:
    """The judge's device memory from its preparation's phases (rows of [phase, peak allocated,
    allocated at its end, peak reserved, seconds], each phase from an emptied allocator cache): (its peak
    as it recurs, its preparation's largest). What recurs is a check that computes a case again:
    a case whose expected outputs it does not keep, and a timed call's seed case, salted (the
    phase "reference: ID~SALT", which the preparation makes last, as a check does it). The cases
    it keeps, the determinism check and the FLOP count are the preparation's alone: on the H200
    (2026-12-05) KernelBench L1/45's judge reserved 83 GiB in its kept `signed` case, 49-51 GiB in
    its seed cases after the first, and was counted at 83 GiB, which kept every other problem off the device."""
    reserved: dict[str, int] = {}
    for name, _, _, peak, *_ in trace:
        reserved[str(name)] = max(reserved.get(str(name), 0), int(peak))
    largest = max(reserved.values(), default=0)
    again = [n for n in reserved if "~" in n] + [f"reference: {c.id}" for c in cases if c.id not in cached]
    return max((reserved[n] for n in again if n in reserved), default=largest), largest


def scale_for_cpu(torch: Any, job: Job, knobs: dict[str, int]) -> dict[str, int]:
    """Halve every knob >= 16 until the inputs hold <= limit elements (the interpreter is slow)."""
    current = dict(knobs)
    while True:
        module = calls.load_op(job.source_path, "okgit_reference_scaled", current)
        n = sum(x.numel() for x in shapes_of_inputs(torch, module) if isinstance(x, torch.Tensor))
        smaller = {k: v // 2 for k, v in current.items() if v >= 16}
        if n <= job.cpu_input_limit or not smaller:
            return current
        current.update(smaller)


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
