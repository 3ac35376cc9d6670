"""Timing and profiling of one model on a GPU, in the judge (the reference) and in a candidate's
worker alike: the seed cases' inputs drawn on the device as input sets to rotate, as many as
fit TIMING_SET_BYTES twice over (the timer keeps a copy of each), okgit.eval.worker.timing's protocol,
then one profiled call."""

from __future__ import annotations

from dataclasses import asdict, replace
from types import ModuleType
from typing import Any

from okgit.eval.protocol.jobs import Case, Job
from okgit.eval.worker import calls

TIMING_SET_BYTES = 8 * 2**30


def time_model(torch: Any, model: Any, module: ModuleType, seeds: list[Case], job: Job,
               device: str) -> tuple[dict[str, Any], list[tuple[Case, Any]]]:
    """({"timing": ..., "profile": ...} as far as the job asks, [(the salted case, its output)]
    of the timed samples the judge checks: timed outputs must still be right). Only a candidate's
    checked evaluation has them checked; any other timing (the final gate's rounds and the search's
    screen, `check=False`; the reference's, in the judge) keeps none: it would hold as many outputs
    as there are input sets until the timing ends, for nothing."""
    from okgit.eval.worker import timing
    from okgit.eval.worker.profiler import profile_calls

    sets = _input_sets(torch, module, seeds, device)

    def fn(*inputs: Any) -> Any:
        with torch.no_grad():
            return model(*inputs)

    out: dict[str, Any] = {}
    spot: list[tuple[Case, Any]] = []
    if job.timing:
        flush = timing.l2_flush_buffer(device)
        timed = timing.time_calls(fn, sets, warmup=job.timing.warmup, samples=job.timing.samples, flush=flush,
                                  keep_checked=job.keeps_checked())
        del flush
        out["timing"] = {
            "samples_us": timed.samples_us, "median_us": timed.median_us,
            "batch_event_us": timed.batch_event_us, "batch_host_us": timed.batch_host_us,
            "residual_sync_us": timed.residual_sync_us, "batch_calls": timed.batch_calls,
            "host_us": timed.host_us, "escaped": timed.escaped, "wake_us": timed.wake_us,
            "fenced": [asdict(f) for f in timed.fenced],
        }
        spot = [(replace(seeds[p.content], salt=p.salt), p.out) for p in timed.spot]
    if job.profile:
        out["profile"] = profile_calls(lambda: fn(*sets[0]))
    return out, spot


EXERCISE_SAMPLES = 6  # a CPU's untimed protocol, over two input sets: each slot holds each content, then again


def exercise_model(torch: Any, model: Any, module: ModuleType, seeds: list[Case],
                   device: str) -> list[tuple[Case, Any]]:
    """The timing protocol without a clock, where nothing is timed (a CPU): the same rotated,
    salted inputs and randomly picked checked samples, so a candidate that remembers outputs
    fails on a CPU too; every sample is checked (the interpreter's calls are few and the judge's
    cheap), so the verdict does not depend on which were picked. [(the salted case, its output)]."""
    from okgit.eval.worker import timing

    sets = _input_sets(torch, module, seeds[:2], device)
    slots = [[x.clone() if isinstance(x, torch.Tensor) else x for x in s] for s in sets]
    salt0, _ = timing.new_salt()
    spot: list[tuple[Case, Any]] = []
    for s in range(EXERCISE_SAMPLES):
        c, slot = timing.prepare_sample(s, slots, sets, salt0, torch.Tensor.copy_)
        with torch.no_grad():
            result = model(*slots[slot])
        spot.append((replace(seeds[c], salt=salt0 + s), result))
    return spot


def _input_sets(torch: Any, module: ModuleType, seeds: list[Case], device: str) -> list[list[Any]]:
    """The seed cases' inputs as sets to rotate (`set_count` of them)."""
    sets = [calls.draw_inputs(torch, module, seeds[0], device)]
    for case in seeds[1: set_count(calls.nbytes(sets[0]), len(seeds))]:
        sets.append(calls.draw_inputs(torch, module, case, device))
    return sets


def set_count(per_set: int, most: int) -> int:
    """How many input sets a timing rotates: as many as fit TIMING_SET_BYTES twice over (the timer
    keeps a copy of each), at least one, at most `most`. Sets larger than the L2 cache (flushed
    before every sample anyway) gain nothing from rotating: a GB input is timed from one set."""
    return max(1, min(most, TIMING_SET_BYTES // (2 * max(per_set, 1))))


def checked_timing_bytes(set_bytes: int, output_bytes: int, seeds: int, samples: int) -> int:
    """What a timing that keeps its checked samples' outputs (a candidate's checked evaluation,
    `time_model`) holds at its peak, from one input set's bytes and one output's: the input sets
    rotated and the timer's copy of each, a clone per checked sample, and the output in flight.
    The flush buffer (twice the L2 cache) is left out. The judge hands its cached memory back
    where the device has less free than this (okgit.eval.judge.prepared.must_release)."""
    from okgit.eval.worker import timing

    sets = set_count(set_bytes, seeds)
    return 2 * sets * set_bytes + (timing.checked_count(sets, samples) + 1) * output_bytes
