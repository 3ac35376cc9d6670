"""okgit's pooling kernel against eager at the development set's real sizes, over its launch settings.

    python3 bench/pool_speed.py KB [--problems level1/45,level1/42] [--time-limit S] [--smoke]

KB holds level1/ and level2/ (a KernelBench checkout's KernelBench/ folder, or the checkout
itself; the lead's copy is `.kb/`). Per problem (default: L1/45, average pooling 2D, window 11
stride 11 on 16x64x2048x2048; L1/42, max pooling 2D, window 4 stride 1 padding 1 on
32x64x512x512; a level-2 problem whose pooling okgit fuses may be named too), at its real size:

- okgit's candidate built as `okgit optimize` builds it (the template proposer's first candidate
  with the pool kind, bench/pool_conv.py's `candidate`), run at the settings it was lowered
  with (`default`) and at a few others (SETTINGS: BLOCK_ROWS x BLOCK_W output tiles, ROW_LANES
  taps of a window row across lanes, NUM_WARPS, SHARED_ROWS output rows reading each input row
  once between them, 0 for each row on its own: then BLOCK_ROWS does not count);
- each checked against the reference computed in float64 on the GPU: correct when its error is
  within max(2 x eager's, 1e-4 x max|ref|) (okgit's rule: no worse than the reference itself);
- eager and each correct setting timed by triton.testing.do_bench (CUDA events, L2 cleared
  before each call, warm-up, median), with the bandwidth that gives (input and output bytes).

Prints one table (problem, settings, us, GB/s, x eager), writes $OUT/pool_speed.json (OUT
defaults to /tmp/out) after every problem, and starts no setting after --time-limit seconds.

--smoke: CPU, Triton interpreter, the problems' knobs halved to tiny inputs, every setting run
and checked, nothing timed: the plumbing only.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pool_conv import _row_lanes, built, candidate, device_for, fmt, leaves, max_err, nbytes, timer, tiny_knobs

PROBLEMS = "level1/45,level1/42"
# (BLOCK_ROWS, BLOCK_W, ROW_LANES, NUM_WARPS, SHARED_ROWS) beside the lowered defaults, likeliest
# first (each costs a compile); ROW_LANES is capped by the window row in the launcher (next power
# of two), so at a narrow window some coincide and run once
SETTINGS = [(4, 64, 1, 4, 0), (1, 32, 16, 4, 0), (1, 128, 1, 4, 8), (1, 64, 16, 8, 0), (2, 64, 4, 4, 0),
            (1, 64, 4, 8, 0), (1, 128, 1, 4, 16), (1, 256, 1, 8, 8), (1, 256, 1, 8, 0), (8, 64, 1, 8, 0)]
NAMES = ("BLOCK_ROWS", "BLOCK_W", "ROW_LANES", "NUM_WARPS", "SHARED_ROWS")
CONSTANT = re.compile(r"^(FUSED_POOL_\d+)_(BLOCK_ROWS|BLOCK_W|ROW_LANES|NUM_WARPS|SHARED_ROWS): int = (\d+)$", re.MULTILINE)


def problem_path(kb: Path, spec: str) -> Path:
    """`level1/45` -> the problem file numbered 45 in kb/level1."""
    if not (kb / "level1").is_dir() and (kb / "KernelBench" / "level1").is_dir():
        kb = kb / "KernelBench"  # a checkout's root
    level, number = spec.split("/")
    (path,) = (kb / level).glob(f"{number}_*.py")
    return path


def defaults(source: str) -> tuple[list[str], tuple[int, ...]]:
    """The candidate's pooling kernels (their constants' prefixes) and the first one's settings."""
    found = CONSTANT.findall(source)
    names = sorted({n for n, _, _ in found})
    first = {k: int(v) for n, k, v in found if n == names[0]}
    return names, tuple(first[k] for k in NAMES)


