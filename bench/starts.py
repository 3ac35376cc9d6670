"""Worker and judge starts on a GPU: what each holds the device for, by step, alone and in
batches; and whether an evaluator's timings still wait behind starts (the GPU's pool refills in
batches, okgit.eval.parent.pool). One call, one table.

    python bench/starts.py [--batches 1,4,10] [--evaluations 6] [--rounds 5] [--repeats 2]
    python bench/starts.py --smoke   # CPU: every step; no lock is held there, so no start is in the ledger

Part 1, for each batch size N: N workers started at once (as the pool starts a batch) and a
judge alone; the wall until all are ready, and from the device ledger (okgit.eval.protocol.ledger)
each start's seconds held and waited, and its steps' (`cuda`, `warm-up`, `profiler`).
Part 2: examples/01 evaluated back to back (fast mode; the op itself as its candidate, rejected
at backend_kernel, but every call and the timing run), then final-gate rounds in fresh workers
started ahead (`time_once`): the ledger's exclusive holds and what they waited (median, max,
sum), and the starts that held the device meanwhile.
Part 3 (a GPU only), the profiler's cost in a start (3.4-4.5 s of a 5-6 s start on the H200,
2026-12-05): in fresh processes, CUDA's context, a kernel, then a profiled call, then another
(`context first`); the profiler's session opened first, before CUDA is up (`profiler first`: on
2026-12-05 it brought CUDA up itself, 3.6 s); and okgit's order since then, an empty session
once CUDA and the warm-up kernel are up (`session after the kernel`, outside the start's hold):
whether the first profiled call after it is as fast as the second. Writes starts.json under $OUT
when set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from okgit.eval.parent.devices import DeviceHold  # noqa: E402
from okgit.eval.parent.local import LocalEvaluator  # noqa: E402
from okgit.eval.parent.sandbox import WorkerProcess, default_memory_limit  # noqa: E402
from okgit.eval.protocol.ledger import LEDGER_ENV  # noqa: E402
from okgit.eval.protocol.start import STAGE  # noqa: E402
from okgit.kernelbench.timeline import ledger_entries  # noqa: E402
from okgit.problem import load_problem  # noqa: E402

OP = ROOT / "examples" / "01_relu_bias_scale.py"
ORDERS = ("context first", "profiler first", "session after the kernel")  # the last: okgit's order since the 18th session
# one process, one order: each step's seconds, as JSON on its last line
PROFILER_ORDER = r'''
import json, sys, time
t = time.monotonic()
import torch
from torch.profiler import ProfilerActivity, profile
from okgit.eval.worker.profiler import profile_calls
steps = {"import": time.monotonic() - t}
def step(name, fn):
    global t
    t = time.monotonic(); fn(); steps[name] = round(time.monotonic() - t, 3)
def empty_session():
    with profile(activities=[ProfilerActivity.CUDA]):
        pass
if sys.argv[1] == "profiler first":
    step("empty session", empty_session)
    steps["cuda up after it"] = torch.cuda.is_initialized()
step("cuda", lambda: (torch.cuda.init(), torch.empty(1, device="cuda")))
buf = torch.zeros(16, device="cuda")
step("kernel", lambda: (buf.add_(1.0), torch.cuda.synchronize()))
if sys.argv[1] == "session after the kernel":  # as a worker opens it once its start's hold ends
    step("empty session", empty_session)
step("first profiled call", lambda: profile_calls(lambda: buf.add_(1.0), calls=1))
step("second profiled call", lambda: profile_calls(lambda: buf.add_(1.0), calls=1))
print(json.dumps(steps))
'''


def _stats(values: list[float]) -> dict[str, float | int | None]:
    return {"n": len(values), "median": round(statistics.median(values), 3) if values else None,
            "max": round(max(values), 3) if values else None, "sum": round(sum(values), 3)}


def _starts(entries: list[dict[str, Any]]) -> dict[str, Any]:
    starts = [e for e in entries if e.get("stage") == STAGE]
    steps = sorted({name for e in starts for name in e.get("steps", {})})
    after = sorted({name for e in starts for name in e.get("after", {})})  # once the hold ended (the profiler's session)
    return {"held_s": _stats([e["held_s"] for e in starts]), "wait_s": _stats([e["wait_s"] for e in starts]),
            "steps_median_s": {s: round(statistics.median([e["steps"].get(s, 0.0) for e in starts]), 3) for s in steps}
            | {f"{s} (after the hold)": round(statistics.median([e.get("after", {}).get(s, 0.0) for e in starts]), 3)
               for s in after}}


def batch(device: str, n: int, program: str, ledger: Path) -> dict[str, Any]:
    """N processes started at once; their exits held shared, as an evaluator's close holds them."""
    ledger.unlink(missing_ok=True)
    t0 = time.monotonic()
    procs = [WorkerProcess(device, default_memory_limit(), program=program) for _ in range(n)]
    ready = [p.wait_ready(300) for p in procs]
    wall = time.monotonic() - t0
    with DeviceHold(device if device != "cpu" else None, "close").region("shared"):
        for p in procs:
            p.close()
    return {"program": program, "n": n, "ready": sum(ready), "all_ready_s": round(wall, 3), **_starts(list(ledger_entries(ledger)))}


