"""Live baselines for a sweep: eager reference, torch.compile of it, and okgit's winner.

The arms are timed in one process on one device, in training mode (the mode a module is built in,
in which the run's evaluator and KernelBench time), interleaved over rounds, with the
evaluator's own timer (okgit.eval.worker.timing: CUDA events, L2 flushed before each sample,
warm-up excluded, pre-generated input sets rotated, as many as the evaluator's timing rotates,
median; without the calls only its gates read, `checks=False`: no arm is judged here) and its pinned library flags, holding the device alone (the device's lock, exclusive);
the models are built, the inputs drawn and torch.compile compiled holding it shared, Inductor's
autotuning alone (okgit.inductor.locking), as a seed's compile holds it. Run as
`python -m okgit.kernelbench.baselines REF [WINNER [BACKEND]] [--device D] [--checked] [--model-patch]`
in a process pinned to one GPU; prints one JSON object. Without a winner (a problem okgit found
no kernel for) only eager and torch.compile are timed. `--checked`: the winner was checked
already, by the run's own evaluator (okgit.kernelbench.solve), so it is not checked again here.
On a CPU nothing is timed: no speedup is ever claimed from a CPU.

The torch.compile arm is torch.compile of the reference, default mode, in this process. Its
compile may be served by Inductor's graph cache (on disk, shared by the processes of this user),
which the problem's Inductor seed filled when it compiled the same reference at the same shapes
under the same pinned flags (the seed's static compile; okgit.inductor.capture generates every
graph afresh but saves it); Inductor keys a cached graph by the graph itself, its inputs' sizes
and types, its configuration and the versions, so a hit is the code a cold compile makes, and
its autotuning was done with the device held alone. `compile_s` and `compile_cache` in the result
say how long the compile took here and whether Inductor's graph cache served it.

Each arm's noise is the spread of its per-round medians ((max - min) / median over ROUNDS
rounds). `--model-patch` (a model campaign's patched model, okgit.campaign.model): the winner was
verified just before, so it is not checked again here; its state dict must be the reference's
(the same names, shapes, dtypes and values), on a CPU too.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
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
PRELOAD = ("torch._dynamo", "torch._inductor.compile_fx", "okgit.eval.parent.devices", "okgit.eval.worker.measure",
           "okgit.eval.worker.timing", "okgit.inductor.locking")  # what a measurement imports (_preload)
INPUT_SETS = 3  # at most; as many as the evaluator's timing rotates (okgit.eval.worker.measure.set_count)


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


def _time_arms(arms: dict[str, Callable], input_sets: list[list], device: str) -> tuple[dict[str, float], dict[str, float]]:
    """Median microseconds per arm, by the evaluator's own timer, and each arm's noise (the
    spread of its round medians); arms interleaved round by round so that clock and thermal
    drift hit all three alike."""
    import torch

    from okgit.eval.worker import timing

    timing.bind()
    flush = timing.l2_flush_buffer(device)
    samples: dict[str, list[float]] = {name: [] for name in arms}
    rounds: dict[str, list[float]] = {name: [] for name in arms}
    with torch.no_grad():
        for r in range(ROUNDS):
            for name, fn in arms.items():
                timed = timing.time_calls(fn, input_sets, warmup=WARMUP if r == 0 else 1,
                                          samples=SAMPLES_PER_ROUND, flush=flush, checks=False)
                samples[name] += timed.samples_us
                rounds[name].append(statistics.median(timed.samples_us))
    return ({name: statistics.median(ts) for name, ts in samples.items()},
            {name: (max(ms) - min(ms)) / statistics.median(ms) for name, ms in rounds.items() if statistics.median(ms)})


def _pin_flags() -> dict[str, Any]:
    """The evaluator's pinned library flags, so the baselines run torch as the evaluation did."""
    import torch

    from okgit.eval.protocol.jobs import PINNED_FLAGS
    from okgit.eval.worker.calls import pin_flags

    pin_flags(torch)
    return dict(PINNED_FLAGS)


