"""okgit's own template kernels on development-set problems at their real sizes: correctness
against float64 by the evaluator's rule, and times against eager PyTorch and torch.compile.

    python3 bench/coverage_gpu.py [KB] [--problems "1:90,93;2:23"] [--time-limit S] [--samples N] [--smoke]

KB holds `level1/`, `level2/` (or `KernelBench/level1/`, ...; default `.kb`). The default
problems are those the scan, norm, loss and triangle lowering of this branch gives a kernel of
okgit's own (bench/coverage.py lists them). Per problem, every candidate the template proposer
makes (okgit.search.proposers.templates.plan, with no model) is checked once on the inputs
drawn on the device: each output, and each buffer the call updates (a batch norm's running
statistics), against the reference run in float64, allowed max(1e-4 * max|ref|, 4x the
reference's own fp32 error) plus 1e-4 relative, as the evaluator allows (okgit.eval.judge.tolerance).
Then eager, torch.compile (default mode) and each correct candidate are timed with the
evaluator's own protocol (okgit.eval.worker.timing: CUDA events, L2 flushed and the stream held
before every sample, warm-up excluded, median). A module in training mode that draws random
numbers (dropout) gets the same seed before every checked call.

--time-limit S (default 210) starts no problem after S seconds; the problems left are printed
as the `--problems` of the next call. Writes coverage_gpu.json to $OUT (default /tmp/out).
--smoke runs the same steps on the CPU under Triton's interpreter, at sizes scaled down as okgit
scales a CPU run, with no timing (shown as -).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_PROBLEMS = "1:15,33,90,93,99;2:11,15,19,23,27,31,39,51,75,79,83"
SMOKE_PROBLEMS = "1:33,90,93,99;2:75"
CPU_INPUT_LIMIT = 65536  # inputs' elements at --smoke: okgit's own for a CPU run


def level_dir(kb: Path, level: int) -> Path:
    for d in (kb / f"level{level}", kb / "KernelBench" / f"level{level}"):
        if d.is_dir():
            return d
    raise SystemExit(f"{kb}: no level{level}/ (nor KernelBench/level{level}/)")


def problem_paths(kb: Path, spec: str) -> list[tuple[str, Path]]:
    out = []
    for part in filter(None, spec.split(";")):
        level, ids = part.split(":")
        folder = level_dir(kb, int(level))
        for i in ids.split(","):
            found = sorted(folder.glob(f"{int(i)}_*.py"))
            if not found:
                raise SystemExit(f"{folder}: no problem {i}")
            out.append((f"{level}:{int(i)}", found[0]))
    return out


def scaled_knobs(torch, path: Path) -> dict[str, int]:
    """Knobs >= 16 halved until the inputs hold <= CPU_INPUT_LIMIT elements (as a CPU run)."""
    from okgit.eval.worker.calls import load_op
    from okgit.problem import shape_knobs

    knobs = shape_knobs(path.read_text(), str(path))
    while True:
        module = load_op(str(path), "okgit_scaled", knobs)
        with torch.device("meta"):
            n = sum(x.numel() for x in module.get_inputs() if isinstance(x, torch.Tensor))
        smaller = {k: v // 2 for k, v in knobs.items() if v >= 16}
        if n <= CPU_INPUT_LIMIT or not smaller:
            return knobs
        knobs.update(smaller)


def build(torch, module, device: str, state=None):
    from okgit.eval.worker.calls import build as build_model
    from okgit.eval.worker.calls import init_args

    model, _ = build_model(torch, module.Model if not hasattr(module, "ModelNew") else module.ModelNew,
                           init_args(torch, module, 0, device), device, state)
    return model


def call(torch, model, inputs, seed: int = 1234):
    torch.manual_seed(seed)  # dropout in training mode draws the same numbers in every arm
    with torch.no_grad():
        out = model(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check(torch, ref, state, cand, inputs, wide_inputs) -> tuple[bool, str]:
    """The candidate's outputs and updated buffers against float64, by the evaluator's rule; the
    reference and its float64 copy start from `state`, as the candidate did."""
    from okgit.eval.judge.tolerance import check_leaf, leaf_tolerance, reference_error

    ref.load_state_dict(state)
    wide_model = copy.deepcopy(ref).double()
    native = call(torch, ref, inputs) + [b.clone() for b in ref.buffers()]
    got = call(torch, cand, inputs) + [b.clone() for b in cand.buffers()]
    wide = call(torch, wide_model, wide_inputs) + [b.clone() for b in wide_model.buffers()]
    ref.load_state_dict(state)
    del wide_model
    if len(got) != len(native):
        return False, f"{len(got)} outputs and buffers, expected {len(native)}"
    worst = []
    for g, n, w in zip(got, native, wide):
        if not n.is_floating_point():
            if not torch.equal(g, n):
                return False, "an integer output or buffer differs"
            continue
        w = w.to(n.dtype) if w.dtype != torch.float64 and n.dtype != torch.float64 else w
        tol = leaf_tolerance(n, w, reference_error(n, w))
        leaf = check_leaf(g, {"exact": type(g) is torch.Tensor}, n, w, tol, "correctness")
        if not leaf.ok:
            return False, leaf.message[:300]
        worst.append(f"{leaf.max_abs:.2e} (allowed {tol.atol:.2e} + {tol.rtol:.0e}x)")
    return True, "; ".join(worst[:2])


def run_problem(torch, key: str, path: Path, device: str, samples: int, timed: bool) -> dict:
    from okgit.eval.types import Reference
    from okgit.eval.worker.calls import load_op
    from okgit.problem import load_problem
    from okgit.search.proposers.templates import plan
    from okgit.search.types import Context

    row: dict = {"problem": key, "file": path.name, "candidates": []}
    problem = load_problem(path, root=str(path.parent))
    notes: list[str] = []
    ctx = Context(problem=problem, reference=Reference(device=device, timed=False), backend="triton", device=device,
                  log=lambda type, **f: notes.append(str(f.get("message"))))
    proposals = plan(ctx)
    if not proposals:
        row["error"] = "; ".join(notes) or "no template candidate"
        return row
    knobs = scaled_knobs(torch, path) if device == "cpu" else {}
    module = load_op(str(path), "okgit_reference", knobs)
    torch.manual_seed(0)
    with torch.device(device):
        inputs = list(module.get_inputs())
    ref = build(torch, module, device)
    state = copy.deepcopy(ref.state_dict())  # timing in training mode moves the running statistics
    wide_inputs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    if timed:
        from okgit.eval.worker import timing

        timing.bind()
        flush = timing.l2_flush_buffer(device)

        def median_us(model) -> float:
            with torch.no_grad():
                return timing.time_calls(model, [inputs], warmup=3, samples=samples, flush=flush).median_us

        row["eager_us"] = median_us(ref)
        torch._dynamo.reset()
        started = time.monotonic()
        row["compile_us"] = median_us(torch.compile(ref))
        row["compile_wall_s"] = round(time.monotonic() - started, 1)
    with tempfile.TemporaryDirectory(prefix="okgit-coverage-gpu-") as tmp:
        for k, proposal in enumerate(proposals):
            cand_row: dict = {"origin": proposal.origin}
            row["candidates"].append(cand_row)
            try:
                file = Path(tmp) / f"candidate_{k}.py"  # a real file: @triton.jit reads its source
                file.write_text(proposal.source)
                cand_module = load_op(str(file), f"okgit_candidate_{k}", knobs)
                cand = build(torch, cand_module, device, state)
                ok, detail = check(torch, ref, state, cand, inputs, wide_inputs)
                cand_row.update(correct=ok, detail=detail)
                if ok and timed:
                    cand_row["okgit_us"] = median_us(cand)
            except Exception as e:  # noqa: BLE001 - a row of the table, not a crash of the script
                cand_row.update(correct=False, detail=f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
                                if str(e).strip() else type(e).__name__)
    return row


def best(row: dict) -> dict | None:
    timed = [c for c in row["candidates"] if c.get("okgit_us")]
    if timed:
        return min(timed, key=lambda c: c["okgit_us"])
    return next((c for c in row["candidates"] if c.get("correct")), None)


def table(rows: list[dict]) -> str:
    lines = ["| problem | okgit candidate | correct | max abs error | eager us | torch.compile us | okgit us | vs eager | vs compile |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = best(r) or (r["candidates"][0] if r["candidates"] else {})
        fig = [r.get("eager_us"), r.get("compile_us"), b.get("okgit_us")]
        cells = [f"{v:.1f}" if v else "-" for v in fig]
        ratios = [f"{fig[0] / fig[2]:.2f}x" if fig[0] and fig[2] else "-", f"{fig[1] / fig[2]:.2f}x" if fig[1] and fig[2] else "-"]
        verdict = "yes" if b.get("correct") else "no"
        detail = r.get("error") or b.get("detail", "")
        lines.append(f"| {r['problem']} {r['file'][:40]} | {b.get('origin', '-')} | {verdict} | {detail.replace('|', '/')[:120]} | "
                     + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", nargs="?", default=str(ROOT / ".kb"))
    parser.add_argument("--problems", help=f"LEVEL:ID,ID[;LEVEL:...] (default {DEFAULT_PROBLEMS}; --smoke: {SMOKE_PROBLEMS})")
    parser.add_argument("--time-limit", type=float, default=210.0, metavar="S", help="start no problem after S seconds")
    parser.add_argument("--samples", type=int, default=20, help="timed samples per arm")
    parser.add_argument("--smoke", action="store_true", help="CPU, Triton's interpreter, scaled sizes, nothing timed")
    args = parser.parse_args()
    if args.smoke and os.environ.get("TRITON_INTERPRET") != "1":  # it must be set before triton is imported
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    import torch

    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 1
    kb = Path(args.kb)
    todo = problem_paths(kb, args.problems or (SMOKE_PROBLEMS if args.smoke else DEFAULT_PROBLEMS))
    started = time.monotonic()
    rows, left = [], []
    for key, path in todo:
        if time.monotonic() - started > args.time_limit:
            left.append(key)
            continue
        t0 = time.monotonic()
        try:
            row = run_problem(torch, key, path, device, args.samples, timed=not args.smoke)
        except Exception as e:  # noqa: BLE001 - the reference itself failed: a row saying so
            row = {"problem": key, "file": path.name, "candidates": [], "error": f"{type(e).__name__}: {e}"[:300],
                   "trace": traceback.format_exc()[-2000:]}
        row["wall_s"] = round(time.monotonic() - t0, 1)
        rows.append(row)
        print(f"{key} {path.name}: {row['wall_s']} s", file=sys.stderr, flush=True)
        if device == "cuda":
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    print(f"device: {torch.cuda.get_device_name(0) if device == 'cuda' else 'CPU (interpreter, not timed)'}; "
          f"torch {torch.__version__}; wall {time.monotonic() - started:.0f} s")
    print(table(rows))
    if left:
        groups: dict[str, list[str]] = {}
        for key in left:
            level, i = key.split(":")
            groups.setdefault(level, []).append(i)
        print("left for the next call: --problems \"" + ";".join(f"{lv}:{','.join(ids)}" for lv, ids in groups.items()) + "\"")
    out = Path(os.environ.get("OUT") or "/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage_gpu.json").write_text(json.dumps({"rows": rows, "left": left}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
