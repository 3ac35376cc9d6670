"""Where one evaluation's seconds go (`EvalResult.phase_s`), for the benchmark and the sweep's
report, never for a verdict.

Three clocks, each over what only it sees: the parent's (the static gate, preparing the
reference, waiting for a started worker and for the device's lock, reading the verdict), the
worker's (okgit.eval.worker.candidate accounts its job by gate, with drawing inputs, the first
call, waiting for the judge and for the device alone apart), and the judge's (per check: the
expected outputs, drawn and computed again where its cache does not hold them, then the
comparisons). They are folded into PHASES; `other` is what no clock saw (the evaluation's wall
less the rest), so the phases add up to the wall.
"""

from __future__ import annotations

PHASES = {
    "static": "parsing and the static gate",
    "reference": "preparing the reference (the problem's first evaluation only)",
    "worker_start": "waiting for a started worker to be ready (torch, the device)",
    "lock_wait": "waiting for the device's lock, shared, before the job",
    "load": "the worker loading the op files and building the models",
    "first_call": "the candidate's first call: its kernels' compile and first run",
    "draw": "drawing inputs on the device for the checked calls",
    "inputs_kept": "the checked calls' inputs copied before each call and compared after it (inputs_unchanged)",
    "calls": "the other checked calls (their outputs' facts, exported to the judge)",
    "judge_expected": "the judge's expected outputs (computed again where its cache does not hold them)",
    "judge_open": "the judge opening the worker's exported outputs (CUDA IPC on a GPU)",
    "judge_compare": "the judge's comparisons",
    "judge_fingerprint": "the judge's fingerprints of outputs (the determinism gate's pairs)",
    "judge_release": "the judge closing the worker's outputs and handing a recomputed case's memory back",
    "relay": "messages between worker, parent and judge (the worker's wait beyond the judge's work)",
    "device_wait": "waiting for the device alone before the timing",
    "timing": "timing and the profiled call, with their input sets",
    "exit": "the job's hand-over, the worker writing its result, exiting and its cleanup",
    "verdict": "reading the result and deciding the verdict",
    "other": "the wall no clock saw",
}
# the worker's own phases outside the checked calls (okgit.eval.worker.candidate): where each goes
_WORKER = {"load": "load", "compile": "load", "construct": "load", "first_call": "first_call", "draw": "draw",
           "inputs_kept": "inputs_kept", "device_wait": "device_wait", "timing": "timing", "write": "exit"}


def fold(parent: dict[str, float], worker: dict[str, float], judge: dict[str, float], worker_wall: float) -> dict[str, float]:
    """The phases without `other`: `parent` already in PHASES' names; `worker`, the worker's
    phase_s (its gates are `calls`; `judge`, its wait for the judge's answers, is split into the
    judge's own `expected`, `open`, `compare`, `fingerprint` and `release` seconds and the relay);
    `worker_wall`, the job's wall as the parent saw it (the hand-over and the process's exit are what the worker's clock misses)."""
    out = {name: 0.0 for name in PHASES if name != "other"}
    for name, seconds in parent.items():
        out[name] += seconds
    for name, seconds in worker.items():
        if name != "judge":
            out[_WORKER.get(name, "calls")] += seconds
    for name in ("expected", "open", "compare", "fingerprint", "release"):
        out[f"judge_{name}"] += judge.get(name, 0.0)
    out["relay"] += max(0.0, worker.get("judge", 0.0) - sum(judge.values()))
    out["exit"] += max(0.0, worker_wall - sum(worker.values()))
    return out


def with_other(phases: dict[str, float], wall: float) -> dict[str, float]:
    """The phases, rounded to milliseconds, with `other`: the wall that none of them holds."""
    done = {name: round(max(0.0, seconds), 3) for name, seconds in phases.items() if name != "other"}
    done["other"] = round(max(0.0, wall - sum(done.values())), 3)
    return done
