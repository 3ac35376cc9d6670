"""Live baselines for a sweep: eager reference, torch.compile of it, and okgit's winner.

The arms are timed in one process on one device, interleaved over rounds, with the
evaluator's own timer (okgit.eval.worker.timing: CUDA events, L2 flushed before each sample,
warm-up excluded, pre-generated input sets rotated, median) and its pinned library flags,
under the device's cross-process lock. Run as
`python -m okgit.kernelbench.baselines REF [WINNER]` in a process pinned to one GPU; prints
one JSON object. Without a winner (a problem okgit found no kernel for) only eager and
torch.compile are timed. On a CPU nothing is timed: no speedup is ever claimed from a CPU.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from okgit.eval.types import BaselineTimes

ROUNDS = 5
SAMPLES_PER_ROUND = 20
WARMUP = 10
INPUT_SETS = 3


def _load(source: str, name: str, workdir: Path):
    path = workdir / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py path always has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _to(device: str, values):
    import torch

    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def _time_arms(arms: dict[str, Callable], input_sets: list[list], device: str) -> dict[str, float]:
    """Median microseconds per arm, by the evaluator's own timer; arms interleaved round by round
    so that clock and thermal drift hit all three alike."""
    import torch

    from okgit.eval.worker import timing

    timing.bind()
    flush = timing.l2_flush_buffer(device)
    samples: dict[str, list[float]] = {name: [] for name in arms}
    with torch.no_grad():
        for r in range(ROUNDS):
            for name, fn in arms.items():
                timed = timing.time_calls(fn, input_sets, warmup=WARMUP if r == 0 else 1,
                                          samples=SAMPLES_PER_ROUND, flush=flush)
                samples[name] += timed.samples_us
    return {name: statistics.median(ts) for name, ts in samples.items()}


def _pin_flags() -> dict[str, Any]:
    """The evaluator's pinned library flags, so the baselines run torch as the evaluation did."""
    import torch

    from okgit.eval.protocol.jobs import PINNED_FLAGS
    from okgit.eval.worker.calls import pin_flags

    pin_flags(torch)
    return dict(PINNED_FLAGS)


def measure(ref_path: Path, winner_source: str | None, device: str = "cuda:0", backend: str = "triton") -> BaselineTimes:
    """Time the arms on `device` (no okgit arm without a winner); an arm that fails (e.g.
    torch.compile) is left out, named. The winner is checked again first (`check`)."""
    import torch

    ref_source = ref_path.read_text()
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return BaselineTimes(device=device, timed=False, errors={"all": "no GPU: timing is not claimed"})
    disagreement, error = check(ref_path, winner_source, device, backend) if winner_source is not None else (None, None)
    from okgit.eval.parent.devices import device_lock, physical_name
    from okgit.eval.protocol.jobs import MODEL_SEED

    result = BaselineTimes(device=physical_name(device), timed=True, flags=_pin_flags(), disagreement=disagreement)
    if error:
        result.errors["okgit"] = error
    with tempfile.TemporaryDirectory(prefix="okgit-baselines-") as tmp:
        ref = _load(ref_source, "okgit_bench_ref", Path(tmp))
        win = _load(winner_source, "okgit_bench_winner", Path(tmp)) if winner_source is not None else None
        # the lock over all of it, compilation included: torch.compile benchmarks its kernel
        # configurations on the GPU at the first call, which would disturb another job's timing
        with device_lock(device):
            init = ref.get_init_inputs()
            torch.manual_seed(MODEL_SEED)
            eager = ref.Model(*init).to(device).eval()
            input_sets = []
            for seed in range(INPUT_SETS):
                torch.manual_seed(seed)
                input_sets.append(_to(device, ref.get_inputs()))
            arms: dict[str, Callable] = {"eager": eager}
            if win is not None:
                torch.manual_seed(MODEL_SEED)
                fast = getattr(win, "ModelNew", win.Model)(*init).to(device).eval()
                if not error:
                    arms["okgit"] = fast
            try:
                compiled = torch.compile(eager)
                with torch.no_grad():
                    compiled(*input_sets[0])
                arms["compile"] = compiled
            except Exception as e:  # noqa: BLE001 - an op torch.compile cannot handle: that baseline is missing, not zero
                result.errors["compile"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            times = _time_arms(arms, input_sets, device)
    result.eager_us = times.get("eager")
    result.compile_us = times.get("compile")
    result.okgit_us = times.get("okgit")
    return result


def check(ref_path: Path, winner_source: str, device: str, backend: str = "triton",
          evaluator: Any = None) -> tuple[str | None, str | None]:
    """The winner checked again here, at the problem's default shapes, by the evaluator's own
    contract and code (okgit.eval.parent.local.check_winner): both modes and the module's state where
    the reference has them. (disagreement, error): why it is wrong, why there is no verdict."""
    from okgit.eval.parent.local import LocalEvaluator, check_winner
    from okgit.problem import load_problem

    problem = load_problem(ref_path.name, source=ref_path.read_text(), root=str(ref_path.parent))
    with contextlib.ExitStack() as owned:
        evaluator = evaluator or owned.enter_context(LocalEvaluator(device=device, prestart=False))
        return check_winner(evaluator, problem, winner_source, backend)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2, 3):
        print("usage: python -m okgit.kernelbench.baselines REF.py [WINNER.py [BACKEND]]", file=sys.stderr)
        return 2
    winner = Path(args[1]).read_text() if len(args) >= 2 else None
    print(json.dumps(measure(Path(args[0]).resolve(), winner, backend=args[2] if len(args) == 3 else "triton")
                     .model_dump(mode="json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
