"""LocalEvaluator: the Evaluator on this machine's GPU, or its CPU through the Triton interpreter.

The parent (this module) never imports candidate code. It prepares the reference once per
problem in a reference worker, runs each candidate in a fresh worker (one pre-started idle
worker waits so that a warm evaluation pays no interpreter or CUDA start), and judges what
comes back (okgit.eval.verdict). Each GPU has its own file lock (okgit.eval.devices): jobs of
all okgit processes on one GPU take turns, so two evaluations never time each other's kernels,
while several GPUs work at once.
"""

from __future__ import annotations

import ast
import re
import atexit
import contextlib
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from okgit.errors import OkgitError
from okgit.eval import roofline
from okgit.eval.final_gate import summarize
from okgit.eval.gates import static_findings
from okgit.eval.jobs import PINNED_FLAGS, Job, Timing
from okgit.eval.devices import device_lock, physical_name
from okgit.eval.profile import profile_data
from okgit.eval.reference import PreparedReference, finish, new_data_dir
from okgit.eval.sandbox import Outcome, WorkerPool, default_memory_limit, read_result
from okgit.eval.types import Comparison, EvalError, EvalResult, GateResult, Mode, Reference, Status
from okgit.eval.verdict import allowed_matmul_rate, base_fields, crashed, judge
from okgit.problem import Problem, load_problem


@dataclass(frozen=True)
class ModeSpec:
    seeds: int
    warmup: int
    samples: int


MODES: dict[str, ModeSpec] = {"fast": ModeSpec(seeds=5, warmup=3, samples=10),
                              "thorough": ModeSpec(seeds=8, warmup=10, samples=100)}
SEED_BASE = 1000
COMPARE_TIMING = Timing(warmup=5, samples=30)
STARTUP_TIMEOUT_S = 300.0
MAX_IDLE = 10  # pre-started workers at most: each holds torch and a CUDA context (~1 GB of host memory)


