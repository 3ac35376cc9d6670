"""Timing and profiling of one model on a GPU, in the judge (the reference) and in a candidate's
worker alike: the seed cases' inputs drawn on the device as input sets to rotate, as many as
fit TIMING_SET_BYTES twice over (the timer keeps a copy of each), okgit.eval.timing's protocol,
then one profiled call."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from okgit.eval import calls
from okgit.eval.jobs import Case, Job

TIMING_SET_BYTES = 8 * 2**30


def time_model(torch: Any, model: Any, module: ModuleType, seeds: list[Case], job: Job,
               device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """({"timing": ..., "profile": ...} as far as the job asks, {case id: the outputs of its last
    timed call}) for the candidate's check that timed outputs are still right."""
    from okgit.eval import timing
    from okgit.eval.profile import profile_calls

    sets = [calls.draw_inputs(torch, module, seeds[0], device)]
    per_set = calls.nbytes(sets[0]) or 1
    for case in seeds[1: max(1, min(len(seeds), TIMING_SET_BYTES // (2 * per_set)))]:
        sets.append(calls.draw_inputs(torch, module, case, device))

    def fn(*inputs: Any) -> Any:
        with torch.no_grad():
            return model(*inputs)

    out: dict[str, Any] = {}
    spot: dict[str, Any] = {}
    if job.timing:
        flush = timing.l2_flush_buffer(device)
        timed = timing.time_calls(fn, sets, warmup=job.timing.warmup, samples=job.timing.samples, flush=flush)
        del flush
        out["timing"] = {
            "samples_us": timed.samples_us, "median_us": timed.median_us,
            "batch_event_us": timed.batch_event_us, "batch_host_us": timed.batch_host_us,
            "residual_sync_us": timed.residual_sync_us, "batch_calls": timed.batch_calls,
        }
        spot = {seeds[c].id: result for c, result in timed.spot.items()}
    if job.profile:
        out["profile"] = profile_calls(lambda: fn(*sets[0]))
    return out, spot
