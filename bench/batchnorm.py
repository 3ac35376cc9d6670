"""okgit's batchnorm kernels against eager and torch.compile at the development set's real sizes,
over a few launch settings.

    python3 bench/batchnorm.py [KB] [--problems level1/33] [--time-limit S] [--smoke]

KB holds level1/ and level2/ (a KernelBench checkout's KernelBench/ folder, or the checkout
itself; default: the first of .kb/, shared/kernelbench/KernelBench and
/work/shared/kernelbench/KernelBench that exists). Per problem (default L1/33: BatchNorm2d in
training mode on 64x64x512x512), at its real size:

- okgit's candidate as `okgit optimize` builds it: the template proposer's first candidate with
  the batchnorm kind;
- correctness in training mode, then eval mode, each against the reference run in float64 on
  the GPU: the output's error within max(2 x eager's, 1e-4 x max|ref|) (okgit's rule: no worse
  than the reference itself), and the whole state dict after the call (running mean and
  variance to the same rule, num_batches_tracked exact);
- eager, torch.compile (default mode) and the candidate at its lowered settings and at SETTINGS,
  in training mode, then eager and the candidate in eval mode (no statistics pass: what that
  pass costs is the difference), each timed by triton.testing.do_bench (CUDA events, L2 cleared before each
  call, warm-up, median), with the bandwidth of two reads and one write of the input (the floor
  every one of them needs: statistics, then normalise).

Prints one table and writes $OUT/batchnorm.json (OUT defaults to /tmp/out) after each problem;
no setting starts after --time-limit seconds (default 180).

--smoke: CPU, Triton interpreter, the knobs halved to tiny inputs, no torch.compile, the lowered
setting and one other, nothing timed: the plumbing only.
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
from pool_conv import built, candidate, device_for, fmt, timer, tiny_knobs

ROOT = Path(__file__).resolve().parents[1]
KB_PLACES = (ROOT / ".kb", ROOT / "shared" / "kernelbench" / "KernelBench", Path("/work/shared/kernelbench/KernelBench"))
# (STATS_PROGRAMS, STATS_TILE, STATS_WARPS, TILE, BLOCK_W, NUM_WARPS) beside the lowered defaults
NAMES = ("STATS_PROGRAMS", "STATS_TILE", "STATS_WARPS", "TILE", "BLOCK_W", "NUM_WARPS")
SETTINGS = [(2048, 2048, 4, 2048, 1024, 4), (4096, 2048, 4, 2048, 1024, 4), (16384, 2048, 4, 2048, 1024, 4),
            (8192, 4096, 8, 2048, 1024, 4), (8192, 1024, 4, 2048, 1024, 4), (8192, 2048, 8, 2048, 1024, 4),
            (8192, 2048, 4, 4096, 1024, 8), (8192, 2048, 4, 1024, 512, 4), (16384, 4096, 8, 4096, 1024, 8)]
CONSTANT = re.compile(r"^(FUSED_BATCHNORM_\d+)_(\w+): int = (\d+)$", re.MULTILINE)


def kb_folder(given: str | None) -> Path:
    places = [Path(given)] if given else [p for p in KB_PLACES if p.is_dir()]
    for p in places:
        if (p / "level1").is_dir():
            return p
        if (p / "KernelBench" / "level1").is_dir():
            return p / "KernelBench"
    raise SystemExit(f"no KernelBench folder with level1/ at {given or ', '.join(map(str, KB_PLACES))}")


def rel_err(got, want) -> float:
    """max |got - want| / max |want| (0 for an empty or all-zero want)."""
    scale = want.abs().max().item() if want.numel() else 0.0
    return (got.double() - want).abs().max().item() / scale if scale else 0.0


def check(ref, mine, inputs, device: str) -> dict:
    """Training mode then eval mode: each output and the state dict after the call against the
    float64 reference; eager fp32's own error sets the bar."""
    import torch

    wide = copy.deepcopy(ref).double()
    eager = copy.deepcopy(ref)
    found: dict = {"ok": True, "steps": []}
    for mode in ("train", "eval"):
        for m in (wide, eager, mine):
            getattr(m, mode)()
        with torch.no_grad():
            want = wide(*[x.double() for x in inputs])
            base = eager(*inputs)
            got = mine(*inputs)
        step = {"mode": mode, "eager_err": rel_err(base, want), "okgit_err": rel_err(got, want)}
        bad = step["okgit_err"] > max(2 * step["eager_err"], 1e-4)
        del want, base, got
        states = (wide.state_dict(), eager.state_dict(), mine.state_dict())
        for k, w in states[0].items():
            if w.is_floating_point():
                e_eager, e_mine = rel_err(states[1][k], w), rel_err(states[2][k], w)
                step[f"{k}_err"] = e_mine
                bad |= e_mine > max(2 * e_eager, 1e-4)
            else:
                step[k] = int(states[2][k].item())
                bad |= not torch.equal(states[2][k].to(device), w)
        step["ok"] = not bad
        found["ok"] &= not bad
        found["steps"].append(step)
    return found


