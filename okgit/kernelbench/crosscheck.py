"""`--cross-check`: score okgit's winner with KernelBench's own evaluation, when it is installed.

KernelBench loads `Model` from the reference and `ModelNew` from the candidate. okgit's
winner either defines `ModelNew` or rewrote `Model` itself; the latter is aliased. Run as
`python -m okgit.kernelbench.crosscheck REF WINNER` in a process pinned to one GPU; prints
one JSON object (a CrossCheck).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from pathlib import Path

from okgit.kernelbench.scoring import CrossCheck
from okgit.problem import top_level_names


def available() -> bool:
    return importlib.util.find_spec("kernelbench") is not None


def as_kernelbench_candidate(winner_source: str) -> str:
    if "ModelNew" in top_level_names(winner_source):
        return winner_source
    return winner_source.rstrip("\n") + "\n\n\nModelNew = Model  # okgit rewrote Model itself\n"


def cross_check(ref_source: str, winner_source: str, backend: str = "triton") -> CrossCheck:
    try:
        import torch
        from kernelbench.eval import eval_kernel_against_ref
    except ImportError as e:
        return CrossCheck(error=f"kernelbench is not importable: {e}")
    if not torch.cuda.is_available():
        return CrossCheck(error="KernelBench's evaluation needs a GPU")
    wanted = {
        "original_model_src": ref_source,
        "custom_model_src": as_kernelbench_candidate(winner_source),
        "num_correct_trials": 5,
        "num_perf_trials": 100,
        "measure_performance": True,
        "device": torch.device("cuda:0"),
        "backend": backend,
    }
    # KernelBench's signature has changed across releases: pass only what this one accepts.
    accepted = inspect.signature(eval_kernel_against_ref).parameters
    from okgit.eval.parent.devices import device_lock

    try:
        with device_lock("cuda:0"):  # it times on the GPU: other okgit jobs wait, as for their own timing
            r = eval_kernel_against_ref(**{k: v for k, v in wanted.items() if k in accepted})
    except Exception as e:  # noqa: BLE001 - KernelBench's own evaluator may raise anything: recorded
        return CrossCheck(error=f"{type(e).__name__}: {e}"[:300])
    if r is None:  # some releases return None when the candidate fails to build
        return CrossCheck(correct=False, error="KernelBench could not build the candidate")

    def us(ms) -> float | None:  # KernelBench reports milliseconds; -1 means "not measured"
        return float(ms) * 1000.0 if ms is not None and float(ms) > 0 else None

    return CrossCheck(correct=bool(getattr(r, "correctness", False)), runtime_us=us(getattr(r, "runtime", None)),
                      ref_runtime_us=us(getattr(r, "ref_runtime", None)))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print("usage: python -m okgit.kernelbench.crosscheck REF.py WINNER.py [BACKEND]", file=sys.stderr)
        return 2
    ref, winner = Path(args[0]).read_text(), Path(args[1]).read_text()
    print(json.dumps(cross_check(ref, winner, *args[2:]).model_dump(mode="json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
