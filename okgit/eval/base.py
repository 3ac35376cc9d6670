"""The Evaluator interface and a tiny in-memory evaluator for tests of the search and the CLI."""

from __future__ import annotations

from typing import Callable, Protocol, TypeVar

from okgit.eval.types import Comparison, EvalResult, Mode, ProfileData, Reference, Status
from okgit.problem import Problem

E = TypeVar("E", bound="EvaluatorBase")


class Evaluator(Protocol):
    """Judges candidates against a problem's reference. Implementations: local (one device, or a
    pool of devices), modal, in-memory. Closed when done (`with evaluator: ...`): its processes,
    containers or app stop there."""

    device: str
    width: int  # how many candidates it evaluates at once: the driver's largest batch
    on_note: Callable[[str], None] | None  # where it says what takes minutes (a Modal app's start); None: silent

    def reference(self, problem: Problem) -> Reference:
        """Validate and measure the reference. Raises OkgitError when the op file cannot run."""

    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        """Every correctness gate, then timing where the device allows it."""

    def evaluate_many(self, problem: Problem, sources: list[str], *, mode: Mode = "fast",
                      backend: str = "triton") -> list[EvalResult]:
        """`evaluate` of each source, up to `width` at once; results in the order of `sources`."""

    def compare(self, problem: Problem, source: str, *, rounds: int = 5, backend: str = "triton") -> Comparison:
        """The final gate: interleaved rounds of reference and candidate in fresh processes."""

    def screen(self, problem: Problem, source: str, *, backend: str = "triton") -> float | None:
        """One fast timing of `source` and no correctness call: its median in microseconds (every
        stream's work inside), for the search to drop a launch-setting variant slower than its best
        before checking it (okgit.search.driver); None where this evaluator times nothing, times on
        several devices, or the timing failed (the variant is then evaluated, which says why)."""

    def profile(self, problem: Problem, source: str, *, backend: str = "triton", base: ProfileData | None = None,
                runtime_us: float | None = None, tools: str = "auto", baseline: bool = False,
                last: bool = False) -> ProfileData | None:
        """The profiling pass, apart from any verdict: `base` (the evaluation's profile) with the
        hardware counters read in a fresh worker; None where this evaluator has no such pass.
        `last`: no pass follows (the search's final best), so no worker is started ahead for one."""

    def passed_thorough(self, problem: Problem, source: str, *, backend: str = "triton") -> bool:
        """Whether `source` passed a thorough evaluation here against this problem's reference as
        prepared now (the final gate's check): a later fast check of the same file is a subset of it."""

    def close(self) -> None:
        """Stop what it started (idle workers, judges, a Modal app); idempotent."""

    def __enter__(self) -> Evaluator: ...

    def __exit__(self, *exc: object) -> None: ...


class EvaluatorBase:
    """What every evaluator shares: one candidate at a time, and `with` closing it."""

    width = 1
    on_note: Callable[[str], None] | None = None  # set by its user (make_evaluator's on_note): only the CLI prints

    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        raise NotImplementedError

    def evaluate_many(self, problem: Problem, sources: list[str], *, mode: Mode = "fast",
                      backend: str = "triton") -> list[EvalResult]:
        return [self.evaluate(problem, s, mode=mode, backend=backend) for s in sources]

    def screen(self, problem: Problem, source: str, *, backend: str = "triton") -> float | None:
        return None  # nothing timed apart from an evaluation: every variant is evaluated

    def profile(self, problem: Problem, source: str, *, backend: str = "triton", base: ProfileData | None = None,
                runtime_us: float | None = None, tools: str = "auto", baseline: bool = False,
                last: bool = False) -> ProfileData | None:
        return None  # no profiling pass: the evaluation's own profile is all there is

    def passed_thorough(self, problem: Problem, source: str, *, backend: str = "triton") -> bool:
        return False  # remembers no verdict: a check evaluates

    def close(self) -> None:
        pass

    def __enter__(self: E) -> E:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InMemoryEvaluator(EvaluatorBase):
    """Decides by a function of the source (`verdict`), without running anything. For tests of
    the search and the final gate. `width`: the batch the driver may hand it (evaluated one after
    another all the same). `ref_runtime_us`: a timed reference of that runtime (else untimed, as
    on a CPU); `thorough`: the verdict of thorough evaluations (the final gate's), where it differs;
    `profiler`: the profiling pass, (source, the evaluation's profile) -> the profile with counters;
    `screener`: the search's screen, source -> its timing alone (None: not timed)."""

    def __init__(self, verdict: Callable[[str], EvalResult], device: str = "cpu", width: int = 1,
                 ref_runtime_us: float | None = None, thorough: Callable[[str], EvalResult] | None = None,
                 profiler: Callable[[str, ProfileData | None], ProfileData] | None = None,
                 screener: Callable[[str], float | None] | None = None) -> None:
        self.verdict = verdict
        self.device = device
        self.width = width
        self.ref_runtime_us = ref_runtime_us
        self.thorough = thorough or verdict
        self.profiler = profiler
        self.screener = screener
        self.calls: list[str] = []
        self.profiled: list[str] = []
        self.screened: list[str] = []
        self.held_thorough: set[str] = set()  # sources whose thorough verdict was correct

    def reference(self, problem: Problem) -> Reference:
        return Reference(device=self.device, timed=self.ref_runtime_us is not None, runtime_us=self.ref_runtime_us)

    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        self.calls.append(source)
        result = (self.thorough if mode == "thorough" else self.verdict)(source)
        if mode == "thorough" and result.status is Status.correct:
            self.held_thorough.add(source)
        return result

    def passed_thorough(self, problem: Problem, source: str, *, backend: str = "triton") -> bool:
        return source in self.held_thorough

    def screen(self, problem: Problem, source: str, *, backend: str = "triton") -> float | None:
        if self.screener is None:
            return None
        self.screened.append(source)
        return self.screener(source)

    def profile(self, problem: Problem, source: str, *, backend: str = "triton", base: ProfileData | None = None,
                runtime_us: float | None = None, tools: str = "auto", baseline: bool = False,
                last: bool = False) -> ProfileData | None:
        if self.profiler is None:
            return None
        self.profiled.append(source)
        return self.profiler(source, base)

    def compare(self, problem: Problem, source: str, *, rounds: int = 5, backend: str = "triton") -> Comparison:
        result = self.verdict(source)
        if result.status is not Status.correct or not result.timed:
            raise ValueError("compare needs a timed, correct candidate")
        base = result.ref_runtime_us or 1.0
        cand = result.runtime_us or 1.0
        return Comparison(
            rounds=rounds,
            baseline_us=[base] * rounds,
            candidate_us=[cand] * rounds,
            noise=0.0,
            wins=rounds if cand < base else 0,
            sign_test_p=0.5**rounds,
            speedup=base / cand,
            optimized=cand < base,
            slower=cand > base,
        )