class LocalEvaluator:
    def __init__(self, device: str | None = None, timeout_s: float | None = None,
                 memory_limit_bytes: int | None = None, prestart: bool = True, idle_workers: int | None = None) -> None:
        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":
            device = "cuda:0"
        if device != "cpu" and not re.fullmatch(r"cuda:\d+", device):
            raise OkgitError(f"unknown device {device!r} (cpu, cuda or cuda:N)")
        if device != "cpu":
            import torch

            if not torch.cuda.is_available():
                raise OkgitError(f"device {device}: no CUDA GPU is visible to torch {torch.__version__}"
                                 " (device cpu checks correctness only)")
        self._torch = device  # as this process addresses it; workers see only that GPU
        self._kind = "cpu" if device == "cpu" else "cuda"
        self.device = physical_name(device)  # how results name it, also under CUDA_VISIBLE_DEVICES
        # the interpreter is slow and a first Triton compile on a GPU takes seconds
        self.timeout_s = timeout_s or (300.0 if self._kind == "cpu" else 180.0)
        # a GPU worker takes ~4 s to start (torch + CUDA), two warm evaluations ~2 s each: keep three waiting
        self.pool = WorkerPool(memory_limit_bytes or default_memory_limit(),
                               idle=idle_workers or (3 if self._kind == "cuda" else 1))
        self.prestart = prestart
        self._prepared: dict[str, PreparedReference] = {}
        if prestart:
            self.pool.prestart(self._torch)  # they wait for their jobs, no candidate code loaded
        atexit.register(self.close)

    # ---- the Evaluator protocol -----------------------------------------------------------------
    def reference(self, problem: Problem) -> Reference:
        prep = self._prepare(problem, "fast")
        timing = prep.timing
        prof = None
        if prep.cost:
            rate, _ = allowed_matmul_rate(prep)
            roof = (roofline.position(prep.cost["flops"], prep.cost["min_bytes"], timing["median_us"], prep.peaks, rate)
                    if timing and prep.peaks else None)
            prof = profile_data(prep.kernels or {}, set(), launch_count=None, flops=prep.cost.get("flops"),
                                min_bytes=prep.cost.get("min_bytes"), roofline=roof)
        return Reference(
            device=self.device,
            timed=timing is not None,
            runtime_us=timing["median_us"] if timing else None,
            profile=prof,
            degenerate=prep.degenerate,
            shapes=[prep.shapes[i] for i in sorted({c.shape for c in prep.cases})],
            flags=dict(PINNED_FLAGS),
            hardware=prep.peaks or {"device": self.device},
        )

    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        t0 = time.monotonic()
        result = self._evaluate(problem, source, mode=mode, backend=backend)
        result.wall_s = time.monotonic() - t0
        return result

    def compare(self, problem: Problem, source: str, *, rounds: int = 5, backend: str = "triton") -> Comparison:
        if self._kind != "cuda":
            raise OkgitError("compare needs a GPU: no timing is claimed on a CPU")
        first = self.evaluate(problem, source, mode="fast", backend=backend)
        if first.status is not Status.correct:
            raise OkgitError(f"compare needs a correct candidate: {first.status.value}"
                             + (f" at {first.error.gate}: {first.error.message}" if first.error else ""))
        prep = self._prepare(problem, "fast")
        self.prestart_for(2 * rounds)
        base: list[float] = []
        cand: list[float] = []
        for _ in range(rounds):
            for src, root, into in ((problem.source, problem.root, base),
                                    (source, problem.candidate_root or problem.root, cand)):
                into.append(self.time_once(problem, prep, src, backend, root=root))
        return summarize(base, cand)

    def prestart_for(self, jobs: int) -> None:
        """Start workers for `jobs` back-to-back jobs at once (at most MAX_IDLE): rounds in fresh
        processes would otherwise wait, one after another, for each worker's torch and CUDA start."""
        if self.prestart:
            self.pool.prestart(self._torch, at_least=min(jobs, MAX_IDLE))

    def wait_warm(self, timeout_s: float = 120.0) -> bool:
        """Block until the pre-started workers are ready: what "a warm evaluation" is timed from."""
        return self.pool.wait_warm(self._torch, timeout_s)

    def close(self) -> None:
        self.pool.close()
        for prep in self._prepared.values():
            prep.close()
        self._prepared.clear()

    # ---- steps ----------------------------------------------------------------------------------
    def _evaluate(self, problem: Problem, source: str, *, mode: Mode, backend: str) -> EvalResult:
        base = {"device": self.device, "mode": mode, "flags": dict(PINNED_FLAGS)}
        try:
            tree = ast.parse(source)
        except SyntaxError as e:
            return _early(Status.compile_error, "compile", f"line {e.lineno}: {e.msg}", base)
        findings = static_findings(tree)
        if findings:
            return _early(Status.rejected, "static", "; ".join(str(f) for f in findings[:5]), base)
        prep = self._prepare(problem, mode)
        cases = list(prep.cases)
        base = base_fields(prep, cases, device=self.device, mode=mode)
        spec = MODES[mode]
        job = Job(role="candidate", source_path="", device=self._kind, backend=backend,
                  root=problem.candidate_root or problem.root,
                  data_dir=str(prep.data_dir), cases=cases, shapes=prep.shapes,
                  timing=Timing(spec.warmup, spec.samples) if self._kind == "cuda" else None,
                  profile=self._kind == "cuda")
        outcome, result, outputs = self._run(job, source, self.timeout_s)
        if result is None:
            return crashed(outcome, base)
        t0 = time.monotonic()
        with self._gpu():
            out = judge(prep, cases, result, outputs, backend=backend, device=self.device, mode=mode, base=base)
        if out.profile is not None:  # where an evaluation's time goes, for the benchmark
            out.profile.raw["eval_s"] = {**result.get("phase_s", {}), "ready_wait": outcome.ready_wait_s,
                                         "worker_total": outcome.wall_s, "judge": time.monotonic() - t0}
        return out

    def _prepare(self, problem: Problem, mode: Mode) -> PreparedReference:
        n_seeds = MODES[mode].seeds
        key = hashlib.sha256(repr((problem.source, problem.root, sorted(problem.knobs.items()), problem.extra_shapes,
                                   problem.atol, problem.rtol, n_seeds)).encode()).hexdigest()
        if key in self._prepared:
            return self._prepared[key]
        data_dir = new_data_dir()
        peaks_file = None
        if self._kind == "cuda":
            import torch

            peaks_file = roofline.peaks_path(torch.cuda.get_device_name(self._torch))
        job = Job(role="reference", source_path=str(data_dir / "reference.py"), device=self._kind, backend="torch",
                  root=problem.root, data_dir=str(data_dir), knobs=dict(problem.knobs),
                  extra_shapes=[dict(s) for s in problem.extra_shapes] if problem.extra_shapes is not None else None,
                  seeds=[SEED_BASE + i for i in range(n_seeds)],
                  timing=Timing(MODES[mode].warmup, MODES[mode].samples) if self._kind == "cuda" else None,
                  profile=self._kind == "cuda", peaks_path=str(peaks_file) if peaks_file else None)
        (data_dir / "reference.py").write_text(problem.source)
        outcome, result, _ = self._run(job, None, 3 * self.timeout_s)
        expected_file = data_dir / "expected.pt"
        if result is None or result.get("failure"):
            if result and result.get("failure"):
                why = _last_line(result["failure"]["message"])
            else:
                why = f"{outcome.describe()} during {outcome.phase}: {_last_line(outcome.stderr_tail)}"
            _remove(data_dir)
            raise OkgitError(f"{problem.path}: the reference does not run: {why}")
        import torch

        # on a GPU the parent compares there too: large outputs, seconds on a CPU
        with self._gpu():
            expected = torch.load(expected_file, weights_only=True, map_location=self._torch)
            expected_file.unlink()  # expected outputs live in this process only
            prep = finish(data_dir, result, expected, problem.rtol, problem.atol)
        if peaks_file is not None:
            prep.peaks = roofline.load_peaks(peaks_file)
        for path in data_dir.iterdir():
            path.chmod(0o444)
        self._prepared[key] = prep
        return prep

    def prepared(self, problem: Problem, mode: Mode = "fast") -> PreparedReference:
        return self._prepare(problem, mode)

    def time_once(self, problem: Problem, prep: PreparedReference, source: str, backend: str,
                  root: str | None = None) -> float:
        """Median event time of `source` in one fresh worker, without the correctness calls (the
        final gate's rounds, and the A/A check of the benchmark script)."""
        job = Job(role="candidate", source_path="", device=self._kind, backend=backend, root=root or problem.root,
                  data_dir=str(prep.data_dir), cases=[c for c in prep.cases if c.kind == "seed"],
                  shapes=prep.shapes, check=False, timing=COMPARE_TIMING)
        outcome, result, _ = self._run(job, source, self.timeout_s)
        if result is None or result.get("failure") or not result.get("timing"):
            why = result["failure"]["message"] if result and result.get("failure") else outcome.describe()
            raise OkgitError(f"a timing round failed: {why}")
        return float(result["timing"]["median_us"])

    def _gpu(self) -> contextlib.AbstractContextManager:
        """The device lock around anything this process or its worker runs on the GPU: loading
        and comparing outputs here would otherwise disturb another job's timing."""
        return device_lock(self._torch) if self._kind == "cuda" else contextlib.nullcontext()

    def _run(self, job: Job, source: str | None, timeout_s: float) -> tuple[Outcome, dict[str, Any] | None, dict[str, Any]]:
        """One job in one fresh worker; (outcome, result or None if it crashed, outputs)."""
        worker = self.pool.take(self._torch, prestart_next=self.prestart)
        try:
            if source is not None:
                path = worker.dir / "candidate.py"
                path.write_text(source)
                job.source_path = str(path)
            # started before the lock: spawning and importing never hold up another job's GPU work
            started = worker.wait_ready(STARTUP_TIMEOUT_S)
            with self._gpu() if started else contextlib.nullcontext():
                outcome = worker.run(job, timeout_s, startup_timeout_s=0.0)  # ready, or it never will be
                if outcome.crashed:
                    return outcome, None, {}
                result, outputs = read_result(worker.dir, self._torch)  # compared where the expected ones live
            return outcome, result, outputs
        finally:
            worker.close()


def evaluate_file(cand: str | Path, ref: str | Path, device: str | None = None, mode: Mode = "fast",
                  backend: str | None = "triton") -> EvalResult:
    """`okgit eval CAND --ref REF`: the reference file's Model against the candidate file."""
    ref_path = Path(ref).resolve()
    cand_path = Path(cand)
    if not cand_path.is_file():
        raise OkgitError(f"{cand}: no such file")
    problem = load_problem(ref_path, root=str(ref_path.parent))
    evaluator = LocalEvaluator(device=device, prestart=False)
    try:
        return evaluator.evaluate(problem, cand_path.read_text(), mode=mode, backend=backend or "triton")
    finally:
        evaluator.close()


def _early(status: Status, gate: str, message: str, base: dict[str, Any]) -> EvalResult:
    # Only the gate that ran: a file that does not parse never reached the static checks.
    gates = [GateResult(name=gate, passed=False, detail=message)]
    return EvalResult(status=status, error=EvalError(gate=gate, message=message), gates=gates, **base)


def _last_line(text: str) -> str:
    """The exception line of a traceback: what the user's code said, on one line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
