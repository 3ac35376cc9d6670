"""okgit's template candidates judged by okgit's own evaluator, at the problems' real sizes.

    python3 bench/judge.py --kb .kb [--problems "2:67,3"] [--origins conv_tf32,vendor_conv_cl]
                           [--mode fast|thorough] [--time-limit 400]
    python3 bench/judge.py --smoke   # CPU, Triton interpreter: the plumbing, nothing timed

bench/conv.py and bench/gemm.py time candidates by hand in one process (exploration figures);
this script asks the evaluator the sweep and `okgit optimize` use (every gate: the extra shapes,
the precision rule, two calls alike, the timing), so an arm's figure there can be read as a
verdict: status, the gate that failed and why, the candidate's and the reference's time and the
speedup, per template candidate (all of a problem's, or those whose origin holds one of
--origins). Rows land in $OUT/judge.json after every candidate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gemm import check_machine, problem_files  # noqa: E402


def judge(key: str, path: Path, evaluator, origins: list[str], mode: str, device: str) -> list[dict]:
    from okgit.eval.types import Reference
    from okgit.problem import load_problem
    from okgit.search.proposers.templates import plan
    from okgit.search.types import Context

    problem = load_problem(path)
    ctx = Context(problem=problem, reference=Reference(device=device, timed=device == "cuda"), backend="triton",
                  device=device)
    rows = []
    for p in plan(ctx):
        if origins and not any(o in p.origin for o in origins):
            continue
        r = evaluator.evaluate(problem, p.source, mode=mode)
        rows.append({"key": key, "origin": p.origin, "status": r.status.value,
                     "gate": r.error.gate if r.error else None, "message": r.error.message if r.error else None,
                     "us": r.runtime_us, "ref_us": r.ref_runtime_us, "speedup": r.speedup,
                     "max_abs_error": r.max_abs_error, "wall_s": r.wall_s})
        print(line(rows[-1]), flush=True)
    return rows


def line(row: dict) -> str:
    def us(v: float | None) -> str:
        return f"{v:.1f}" if v else "-"

    why = f"{row['gate']}: {row['message'][:160]}" if row["gate"] else ""
    speed = f"{row['speedup']:.2f}x" if row["speedup"] else "-"
    return (f"| {row['key']} | {row['origin']} | {row['status']} | {us(row['us'])} | {us(row['ref_us'])} | {speed} "
            f"| {row['wall_s']:.0f} s | {why} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path, help="a KernelBench folder (level1/, level2/)")
    parser.add_argument("--problems", default="2:67", help="LEVEL:ID,ID ... (default: %(default)s)")
    parser.add_argument("--origins", default="", help="comma-separated parts of the origins to judge (default: all)")
    parser.add_argument("--mode", default="fast", choices=["fast", "thorough"])
    parser.add_argument("--time-limit", type=float, default=400.0, help="start no problem after this many seconds")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    refused = check_machine(args, need_kb=True)
    if refused is not None:
        return refused
    from okgit.eval.parent.local import LocalEvaluator

    device = "cpu" if args.smoke else "cuda"
    out = Path(os.environ.get("OUT") or "/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    origins = [o for o in args.origins.split(",") if o]
    rows: list[dict] = []
    t0 = time.monotonic()
    print("| problem | origin | status | us | reference us | speedup | wall | why not |\n|---|---|---|---|---|---|---|---|",
          flush=True)
    evaluator = LocalEvaluator(device=device)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            kb = smoke_kb(Path(tmp)) if args.smoke else args.kb
            for key, path in problem_files(kb, "1:1" if args.smoke else args.problems):
                if time.monotonic() - t0 > args.time_limit:
                    print(f"{key}: not started (--time-limit {args.time_limit:.0f} s)", flush=True)
                    continue
                rows += judge(key, path, evaluator, origins, args.mode, device)
                (out / "judge.json").write_text(json.dumps({"mode": args.mode, "rows": rows}, indent=1) + "\n")
    finally:
        evaluator.close()
    print(f"okgit's evaluator ({args.mode}), {'CPU smoke: nothing timed' if args.smoke else 'GPU'}; "
          f"{time.monotonic() - t0:.0f} s", flush=True)
    return 0


def smoke_kb(tmp: Path) -> Path:
    (tmp / "level1").mkdir(parents=True)
    (tmp / "level1" / "1_Conv_gelu_mean.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.conv = nn.Conv2d(3, 8, 3)\n\n"
        "    def forward(self, x):\n        return torch.nn.functional.gelu(self.conv(x)).mean(dim=(2, 3))\n\n\n"
        "def get_inputs():\n    return [torch.randn(2, 3, 10, 12)]\n\n\ndef get_init_inputs():\n    return []\n")
    return tmp


if __name__ == "__main__":
    sys.exit(main())
