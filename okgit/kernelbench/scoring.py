"""A sweep's figures: per-problem results, fast_p, geomean, correctness rate, cost.

fast_p (KernelBench's figure) is the share of ALL selected problems whose kernel is correct
and faster than p times the baseline. Problems that crashed, timed out or found nothing
count in the denominator: leaving them out would flatter the score. Without timing (a CPU)
fast_0 is the correctness rate and the other thresholds are not claimed (None).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from okgit.eval.protocol.start import STAGE as START_STAGE
from okgit.fmt import fmt_speed, fmt_us

THRESHOLDS = (0.0, 1.0, 1.5, 2.0)
BASELINES = ("eager", "torch.compile")


class CrossCheck(BaseModel):
    """KernelBench's own evaluation of okgit's winner (`--cross-check`)."""

    correct: bool | None = None
    runtime_us: float | None = None
    ref_runtime_us: float | None = None
    error: str | None = None


STAGES = ("reference", "seeds", "search", "final gate", "check", "baselines")  # a problem's stages, in order
PROFILE = "profile"  # the profiling pass: its seconds lie within the stages' (the reference's, the search's)


class StageTime(BaseModel):
    """One stage of a problem (STAGES; okgit.kernelbench.timeline reads them): its wall time, and its holds on
    the device's lock: shared (beside other problems' work that times nothing) and exclusive (the
    device alone: timing, autotuning), and what it waited for the lock."""

    wall_s: float = 0.0
    shared_s: float = 0.0
    exclusive_s: float = 0.0
    wait_s: float = 0.0
    # exclusive seconds by what ran in the hold, where it was labelled (an Inductor benchmark
    # function, a worker's timing): nested labels overlap, so these may add up to more
    alone_for: dict[str, float] = Field(default_factory=dict)
    # Inductor's autotuning choices not benchmarked in full, hopeless at one timed call
    # (okgit.inductor.cutoff), and the device seconds held alone that saved, as estimated there
    cut: int = 0
    cut_saved_s: float = 0.0

    def plus(self, other: StageTime) -> StageTime:
        sums = {k: round(getattr(self, k) + getattr(other, k), 3)
                for k in ("wall_s", "shared_s", "exclusive_s", "wait_s", "cut_saved_s")}
        labels = {k: round(self.alone_for.get(k, 0.0) + other.alone_for.get(k, 0.0), 3)
                  for k in self.alone_for.keys() | other.alone_for.keys()}
        return StageTime(**sums, alone_for=labels, cut=self.cut + other.cut)


class ProblemResult(BaseModel):
    key: str  # level<N>/<id>_<Name>
    level: int
    id: int
    name: str
    # optimize's status (optimized|matched|fallback|unverified|interrupted), or error|timeout, or
    # incorrect: the winner disagreed with float64 eager in the baselines' own check
    status: str
    correct: bool = False  # okgit's winner passed every correctness gate
    device: str = "cpu"  # the physical device the problem ran on, e.g. "cuda:2"
    run_id: str | None = None
    best_tag: str | None = None
    timed: bool = False
    eager_us: float | None = None  # the reference as written
    compile_us: float | None = None  # torch.compile of the reference
    okgit_us: float | None = None  # okgit's winner
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    untimed_reason: str | None = None
    compile_s: float | None = None  # torch.compile's first call in the baselines (okgit.kernelbench.baselines)
    compile_cache: str | None = None  # whether Inductor's graph cache served that compile: hit, miss, not used
    gpu_s: float = 0.0  # wall seconds of the run's candidate evaluations (journal `evaluated` wall_s)
    eval_phase_s: dict[str, float] = Field(default_factory=dict)  # gpu_s by phase (okgit.eval.parent.phases)
    llm_usd: float = 0.0
    iterations: int = 0  # candidates evaluated
    best_iteration: int | None = None  # the candidate number of the winner: iterations to the best
    wall_s: float = 0.0  # over every call that worked on it (a problem resumed across sweeps adds up)
    error: str | None = None
    cross_check: CrossCheck | None = None
    time: dict[str, StageTime] = Field(default_factory=dict)  # stage -> where its time went (okgit.kernelbench.timeline)
    calls: int = 1  # the sweep calls that worked on it (more when it was in flight at a stop)
    modules_swapped: int | None = None  # level 3: the model's modules whose forward okgit's patch replaces
    noise: dict[str, float] = Field(default_factory=dict)  # level 3: arm -> spread of its round medians
    # the final gate's interleaved comparisons (a disturbed one run again counts twice), and how many
    # had a round of either arm far off its others (okgit.eval.parent.rounds.far_off): what disturbs timing
    gate_comparisons: int = 0
    gate_far_off: int = 0
    footprint_bytes: int | None = None  # the device memory admission last counted it at (its ledger's)

    def speedup(self, baseline: str) -> float | None:
        return self.speedup_eager if baseline == "eager" else self.speedup_compile

    @property
    def own_kernel(self) -> bool:
        """Whether okgit found a correct kernel of its own, handed out or (slower than the
        reference: `slower`) kept under its tag."""
        return self.correct or (self.status == "slower" and self.best_tag is not None)

    def speedup_kept(self, baseline: str) -> float | None:
        """What the user runs after okgit against `baseline`: the winner where a correct kernel was
        handed out and timed, else the reference itself, kept (eager: 1.0; torch.compile: its time
        over eager's); None where the baselines were not timed either."""
        if self.correct and (s := self.speedup(baseline)) is not None:
            return s
        if baseline == "eager":
            return 1.0 if self.eager_us else None
        return self.compile_us / self.eager_us if self.eager_us and self.compile_us else None


class BaselineScores(BaseModel):
    baseline: str
    fast_p: dict[str, float | None]  # threshold ("0", "1.0", ...) -> share of all problems
    geomean_speedup: float | None  # over the correct problems with a speedup against this baseline
    timed: int  # how many problems have a speedup against this baseline
    # over every problem whose baselines were timed, the reference counted where no kernel was
    # handed out (ProblemResult.speedup_kept): the figure a whole set's measure is, not only the wins
    geomean_kept: float | None = None
    kept_over: int = 0


class Summary(BaseModel):
    problems: int
    correct: int
    correctness_rate: float
    own_kernels: int = 0  # problems with a correct kernel of okgit's own, faster or not (ProblemResult.own_kernel)
    timed: int  # problems whose speedups were measured
    scores: list[BaselineScores]
    llm_usd: float
    cost_per_kernel: float | None  # LLM dollars per correct kernel
    gpu_s: float
    time: dict[str, StageTime] = Field(default_factory=dict)  # every problem's stages, added up


def threshold_key(p: float) -> str:
    return "0" if p == 0 else f"{p:.1f}"


def fast_p(results: list[ProblemResult], baseline: str, p: float) -> float | None:
    if not results:
        return None
    if p == 0:
        return sum(r.correct for r in results) / len(results)
    if not any(r.speedup(baseline) is not None for r in results):
        return None  # nothing was timed: no speed claim at all
    wins = sum(1 for r in results if r.correct and (s := r.speedup(baseline)) is not None and s > p)
    return wins / len(results)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(results: list[ProblemResult]) -> Summary:
    correct = sum(r.correct for r in results)
    scores = []
    for baseline in BASELINES:
        speedups = [s for r in results if r.correct and (s := r.speedup(baseline)) is not None]
        kept = [s for r in results if (s := r.speedup_kept(baseline)) is not None]
        scores.append(BaselineScores(
            baseline=baseline,
            fast_p={threshold_key(p): fast_p(results, baseline, p) for p in THRESHOLDS},
            geomean_speedup=geomean(speedups),
            timed=len(speedups),
            geomean_kept=geomean(kept),
            kept_over=len(kept),
        ))
    usd = sum(r.llm_usd for r in results)
    return Summary(
        problems=len(results), correct=correct,
        correctness_rate=correct / len(results) if results else 0.0, own_kernels=sum(r.own_kernel for r in results),
        timed=sum(r.timed for r in results), scores=scores,
        llm_usd=round(usd, 6), cost_per_kernel=round(usd / correct, 6) if correct else None,
        gpu_s=round(sum(r.gpu_s for r in results), 3),
        time=_total_time(results),
    )


def _total_time(results: list[ProblemResult]) -> dict[str, StageTime]:
    total: dict[str, StageTime] = {}
    for r in results:
        for stage, t in r.time.items():
            total[stage] = total.get(stage, StageTime()).plus(t)
    return total


class SweepReport(BaseModel):
    """What `okgit bench kernelbench --json` prints; report.json under --out holds the same."""

    dir: str
    out: str
    device: str  # "cuda" or "cpu": the kind of device the sweep ran on
    devices: list[str] = Field(default_factory=list)  # the physical devices of the pool
    parallel: int = 1
    flags: dict[str, Any] = Field(default_factory=dict)
    wall_s: float = 0.0
    problems: list[ProblemResult]
    summary: Summary
    cross_check: str | None = None  # why no cross-check ran, or what ran it
    notes: list[str] = Field(default_factory=list)
    # stopped (time limit, SIGTERM) before every problem finished: those in flight or not started,
    # by key; rerunning with the same --out resumes them (the ones in flight from their runs)
    pending: list[str] = Field(default_factory=list)
    in_flight: list[str] = Field(default_factory=list)
    calls_wall_s: float = 0.0  # the wall time of every call of this sweep so far, this one included
    # seconds with 1, 2, ... of its problems running at once (index k - 1), over every call so far:
    # what admission by memory let share the devices (okgit.kernelbench.timeline.running_at_once)
    running_at_once_s: list[float] = Field(default_factory=list)

    def markdown(self) -> str:
        lines = [
            f"# okgit KernelBench sweep: {self.dir}",
            "",
            (f"{self.summary.problems} problems on {', '.join(self.devices) or self.device} "
             f"(parallel {self.parallel}), wall {self.wall_s:.0f} s, results in {self.out}"),
            "",
            ("| problem | status | correct | eager us | compile us | okgit us | vs eager | vs compile "
             "| device s | LLM $ | iters to best |"),
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [_row(r) for r in self.problems]
        lines += _scores(self.summary)
        lines += _far_off_lines(self.problems)
        lines += _time_lines(self)
        lines += _phase_lines(self)
        if self.pending:
            lines.append(f"stopped before the end: {len(self.pending)} problem(s) not finished, "
                         f"{len(self.in_flight)} of them in flight and resumable from their runs; "
                         f"rerun with --out {self.out} to go on")
        if self.cross_check:
            lines.append(f"cross-check: {self.cross_check}")
            lines += [_cross_check(r.key, r.cross_check) for r in self.problems if r.cross_check]
        for note in self.notes + _disagreements(self.problems):
            lines.append(f"note: {note}")
        models = [r for r in self.problems if r.level == 3]
        if models:
            lines += ["", "Whole models (level 3), each a model campaign; its three arms timed in one process, interleaved; "
                      "noise: the spread of each arm's round medians; device min: the campaign's wall time, its GPU "
                      "held throughout.", "",
                      "| model | status | eager us | compile us | okgit us | vs eager | vs compile | noise e/c/o "
                      "| modules swapped | device min |", "|---|---|---|---|---|---|---|---|---|---|"]
            for r in models:
                noise = "/".join(f"{r.noise[a] * 100:.1f}%" if a in r.noise else "-" for a in ("eager", "compile", "okgit"))
                lines.append(f"| {r.key} | {r.status} | {fmt_us(r.eager_us)} | {fmt_us(r.compile_us)} | {fmt_us(r.okgit_us)} "
                             f"| {_x(r.speedup_eager, r)} | {_x(r.speedup_compile, r)} | {noise} "
                             f"| {r.modules_swapped if r.modules_swapped is not None else '-'} | {r.wall_s / 60:.1f} |")
        errors = [r for r in self.problems if r.error]
        if errors:
            lines += ["", "Errors:"] + [f"- {r.key}: {r.error}" for r in errors]
        return "\n".join(lines) + "\n"


DISAGREE_BELOW = 0.9  # a gap no timing noise should explain; a smaller one is left to the final gate's rounds


def _disagreements(problems: list[ProblemResult]) -> list[str]:
    """A winner handed out as at least as fast as eager (the run's final gate) that the live
    baselines time well below eager: two measurements of the same kernel that disagree, said so
    rather than left for a reader to spot (L1/87 on 122e097: `matched` at 0.51x)."""
    return [f"{r.key}: the run called its winner {r.status}, the live baselines time it at "
            f"{fmt_speed(r.speedup_eager)} eager: one of the two measurements is wrong"
            for r in problems if r.level < 3 and r.status in ("optimized", "matched") and r.speedup_eager is not None
            and r.speedup_eager < DISAGREE_BELOW]


def _row(r: ProblemResult) -> str:
    return (f"| {r.key} | {r.status} | {'yes' if r.correct else 'no'} | {fmt_us(r.eager_us)} | {fmt_us(r.compile_us)} "
            f"| {fmt_us(r.okgit_us)} | {_x(r.speedup_eager, r)} | {_x(r.speedup_compile, r)} | {r.gpu_s:.1f} "
            f"| {r.llm_usd:.4f} | {r.best_iteration if r.best_iteration is not None else '-'}/{r.iterations} |")


def _scores(s: Summary) -> list[str]:
    """fast_p per baseline at each threshold, then correctness, time and cost."""
    lines = [
        "",
        "| baseline | " + " | ".join(f"fast_{threshold_key(p)}" for p in THRESHOLDS)
        + " | geomean (correct, timed) | geomean (every problem; the reference where no kernel) |",
        "|---|" + "---|" * (len(THRESHOLDS) + 2),
    ]
    for b in s.scores:
        cells = " | ".join(_share(b.fast_p[threshold_key(p)]) for p in THRESHOLDS)
        gm = f"{b.geomean_speedup:.2f}x over {b.timed}" if b.geomean_speedup is not None else "-"
        kept = f"{b.geomean_kept:.2f}x over {b.kept_over}" if b.geomean_kept is not None else "-"
        lines.append(f"| {b.baseline} | {cells} | {gm} | {kept} |")
    lines += [
        "",
        f"correct {s.correct}/{s.problems} ({s.correctness_rate:.0%}); a correct kernel of okgit's own, "
        f"faster or not, on {s.own_kernels}; timed {s.timed}; "
        f"device time {s.gpu_s:.1f} s; LLM ${s.llm_usd:.4f}"
        + (f" (${s.cost_per_kernel:.4f} per correct kernel)" if s.cost_per_kernel is not None else ""),
    ]
    if not s.timed:
        lines.append("No timing on this device: fast_0 is the correctness rate; no speedup is claimed.")
    return lines


def _far_off_lines(problems: list[ProblemResult]) -> list[str]:
    compared = [r for r in problems if r.gate_comparisons]
    if not compared:
        return []
    far = [r for r in compared if r.gate_far_off]
    return ["", (f"final gates: {sum(r.gate_comparisons for r in compared)} interleaved comparisons over "
                 f"{len(compared)} problems, {sum(r.gate_far_off for r in far)} with a round of either arm far off "
                 f"its others (at least ten times their typical spread and 5%)"
                 + (": " + ", ".join(f"{r.key} ({r.gate_far_off})" for r in far) if far else ""))]


def _time_lines(report: SweepReport) -> list[str]:
    """Where the time went: per problem and in total, by stage; device seconds against wall."""
    timed = [r for r in report.problems if r.time]
    if not timed:
        return []
    stages = [s for s in STAGES if any(s in r.time for r in timed)]
    lines = ["", "Where the time went (seconds; wall, and the device's lock: shared s / exclusive s, waited s; "
             "the profiling pass within the stages, with its share of the wall and of the device held alone; "
             "memory: the device memory admission last counted the problem at):", "",
             "| problem | wall | " + " | ".join(stages) + " | profiling | device excl. | device shared | lock wait"
             " | memory GiB |",
             "|---|---|" + "---|" * (len(stages) + 5)]
    for r in timed:
        memory = f"{r.footprint_bytes / 2**30:.0f}" if r.footprint_bytes else "-"
        lines.append(f"| {r.key} | {r.wall_s:.0f} | " + " | ".join(_cell(r.time.get(s)) for s in stages)
                     + f" | {_profiling(r.time, r.wall_s)} | {_sum(r.time, 'exclusive_s'):.1f} | {_sum(r.time, 'shared_s'):.1f}"
                     f" | {_sum(r.time, 'wait_s'):.1f} | {memory} |")
    total, wall_total = report.summary.time, sum(r.wall_s for r in timed)
    lines.append(f"| **total** | {wall_total:.0f} | " + " | ".join(_cell(total.get(s)) for s in stages)
                 + f" | {_profiling(total, wall_total)} | {_sum(total, 'exclusive_s'):.1f} | {_sum(total, 'shared_s'):.1f}"
                 f" | {_sum(total, 'wait_s'):.1f} | - |")
    wall = report.calls_wall_s or report.wall_s
    lines += ["", f"device time: the problems held the device alone for {_sum(total, 'exclusive_s') / 60:.1f} min and "
              f"shared it for {_sum(total, 'shared_s') / 60:.1f} min; the sweep's wall so far {wall / 60:.1f} min "
              f"(this call {report.wall_s / 60:.1f} min)"]
    starts = total.get(START_STAGE)
    if starts is not None:
        lines.append(f"process starts (workers and judges bringing their device up, held shared, no timing beside "
                     f"them): {starts.shared_s:.1f} s held, {starts.wait_s:.1f} s waited, over every problem")
    if report.running_at_once_s:
        lines.append("problems running at once (seconds over every call, from admission to end or stop): "
                     + ", ".join(f"{k} for {s:.0f}" for k, s in enumerate(report.running_at_once_s, 1) if s))
    return lines + _alone_lines(total)


ALONE_SHOWN = 8  # the labels of exclusive holds named in the report, most seconds first


def _alone_lines(total: dict[str, StageTime]) -> list[str]:
    """What ran while the device was held alone, by stage and label, most seconds first: where a
    coarse region (an Inductor autotuning) outlasts the benchmarks nested in it, the rest was not
    benchmarking (compiling, say) and kept every other problem off the device."""
    seconds = {f"{stage}: {label}": s for stage, t in total.items() for label, s in t.alone_for.items()}
    if not seconds:
        return []
    top = sorted(seconds.items(), key=lambda kv: -kv[1])[:ALONE_SHOWN]
    lines = ["held alone, by what ran in the hold (seconds over every problem; nested labels overlap): "
             + ", ".join(f"{name} {s:.1f}" for name, s in top)]
    cut = {stage: t for stage, t in total.items() if t.cut}
    if cut:
        lines.append("autotuning choices cut at one timed call, hopeless (okgit.inductor.cutoff): "
                     + ", ".join(f"{stage}: {t.cut}, about {t.cut_saved_s:.1f} s held alone saved (estimated)"
                                 for stage, t in cut.items()))
    return lines


def _phase_lines(report: SweepReport) -> list[str]:
    """Where the candidate evaluations' seconds went, by phase (okgit.eval.parent.phases), per problem."""
    rows = [r for r in report.problems if r.eval_phase_s]
    if not rows:
        return []
    names = list(dict.fromkeys(name for r in rows for name in r.eval_phase_s))
    lines = ["", "Where the candidate evaluations' seconds went (by phase, added up over each problem's evaluations):",
             "", "| problem | evaluations | seconds | " + " | ".join(names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for r in rows:
        lines.append(f"| {r.key} | {r.iterations} | {r.gpu_s:.1f} | "
                     + " | ".join(f"{r.eval_phase_s.get(name, 0.0):.1f}" for name in names) + " |")
    return lines


def _cell(t: StageTime | None) -> str:
    if t is None:
        return "-"
    return f"{t.wall_s:.0f} ({t.shared_s:.0f}/{t.exclusive_s:.0f}, {t.wait_s:.0f})"


def _profiling(times: dict[str, StageTime], wall_s: float) -> str:
    """The pass's wall seconds, its share of the wall and of the seconds the device was held alone:
    on a device other problems share, what it keeps from them is the latter."""
    t = times.get(PROFILE)
    if t is None or not t.wall_s:
        return "-"
    alone = _sum(times, "exclusive_s")
    shares = [f"{100 * t.wall_s / wall_s:.0f}%"] if wall_s else []
    shares += [f"alone {100 * t.exclusive_s / alone:.0f}%"] if alone else []
    return f"{t.wall_s:.0f} ({'; '.join(shares)})" if shares else f"{t.wall_s:.0f}"


def _sum(times: dict[str, StageTime], field: str) -> float:
    return sum(getattr(t, field) for t in times.values())


def _cross_check(key: str, c: CrossCheck) -> str:
    verdict = "error: " + c.error if c.error else ("correct" if c.correct else "incorrect")
    return (f"- {key}: KernelBench says {verdict}"
            + (f", {c.runtime_us:.1f} us vs ref {c.ref_runtime_us:.1f} us" if c.runtime_us and c.ref_runtime_us else ""))


def _x(v: float | None, r: ProblemResult) -> str:
    return fmt_speed(v, missing="untimed" if r.correct else "-")


def _share(v: float | None) -> str:
    return f"{v:.0%}" if v is not None else "n/a"