def run_problem(spec: str, args, bench, device: str, deadline: float) -> dict:
    import torch

    level, number = spec.split("/")
    (path,) = (args.kb / level).glob(f"{number}_*.py")
    source = path.read_text()
    row: dict = {"problem": spec, "file": path.name, "timings": []}
    cand, origin = candidate(source, str(path), ("batchnorm",))
    row["origin"] = origin
    if cand is None:
        row["skipped"] = origin
        return row
    knobs = tiny_knobs(source) if args.smoke else {}
    cand_mod, ref, mine, inputs, _, _ = built(source, cand, knobs, device)
    row["shapes"] = [list(x.shape) for x in inputs]
    row["check"] = check(ref, mine, inputs, device)
    moved = sum(x.numel() * x.element_size() for x in inputs)  # one pass over the input
    ref.train()
    mine.train()

    def timed(label: str, fn, passes: int = 3) -> None:
        """Time fn on the inputs; its bandwidth as `passes` passes over the input (training: two
        reads and a write; eval mode: a read and a write)."""
        if time.monotonic() > deadline:
            row["timings"].append({"what": label, "us": None, "why": "time limit"})
            return
        with torch.no_grad():
            us = bench(lambda: fn(*inputs))
        row["timings"].append({"what": label, "us": us, "gbps": passes * moved / us / 1e3 if us else None})

    timed("eager", ref)
    if not args.smoke:
        compiled = torch.compile(copy.deepcopy(ref))
        timed("torch.compile", compiled)
    found = CONSTANT.findall(cand)
    prefixes = sorted({p for p, _, _ in found})
    lowered = tuple(int(v) for p, k, v in found if p == prefixes[0] and k in NAMES)
    settings = [lowered] + [s for s in SETTINGS if s != lowered]
    for setting in settings[:2] if args.smoke else settings:  # the smoke: the plumbing, not every setting
        for p in prefixes:
            for k, v in zip(NAMES, setting):
                setattr(cand_mod, f"{p}_{k}", v)
        tag = "okgit " + "/".join(map(str, setting)) + (" (lowered)" if setting == lowered else "")
        timed(tag, mine)
    # eval mode: no statistics pass (one read and one write), so the gap to training mode is its cost
    for p in prefixes:
        for k, v in zip(NAMES, lowered):
            setattr(cand_mod, f"{p}_{k}", v)
    ref.eval()
    mine.eval()
    timed("eager, eval mode", ref, 2)
    timed("okgit lowered, eval mode (normalise only)", mine, 2)
    return row


def table(rows: list[dict]) -> str:
    out = [f"{'problem':<12} {'what':<44} {'us':>9} {'GB/s':>7} {'x compile':>9}"]
    for r in rows:
        if "skipped" in r:
            out.append(f"{r['problem']:<12} skipped: {r['skipped']}")
            continue
        steps = "; ".join(f"{s['mode']} {'ok' if s['ok'] else 'WRONG'} (err {s['okgit_err']:.1e} vs eager {s['eager_err']:.1e})"
                          for s in r["check"]["steps"])
        out.append(f"{r['problem']:<12} correctness: {steps}")
        base = next((t["us"] for t in r["timings"] if t["what"] == "torch.compile"), None)
        for t in r["timings"]:
            x = f"{base / t['us']:.2f}" if base and t["us"] else "-"
            gbps = f"{t['gbps']:.0f}" if t.get("gbps") else "-"
            out.append(f"{r['problem']:<12} {t['what']:<44} {fmt(t['us']):>9} {gbps:>7} {x:>9}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kb", nargs="?")
    ap.add_argument("--problems", default="level1/33")
    ap.add_argument("--time-limit", type=float, default=180.0)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    args.kb = kb_folder(args.kb)
    device = device_for(args.smoke)
    if device is None:
        print("no GPU here: run with --smoke for the plumbing")
        return 1
    deadline = time.monotonic() + args.time_limit
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    bench = timer(args.smoke)
    rows = []
    for spec in args.problems.split(","):
        rows.append(run_problem(spec, args, bench, device, deadline))
        (out / "batchnorm.json").write_text(json.dumps({"smoke": args.smoke, "rows": rows}, indent=1))
    print(table(rows))
    if args.smoke:
        print("smoke: nothing timed")
    return 0 if all(r.get("check", {}).get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
