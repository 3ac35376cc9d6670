"""Trust on one GPU, in one device call (issue 29): honest figures and their A/A noise before and
after a change to the timer, and the verdicts of the trust table's candidates.

    python3 bench/streams.py [--code NAME] [--stages aa,cases] [--resume FILE] [--time-limit S] [--smoke]

Run it once per code version in the same call (`PYTHONPATH=.old python3 bench/streams.py --code
old` for a checkout of the earlier commit in .old/, then `--code new`); both write
`streams-<code>.json` to $OUT (default: the working directory), rewritten after each row, and
`--resume` skips the rows a file already holds. Stages:
  aa     honest kernels (tests/ops: a row softmax at 32768 x 4096 fp32, ReLU at 16 x 4M): each
         evaluated twice (runtime, reference, speedup) and compared in 5 interleaved rounds in
         fresh processes (the final gate's A/A noise)
  cases  with the roofline gate off (OKGIT_TEST_NO_ROOFLINE): the side-stream variants
         (tests/ops/gpu) and the other rows of the trust table: outputs remembered by a
         fingerprint, a replaced Event.elapsed_time, launches that raise with a fallback, a
         single-pass TF32 matmul; each row's status, gate, time and the streams gate's detail
--smoke: the same on the CPU with tiny shapes (no time claimed), to check the plumbing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OPS = ROOT / "tests" / "ops"
CASES = ROOT / "tests" / "cases"
SIZES = {"softmax": ("batch_size = 64", "batch_size = 32768"), "relu": ("dim = 16384", "dim = 16384 * 256")}
AA = [("softmax", OPS / "softmax_triton.py"), ("relu", OPS / "relu_triton.py")]
# (row, op, candidate, backend)
TABLE = [
    ("side stream (Python, waits, never joined)", "relu", OPS / "gpu" / "side_stream.py", "triton"),
    ("side stream (waits for nothing)", "relu", OPS / "gpu" / "side_stream_unordered.py", "triton"),
    ("graph replayed on a side stream", "relu", OPS / "gpu" / "graph_side_stream.py", "triton"),
    ("CUDA source, its own non-blocking stream", "relu", OPS / "gpu" / "cuda_own_stream.py", "cuda"),
    ("two streams joined back (honest)", "relu", OPS / "gpu" / "two_streams_joined.py", "triton"),
    ("outputs remembered by a sampled fingerprint", "relu", CASES / "remember_fingerprint" / "candidate.py", "triton"),
    ("Event.elapsed_time replaced", "relu", CASES / "patches_event_by_name" / "candidate.py", "triton"),
    ("launches that raise, a fallback's outputs", "relu", CASES / "launch_raised_fallback" / "candidate.py", "triton"),
    ("single-pass TF32 dot in an fp32 matmul", "matmul", OPS / "gpu" / "matmul_tf32.py", "triton"),
]


def _evaluator_class() -> Any:
    try:
        from okgit.eval.parent.local import LocalEvaluator
    except ImportError:  # the layout before the evaluator's split by trust
        from okgit.eval.local import LocalEvaluator  # type: ignore[no-redef]
    return LocalEvaluator


def _problem(op: str, smoke: bool) -> Any:
    from okgit.problem import load_problem

    path = OPS / f"{op}.py"
    source = path.read_text()
    if not smoke and op in SIZES:
        source = source.replace(*SIZES[op])
    return load_problem(path, source=source, root=str(OPS))


def _row(result: Any) -> dict[str, Any]:
    streams = next((g.detail for g in result.gates if g.name == "streams"), "")
    return {"status": result.status.value, "gate": result.error.gate if result.error else None,
            "message": (result.error.message[:200] if result.error else ""), "runtime_us": result.runtime_us,
            "ref_runtime_us": result.ref_runtime_us, "speedup": result.speedup, "streams": streams}


def aa_rows(ev: Any, state: dict[str, Any], save: Any, deadline: float, smoke: bool) -> None:
    for op, cand in AA:
        key = f"aa:{op}"
        if key in state or time.monotonic() > deadline:
            continue
        problem, source = _problem(op, smoke), cand.read_text()
        runs = [_row(ev.evaluate(problem, source)) for _ in range(2)]
        row: dict[str, Any] = {"runs": runs}
        if not smoke:
            cmp = ev.compare(problem, source, rounds=5)
            row.update(noise=cmp.noise, compare_speedup=cmp.speedup, baseline_us=cmp.baseline_us,
                       candidate_us=cmp.candidate_us)
        state[key] = row
        save()


def case_rows(ev: Any, state: dict[str, Any], save: Any, deadline: float, smoke: bool) -> None:
    os.environ["OKGIT_TEST_NO_ROOFLINE"] = "1"
    for name, op, cand, backend in TABLE:
        key = f"case:{name}"
        if key in state or time.monotonic() > deadline or (smoke and "gpu" in cand.parts):
            continue
        t0 = time.monotonic()
        state[key] = {**_row(ev.evaluate(_problem(op, smoke), cand.read_text(), backend=backend)),
                      "wall_s": round(time.monotonic() - t0, 1)}
        save()


def table(state: dict[str, Any], code: str) -> list[str]:
    lines = [f"code {code}: honest kernels (two evaluations; A/A noise over 5 interleaved rounds)",
             "op | runtime us | reference us | speedup | A/A noise | rounds: baseline/candidate median us"]
    for op, _ in AA:
        row = state.get(f"aa:{op}")
        if not row:
            continue
        runs = row["runs"]
        fig = lambda k: " / ".join(f"{r[k]:.1f}" if r[k] else "-" for r in runs)  # noqa: E731
        sp = " / ".join(f"{r['speedup']:.3f}" if r["speedup"] else r["status"] for r in runs)
        noise = f"{row['noise'] * 100:.2f}%" if row.get("noise") is not None else "-"
        rounds = (f"{_med(row['baseline_us']):.1f}/{_med(row['candidate_us']):.1f}" if row.get("baseline_us") else "-")
        lines.append(f"{op} | {fig('runtime_us')} | {fig('ref_runtime_us')} | {sp} | {noise} | {rounds}")
    lines += ["", "candidate (roofline gate off) | status | gate | runtime us | speedup | streams detail"]
    for name, *_ in TABLE:
        row = state.get(f"case:{name}")
        if row:
            rt = f"{row['runtime_us']:.1f}" if row["runtime_us"] else "-"
            sp = f"{row['speedup']:.2f}x" if row["speedup"] else "-"
            lines.append(f"{name} | {row['status']} | {row['gate'] or '-'} | {rt} | {sp} | {row['streams'][:90] or '-'}")
    return lines


def _med(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", default="new", help="a name for the code being measured (default new)")
    ap.add_argument("--stages", default="aa,cases")
    ap.add_argument("--resume", help="an earlier streams-<code>.json: its rows are not run again")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--smoke", action="store_true", help="the CPU path, tiny shapes")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or ".").resolve()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"streams-{args.code}.json"
    state: dict[str, Any] = json.loads(Path(args.resume).read_text()) if args.resume else {}
    deadline = time.monotonic() + args.time_limit

    def save() -> None:
        path.write_text(json.dumps(state, indent=1, default=str))

    ev = _evaluator_class()(device="cpu" if args.smoke else "cuda")
    try:
        stages = args.stages.split(",")
        if "aa" in stages:
            aa_rows(ev, state, save, deadline, args.smoke)
        if "cases" in stages:
            case_rows(ev, state, save, deadline, args.smoke)
    finally:
        ev.close()
        save()
    print("\n".join(table(state, args.code)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
