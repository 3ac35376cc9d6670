"""Where a judge's device memory goes: the reference's preparation in this process, its memory
phase by phase (allocated at each phase's end) and every large device tensor still alive after it,
with what holds it. For a problem whose judge runs out of memory (KernelBench L1/96)."""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def census(torch, least: int) -> list[str]:
    """Every live device tensor of `least` bytes or more, with its holders up to three levels
    out (a frame by its function and line: the holder a leak most often is)."""
    gc.collect()
    rows: list[str] = []
    everything = gc.get_objects()  # itself a referrer of every object: left out of the holders
    for o in everything:
        if isinstance(o, torch.Tensor) and o.is_cuda and o.untyped_storage().nbytes() >= least:
            rows.append(f"{tuple(o.shape)} {o.dtype} {o.untyped_storage().nbytes() / 2**30:.2f} GiB: "
                        + "; ".join(chain(o, 3, {id(rows), id(everything)})))
    return rows


def chain(obj, depth: int, skip: set[int]) -> list[str]:
    import types

    out = []
    for r in gc.get_referrers(obj):
        if id(r) in skip or isinstance(r, types.FrameType) and r.f_code.co_name in ("census", "chain"):
            continue
        if isinstance(r, types.FrameType):
            out.append(f"frame {r.f_code.co_name} ({Path(r.f_code.co_filename).name}:{r.f_lineno})")
            continue
        name = type(r).__name__ + (f"[{len(r)}]" if isinstance(r, (list, tuple, dict)) else "")
        up = chain(r, depth - 1, skip | {id(obj)}) if depth > 1 else []
        out.append(name + (" <- (" + ", ".join(up[:4]) + ")" if up else ""))
    return out[:6]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kb", default=".kb")
    parser.add_argument("--problem", default="1:96")
    parser.add_argument("--measure", action="store_true", help="the reference's timing too")
    parser.add_argument("--no-profiler", action="store_true",
                        help="without torch.profiler's start beside the preparation (the judge's process has it)")
    args = parser.parse_args()
    import torch

    from okgit.eval.judge.process import Judge
    from okgit.eval.parent.reference import judge_job
    from okgit.eval.protocol.jobs import Timing
    from okgit.problem import load_problem

    level, pid = args.problem.split(":")
    path = next((Path(args.kb) / "KernelBench" / f"level{level}").glob(f"{pid}_*.py"))
    problem = load_problem(path)
    job = judge_job(problem, "cuda", str(path), [0, 1, 2, 3, 4], 2**34, None,
                    Timing(warmup=3, samples=10) if args.measure else None)
    judge = Judge("cuda")
    if not args.no_profiler:
        from okgit.eval.worker import calls

        judge.profiler_session = calls.open_profiler_aside("cuda")
    try:
        judge.prepare(job)
    finally:
        for name, peak, end, reserved, secs in judge.memory_trace or []:
            print(f"{name:40s} peak {peak / 2**30:7.2f} GiB  end {end / 2**30:7.2f}  reserved {reserved / 2**30:7.2f}  {secs} s")
        print(f"now allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB")
        for row in census(torch, 2**28):
            print(row)
    if args.measure:
        judge.measure()
        print(f"after timing: allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