def evaluations(device: str, count: int, rounds: int, ledger: Path, smoke: bool) -> dict[str, Any]:
    ledger.unlink(missing_ok=True)
    problem = load_problem(OP, root=str(OP.parent))
    walls = []
    with LocalEvaluator(device=device) as ev:
        ev.reference(problem)
        for _ in range(count):
            walls.append(ev.evaluate(problem, problem.source, mode="fast").wall_s)
        if not smoke:  # the rounds time on a GPU only
            prep = ev.prepared(problem)
            ev.prestart_for(2 * rounds)
            for _ in range(2 * rounds):
                ev.time_once(problem, prep, problem.source, "triton")
    entries = list(ledger_entries(ledger))
    exclusive = [e for e in entries if e.get("mode") == "exclusive"]
    return {"evaluations": count, "rounds": 0 if smoke else rounds, "evaluation_wall_s": _stats(walls),
            "exclusive_wait_s": _stats([e["wait_s"] for e in exclusive]),
            "exclusive_held_s": _stats([e["held_s"] for e in exclusive]), "starts": _starts(entries),
            # an evaluation's worker, a round's timing-only one (no profiler session), the judge
            "starts_by_role": {role: _starts([e for e in entries if e.get("role") == role])
                               for role in sorted({str(e.get("role")) for e in entries if e.get("stage") == STAGE})}}


def profiler_orders(repeats: int) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    rows = []
    for _ in range(repeats):
        for order in ORDERS:
            proc = subprocess.run([sys.executable, "-c", PROFILER_ORDER, order], env=env, capture_output=True, text=True,
                                  timeout=120, check=False)
            lines = proc.stdout.strip().splitlines()
            rows.append({"order": order, **(json.loads(lines[-1]) if proc.returncode == 0 and lines
                                            else {"error": proc.stderr.strip()[-300:]})})
    return rows


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)


def table(rows: list[dict[str, Any]], evals: dict[str, Any], orders: list[dict[str, Any]]) -> str:
    lines = ["starts (N at once): program | N | ready | all ready s | held s median / max | waited s max | steps (median s)"]
    for r in rows:
        steps = ", ".join(f"{k} {v:.2f}" for k, v in r["steps_median_s"].items()) or "-"
        lines.append(f"{r['program'].rsplit('.', 1)[1]} | {r['n']} | {r['ready']} | {r['all_ready_s']:.2f} | "
                     f"{_fmt(r['held_s']['median'])} / {_fmt(r['held_s']['max'])} | {_fmt(r['wait_s']['max'])} | {steps}")
    w, held, starts = evals["exclusive_wait_s"], evals["exclusive_held_s"], evals["starts"]
    lines += ["", f"{evals['evaluations']} evaluations, then {evals['rounds']} rounds of 2 timings: evaluation wall median "
              f"{_fmt(evals['evaluation_wall_s']['median'])} s; {w['n']} exclusive holds ({_fmt(held['sum'])} s held), "
              f"waited median {_fmt(w['median'])} s, max {_fmt(w['max'])} s, sum {_fmt(w['sum'])} s; "
              f"{starts['held_s']['n']} starts held the device {_fmt(starts['held_s']['sum'])} s "
              f"(median {_fmt(starts['held_s']['median'])} s)"]
    for role, r in evals.get("starts_by_role", {}).items():
        steps = ", ".join(f"{k} {v:.2f}" for k, v in r["steps_median_s"].items()) or "-"
        lines.append(f"  {role}: {r['held_s']['n']} starts, held median {_fmt(r['held_s']['median'])} s, "
                     f"max {_fmt(r['held_s']['max'])} s; steps (median s): {steps}")
    for r in orders:
        lines.append(f"{r['order']}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in r.items() if k != "order"))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,4,10")
    parser.add_argument("--evaluations", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2, help="of each profiler order (part 3)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    import torch

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda:0"
    work = Path(tempfile.mkdtemp(prefix="okgit-starts-"))
    os.environ["OKGIT_DATA_DIR"] = str(work / "data")  # its own device lock: nothing else of okgit waits on it
    ledger = work / "ledger.jsonl"
    os.environ[LEDGER_ENV] = str(ledger)
    sizes = [int(n) for n in args.batches.split(",")] if not args.smoke else [1, 2]
    rows = [batch(device, n, "okgit.eval.worker", ledger) for n in sizes]
    rows.append(batch(device, 1, "okgit.eval.judge", ledger))
    evals = evaluations(device, args.evaluations if not args.smoke else 2, args.rounds, ledger, args.smoke)
    print(f"device {device}" + (" (smoke: no lock held, so no start in the ledger)" if device == "cpu" else ""))
    orders = profiler_orders(args.repeats) if device != "cpu" else []
    print(table(rows, evals, orders))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "starts.json").write_text(json.dumps({"device": device, "batches": rows,
                                                                      "evaluations": evals, "profiler_orders": orders},
                                                                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