def measure(ref_path: Path, winner_source: str | None, device: str = "cuda:0", backend: str = "triton",
            checked: bool = False, model_patch: bool = False) -> BaselineTimes:
    """Time the arms on `device` (no okgit arm without a winner); an arm that fails (e.g.
    torch.compile) is left out, named. The winner is checked again first (`check`) unless
    `checked` (the run's own evaluator did), or, a model campaign's patched model (`model_patch`),
    its state dict compared with the reference's."""
    import torch

    ref_source = ref_path.read_text()
    gpu = device.startswith("cuda") and torch.cuda.is_available()
    state = same_state(ref_path, winner_source, device if gpu else "cpu") if model_patch and winner_source is not None else None
    if not gpu:
        return BaselineTimes(device=device, timed=False, errors={"all": "no GPU: timing is not claimed"}, state=state)
    disagreement, error = ((None, None) if winner_source is None or model_patch or checked
                           else check(ref_path, winner_source, device, backend))
    from okgit.eval.parent.devices import DeviceHold, physical_name
    from okgit.eval.worker.calls import nbytes
    from okgit.eval.worker.measure import set_count
    from okgit.inductor.locking import exclusive_benchmarks

    result = BaselineTimes(device=physical_name(device), timed=True, flags=_pin_flags(), disagreement=disagreement,
                           state=state)
    if error:
        result.errors["okgit"] = error
    hold = DeviceHold(device, "baselines")
    alone_for_compile = not exclusive_benchmarks(hold)  # no benchmarker to hold it for: the compile holds it alone
    with tempfile.TemporaryDirectory(prefix="okgit-baselines-") as tmp:
        ref = _load(ref_source, "okgit_bench_ref", Path(tmp))
        win = _load(winner_source, "okgit_bench_winner", Path(tmp)) if winner_source is not None else None
        with hold.region("shared"):
            eager, fast = built(torch, ref, win, device)
            def drawn(seed: int) -> list[Any]:
                torch.manual_seed(seed)
                with torch.device(device):  # drawn there, as the evaluator draws: 17 GB on the host took a minute
                    return _to(device, ref.get_inputs())

            input_sets = [drawn(0)]
            input_sets += [drawn(seed) for seed in range(1, set_count(nbytes(input_sets[0]), INPUT_SETS))]
            arms: dict[str, Callable] = {"eager": eager}
            if fast is not None and not error:
                arms["okgit"] = fast
            with hold.region("exclusive", "torch.compile") if alone_for_compile else contextlib.nullcontext():
                compiled = _compiled(torch, eager, input_sets[0], device, result)
            if compiled is not None:
                arms["compile"] = compiled
            torch.cuda.synchronize(device)
        with hold.region("exclusive", "timing"):
            times, result.noise = _time_arms(arms, input_sets, device)
    result.eager_us = times.get("eager")
    result.compile_us = times.get("compile")
    result.okgit_us = times.get("okgit")
    return result


def built(torch: Any, ref: Any, win: Any | None, device: str) -> tuple[Any, Any | None]:
    """The reference's model and the winner's (None without one), built from the same seed and left
    in training mode, the mode a module is built in: the run's evaluator times every case but m0
    in it, as KernelBench does (eval mode here gave the sweep a second figure for a batch norm)."""
    from okgit.eval.protocol.jobs import MODEL_SEED

    init = ref.get_init_inputs()
    torch.manual_seed(MODEL_SEED)
    eager = ref.Model(*init).to(device)
    if win is None:
        return eager, None
    torch.manual_seed(MODEL_SEED)
    return eager, (getattr(win, "ModelNew", None) or win.Model)(*init).to(device)