def run_problem(spec: str, args, bench, device: str, deadline: float) -> dict:
    import torch

    path = problem_path(args.kb, spec)
    source = path.read_text()
    row: dict = {"problem": spec, "file": path.name, "settings": []}
    cand, origin = candidate(source, str(path))
    row["origin"] = origin
    if cand is None or "pool" not in origin.split(":")[-1].split("+"):
        row["skipped"] = origin if cand is None else f"the first candidate has no pooling kernel: {origin}"
        return row
    knobs = tiny_knobs(source) if args.smoke else {}
    names, lowered = defaults(cand)
    cand_mod, model, mine, inputs, _, calls = built(source, cand, knobs, device)  # calls: each launch's window
    with torch.no_grad():
        want = copy.deepcopy(model).double()(*[t.double() if t.is_floating_point() else t for t in inputs])
        out = model(*inputs)
        row["shapes"] = [list(t.shape) for t in inputs]
        row["bytes"] = nbytes(list(inputs) + list(model.state_dict().values()) + leaves(out))
        row["eager_err"] = max_err(out, want)
        scale = max((w.abs().nan_to_num(0.0).max().item() for w in leaves(want)), default=0.0)
        del out
        row["eager_us"] = bench(lambda: model(*inputs))
        print(f"  {spec} eager: {row['eager_us']} us, err {row['eager_err']:.1e}", flush=True)  # before a timeout can cut the table
        seen = set()
        settings = [("default", lowered)] + [("alt", c) for c in SETTINGS[: 2 if args.smoke else None]]
        for label, conf in settings:
            if time.monotonic() > deadline:
                row["cut"] = True  # the settings left were not run
                break
            for n in names:
                for k, v in zip(NAMES, conf, strict=True):
                    setattr(cand_mod, f"{n}_{k}", v)
            calls.clear()
            got = mine(*inputs)
            # the lanes it ran with; with shared rows BLOCK_ROWS is not read
            conf = (0 if conf[4] else conf[0], conf[1], _row_lanes(cand_mod, names, calls, conf[2]), *conf[3:])
            if conf in seen:
                continue
            seen.add(conf)
            err = max_err(got, want)
            del got
            entry = {"label": label, **dict(zip((k.lower() for k in NAMES), conf, strict=True)), "err": err,
                     "correct": err <= max(2 * row["eager_err"], 1e-4 * scale)}
            if entry["correct"]:
                entry["us"] = bench(lambda: mine(*inputs))
            row["settings"].append(entry)
            print(f"  {spec} {conf}: {entry.get('us')} us, err {err:.1e}", flush=True)
        del want
    timed = [s for s in row["settings"] if s.get("us")]
    row["best"] = min(timed, key=lambda s: s["us"]) if timed else None
    row["correct"] = all(s["correct"] for s in row["settings"])
    return row


def run_problems(run_problem, args, bench, device: str, start: float, out: Path, meta: dict) -> list[dict]:
    """run_problem over args.problems, each its share of args.time_limit from `start`; one
    problem's failure is its row, the others still run; `out` (JSON) rewritten after each."""
    import torch

    rows: list[dict] = []
    specs = [p for p in args.problems.split(",") if p]
    for i, spec in enumerate(specs):
        try:
            row = run_problem(spec, args, bench, device, start + args.time_limit * (i + 1) / len(specs))
        except Exception as e:  # noqa: BLE001 - one problem's failure is its row, the others still run
            row = {"problem": spec, "skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
        rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
        out.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| problem | settings (ROWSxW / LANES / WARPS, rows shared) | us | GB/s | x eager | err |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['problem']} | skipped: {r['skipped'][:100]} | | | | |")
            continue
        def gbs(us):
            return "-" if not us else f"{r['bytes'] / us / 1e3:.0f}"
        lines.append(f"| {r['problem']} | eager | {fmt(r['eager_us'])} | {gbs(r['eager_us'])} | 1.00 | {r['eager_err']:.1e} |")
        for s in sorted(r["settings"], key=lambda s: s.get("us") or float("inf")):
            conf = (f"{s['shared_rows'] or s['block_rows']}x{s['block_w']} / {s['row_lanes']} / {s['num_warps']}"
                    + (" shared" if s["shared_rows"] else "") + (" (default)" if s["label"] == "default" else ""))
            us = s.get("us")
            ratio = f"{r['eager_us'] / us:.2f}" if us and r["eager_us"] else "-"
            lines.append(f"| {r['problem']} | {conf}{'' if s['correct'] else ' INCORRECT'} | {fmt(us)} | {gbs(us)} | "
                         f"{ratio} | {s['err']:.1e} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", type=Path, help="a folder with level1/ and level2/ (KernelBench/)")
    parser.add_argument("--problems", default=PROBLEMS, help=f"comma-separated LEVEL/NUMBER (default {PROBLEMS})")
    parser.add_argument("--time-limit", type=float, default=170.0, help="start no setting after this many seconds")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    device = device_for(args.smoke)
    if device is None:
        print("no CUDA GPU (--smoke runs on the CPU)", file=sys.stderr)
        return 3
    import torch

    bench = timer(args.smoke)
    start = time.monotonic()
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
            "smoke": args.smoke}
    rows = run_problems(run_problem, args, bench, device, start, out_dir / "pool_speed.json", meta)
    print()
    print(table(rows))
    print(f"\n{meta['device']}, torch {torch.__version__}, {time.monotonic() - start:.0f} s"
          + ("; smoke run: no time is claimed" if args.smoke else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
