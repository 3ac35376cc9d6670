"""The host's cost of a launch (GPU): why a seed whose kernels add up to torch.compile's can still
take longer per call (conv_bn in training mode on the H200: the static seed's kernels 142.9 us
against torch.compile's 139.0, its call 300 us against 204).

Two measurements, each the host's time to issue calls (the device synchronized before, the loop
not synchronized inside; short enough that the launch queue never fills, so the time is the
host's alone):

- one Triton kernel with seven pointers and four sizes, launched N times through the JIT
  (`kernel[grid](...)`, what okgit's files do), and through the CompiledKernel the first launch
  returned (`compiled[grid](...)`, no argument binding or specialisation key);
- seed files (default: the saved conv_bn seeds of 2026-12-04), per call in eval and training
  mode, against torch.compile of the reference's forward (kept in the file as forward_reference): host us per call beside the device us per call
  (CUDA events over a synchronized loop).

    python bench/launch_overhead.py [OP.py ...] [--calls 50]

Prints a table; writes launch_overhead.json under $OUT (default /tmp/out).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "bench/results/2026-12-04-h200-checks/seed_layout/conv_bn"
OPS = [SEEDS / f"seed_{name}.py" for name in ("static", "own_sizes")]


@triton.jit
def _seven(a, b, c, d, e, f, out, n0, n1, n2, numel, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = x < numel
    v = tl.load(a + x, m) + tl.load(b + x % n0, m) + tl.load(c + x % n1, m) + tl.load(d + x % n2, m)
    tl.store(out + x, v + tl.load(e + x, m) * tl.load(f + x, m), m)


def _issue_us(fn: Any, calls: int) -> float:
    """Median over 5 rounds of the host's microseconds per call to issue `fn`."""
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def _device_us(fn: Any, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def launches(calls: int) -> dict[str, float]:
    n = 1 << 16
    t = [torch.randn(n, device="cuda") for _ in range(7)]
    args = (*t, 128, 64, 32, n)
    grid = (triton.cdiv(n, 1024), 1, 1)  # three dims: a CompiledKernel's launcher reads all three
    compiled = _seven[grid](*args, XBLOCK=1024)
    full = (*args, 1024)  # the launcher takes the constexprs too in some Triton versions, not in others
    try:
        compiled[grid](*full)
    except Exception:  # noqa: BLE001 - the other convention
        full = args
    return {"jit": _issue_us(lambda: _seven[grid](*args, XBLOCK=1024), calls * 7),
            "compiled": _issue_us(lambda: compiled[grid](*full), calls * 7),
            "torch_add": _issue_us(lambda: torch.add(t[0], t[1], out=t[6]), calls * 7)}


def op_rows(path: Path, calls: int) -> list[dict[str, Any]]:
    spec = importlib.util.spec_from_file_location(f"op_{path.stem}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    # torch.compile of the reference's own forward (the seed file keeps it as forward_reference);
    # the 2026-12-04 run compiled the seed's forward instead, so its compile rows are not a baseline
    compiled = torch.compile(model.forward_reference)
    rows = []
    with torch.no_grad():
        for mode in ("eval", "train"):
            model.train(mode == "train")
            for arm, fn in (("seed", model), ("compile", compiled)):
                for _ in range(3):
                    fn(*inputs)  # warm: compiled, autotuned, allocator primed
                rows.append({"op": path.stem, "mode": mode, "arm": arm,
                             "host_us": round(_issue_us(lambda: fn(*inputs), calls), 1),
                             "device_us": round(_device_us(lambda: fn(*inputs), calls), 1)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*", type=Path, default=OPS)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"triton": triton.__version__, "torch": torch.__version__,
                              "launch_us": launches(args.calls), "ops": []}
    print("host us per launch:", {k: round(v, 2) for k, v in result["launch_us"].items()}, flush=True)
    print("| op | mode | arm | host us per call | device us per call |\n|---|---|---|---|---|")
    for path in args.ops:
        try:
            rows = op_rows(path, args.calls)
        except Exception as e:  # noqa: BLE001 - one op's failure is a row, the others still run
            rows = [{"op": path.stem, "error": f"{type(e).__name__}: {e}"[:300]}]
        for r in rows:
            print(f"| {r['op']} | {r.get('mode', '-')} | {r.get('arm', r.get('error'))} | {r.get('host_us', '-')} | "
                  f"{r.get('device_us', '-')} |", flush=True)
        result["ops"] += rows
        (out / "launch_overhead.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