def _compiled(torch: Any, eager: Any, inputs: list[Any], device: str, result: BaselineTimes) -> Any:
    """torch.compile of eager, compiled by its first call (None when it fails: the error is
    recorded); how long that took, and whether Inductor's caches held the graph, in `result`."""
    import time

    from torch._dynamo.utils import counters

    before = {k: counters["inductor"][k] for k in ("fxgraph_cache_hit", "fxgraph_cache_miss")}
    started = time.monotonic()
    try:
        compiled = torch.compile(eager)
        with torch.no_grad():
            compiled(*inputs)
        torch.cuda.synchronize(device)
    except Exception as e:  # noqa: BLE001 - an op torch.compile cannot handle: that baseline is missing, not zero
        result.errors["compile"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        return None
    result.compile_s = round(time.monotonic() - started, 2)
    hits, misses = (counters["inductor"][k] - before[k] for k in ("fxgraph_cache_hit", "fxgraph_cache_miss"))
    result.compile_cache = "hit" if hits and not misses else "miss" if misses else "not used"
    return compiled


def check(ref_path: Path, winner_source: str, device: str, backend: str = "triton",
          evaluator: Any = None) -> tuple[str | None, str | None]:
    """The winner checked again here, at the problem's default shapes, by the evaluator's own
    contract and code (okgit.eval.parent.one_shot.check_winner): both modes and the module's state where
    the reference has them. (disagreement, error): why it is wrong, why there is no verdict."""
    from okgit.eval.parent.local import LocalEvaluator
    from okgit.eval.parent.one_shot import check_winner
    from okgit.problem import load_problem

    problem = load_problem(ref_path.name, source=ref_path.read_text(), root=str(ref_path.parent))
    with contextlib.ExitStack() as owned:
        evaluator = evaluator or owned.enter_context(LocalEvaluator(device=device, prestart=False))
        return check_winner(evaluator, problem, winner_source, backend)


def same_state(ref_path: Path, winner_source: str, device: str = "cpu") -> str:
    """`unchanged`, or how the winner's state dict differs from the reference's, both built from
    the same arguments and seed on `device`."""
    import torch

    with tempfile.TemporaryDirectory(prefix="okgit-state-") as tmp:
        ref = _load(ref_path.read_text(), "okgit_state_ref", Path(tmp))
        win = _load(winner_source, "okgit_state_winner", Path(tmp))
        eager, fast = built(torch, ref, win, device)
        assert fast is not None  # a winner was given
        states = [eager.state_dict(), fast.state_dict()]
    want, got = states
    if list(got) != list(want):
        extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
        return f"other names: {', '.join(extra[:3]) or '-'} added, {', '.join(missing[:3]) or '-'} missing"
    for name, tensor in want.items():
        if got[name].shape != tensor.shape or got[name].dtype != tensor.dtype or not torch.equal(got[name], tensor):
            return f"{name} differs (shape, dtype or values)"
    return "unchanged"


def _preload() -> None:
    """What a measurement imports, imported while the problem's run goes on: torch, the compiler
    torch.compile's first call loads, the timer and the device's lock. Nothing here touches a device."""
    for module in PRELOAD:
        importlib.import_module(module)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m okgit.kernelbench.baselines")
    parser.add_argument("ref")
    parser.add_argument("winner", nargs="?")
    parser.add_argument("backend", nargs="?", default="triton")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--checked", action="store_true", help="the winner was checked by the run's own evaluator")
    parser.add_argument("--model-patch", action="store_true", help="a model campaign's patched model (see the docstring)")
    if (sys.argv[1:] if argv is None else argv) == ["--wait"]:  # started ahead (okgit.kernelbench.runs.Ahead)
        _preload()
        line = sys.stdin.readline()
        return main(json.loads(line)) if line.strip() else 0  # closed unused: nothing to do
    args = parser.parse_args(argv)
    winner = Path(args.winner).read_text() if args.winner else None
    print(json.dumps(measure(Path(args.ref).resolve(), winner, device=args.device, backend=args.backend,
                             checked=args.checked, model_patch=args.model_patch).model_dump(mode="json")))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # no interpreter teardown: its atexit work (torch.compile's pool of compile workers, its
    # caches) held each problem of an H100's sweep 5 s after the figures were printed
    os._exit(code)
