"""okgit's rows kernel on long rows read in several passes: the persistent grid sized by L2 against
the plain grid, over its launch settings, at the development set's real sizes.

    python3 bench/rows_l2.py KB [--problems level1/39,level1/24] [--time-limit S] [--no-compile] [--smoke]

KB holds level1/ (a KernelBench checkout's KernelBench/ folder, or the checkout itself; the lead's
copy is `.kb/`). Per problem (default: L1/39, L2 norm over 32768 x 65535 fp32, 256 KB rows;
L1/24, log_softmax over 4096 x 393216, 1.5 MB rows), at its real size:

- okgit's rows candidate as the template proposer renders it, run at its defaults (`default`: the
  grid rule of okgit/lower/kinds/rows_grid.py.tmpl at the rendered L2_SHARE) and at other settings
  (CONFIGS): the chunk, warps and loads pipelined (STAGES), and the grid: `rule@S` (the rule at
  share S%), `plain` (one program per row block, okgit before this change) or `Nx` (N programs
  per SM, whatever the rule says);
- each checked against the reference computed in float64 on the GPU: correct when its error is
  within max(2 x eager's, 1e-4 x max|ref|) (okgit's rule: no worse than the reference itself);
- eager, torch.compile (default mode) and each correct setting timed by triton.testing.do_bench
  (CUDA events, L2 cleared before each call, warm-up, median), with GB/s of the input read once
  and the output written once (the floor's bytes), and the programs each grid ran with.

Prints one table, writes $OUT/rows_l2.json (OUT defaults to /tmp/out) after every problem, and
starts no setting after --time-limit seconds (shared by the problems). The fastest correct
setting per problem is what the defaults in okgit/lower/kinds/rows.py (L2_SHARE, CHUNK) and the
rule's floor (one block per SM) should follow.

--smoke: CPU, Triton interpreter, the problems' knobs halved to tiny inputs, rows streamed in small
chunks (BLOCK_N_MAX 16, chunks of at most 64), every setting run and checked, nothing timed: the
plumbing only. The `rule` grids are the plain grid there (no L2 to size for).
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pool_conv import candidate, device_for, fmt, load, timer, tiny_knobs
from pool_speed import problem_path, run_problems

PROBLEMS = "level1/39,level1/24"
# (CHUNK, NUM_WARPS, STAGES, grid), likeliest first after the default (each new chunk, warps and
# stages costs a compile); grid: "rule@S" (the rule at an L2 share of S%), "plain", or "Nx" (N per SM)
CONFIGS = [
    (8192, 16, 1, "rule@75"), (2048, 16, 1, "rule@75"), (8192, 16, 1, "plain"), (8192, 16, 1, "1x"), (8192, 16, 1, "2x"),
    (4096, 16, 1, "1x"), (16384, 16, 1, "1x"), (2048, 16, 3, "1x"), (8192, 16, 2, "1x"), (2048, 16, 4, "2x"),
    (8192, 8, 1, "2x"), (8192, 32, 1, "1x"), (8192, 16, 1, "rule@50"), (8192, 16, 1, "rule@100"),
    (8192, 16, 1, "3x"), (8192, 16, 1, "0.5x"), (8192, 16, 3, "2x"), (4096, 8, 2, "4x"), (2048, 16, 1, "1x"),
]
CONSTANT = re.compile(r"^(FUSED_ROWS_\d+)_(TILE|BLOCK_N_MAX|CHUNK|NUM_WARPS|STAGES|L2_SHARE): int = (\d+)$", re.MULTILINE)


def max_err(got, want, rows: int = 1024) -> float:
    """max |got - want|, a block of rows at a time (no float64 copy of a whole output)."""
    return max((g.double() - w).abs().nan_to_num(0.0).max().item() for g, w in zip(got.split(rows), want.split(rows)))


def grid_of(spec: str, sms: int, rule):
    """The launcher's `_rows_programs` for a grid spec; it records the programs it gave."""
    ran: list[int] = []

    def programs(n_blocks, block_bytes, device, num_warps, l2_share):
        if spec == "plain":
            n = n_blocks
        elif spec.startswith("rule@"):
            n = rule(n_blocks, block_bytes, device, num_warps, int(spec[5:]))
        else:
            n = min(n_blocks, max(1, int(float(spec[:-1]) * sms)))
        ran.append(n)
        return n
    return programs, ran


def run_problem(spec: str, args, bench, device: str, deadline: float) -> dict:
    import torch

    path = problem_path(args.kb, spec)
    source = path.read_text()
    row: dict = {"problem": spec, "file": path.name, "settings": []}
    cand, origin = candidate(source, str(path), ("rows",))
    row["origin"] = origin
    if cand is None:
        row["skipped"] = origin
        return row
    knobs = tiny_knobs(source) if args.smoke else {}
    ref_mod, cand_mod = load(source, "ref", knobs), load(cand, "cand", knobs)
    prefixes = sorted({n for n, _, _ in CONSTANT.findall(cand)})
    lowered = {k: int(v) for n, k, v in CONSTANT.findall(cand) if n == prefixes[0]}
    row["lowered"] = lowered
    if "L2_SHARE" not in lowered:
        row["skipped"] = f"its rows kernel reads a row once or holds it in registers: {lowered}"
        return row
    with torch.device(device):
        torch.manual_seed(1)
        model = ref_mod.Model(*ref_mod.get_init_inputs())
        torch.manual_seed(2)
        inputs = list(ref_mod.get_inputs())
    mine = (getattr(cand_mod, "ModelNew", None) or cand_mod.Model)(*ref_mod.get_init_inputs()).to(device)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else 2
    rule = cand_mod._rows_programs
    with torch.no_grad():
        want = copy.deepcopy(model).double()(*[t.double() for t in inputs])
        out = model(*inputs)
        row["shapes"] = [list(t.shape) for t in inputs]
        row["bytes"] = sum(t.nbytes for t in inputs) + out.nbytes
        row["eager_err"] = max_err(out, want)
        scale = want.abs().max().item()
        del out
        row["eager_us"] = bench(lambda: model(*inputs))
        print(f"  {spec} eager: {fmt(row['eager_us'])} us, err {row['eager_err']:.1e}", flush=True)
        if not args.no_compile and not args.smoke:
            compiled = torch.compile(model)
            got = compiled(*inputs)
            row["compile_err"] = max_err(got, want)
            del got
            row["compile_us"] = bench(lambda: compiled(*inputs))
            print(f"  {spec} torch.compile: {fmt(row['compile_us'])} us", flush=True)
        default = (lowered["CHUNK"], lowered["NUM_WARPS"], lowered["STAGES"], f"rule@{lowered['L2_SHARE']}")
        for label, (chunk, warps, stages, grid) in [("default", default)] + [("alt", c) for c in CONFIGS]:
            if time.monotonic() > deadline:
                row["cut"] = True  # the settings left were not run
                break
            if args.smoke:  # stream the tiny rows in several chunks
                chunk = min(chunk, 64)
                for n in prefixes:
                    setattr(cand_mod, f"{n}_BLOCK_N_MAX", 16)
            for n in prefixes:
                for k, v in (("CHUNK", chunk), ("NUM_WARPS", warps), ("STAGES", stages)):
                    setattr(cand_mod, f"{n}_{k}", v)
            cand_mod._rows_programs, ran = grid_of(grid, sms, rule)
            got = mine(*inputs)
            err = max_err(got, want)
            del got
            entry = {"label": label, "chunk": chunk, "warps": warps, "stages": stages, "grid": grid,
                     "programs": ran[0] if ran else None, "err": err,
                     "correct": err <= max(2 * row["eager_err"], 1e-4 * scale)}
            if entry["correct"]:
                entry["us"] = bench(lambda: mine(*inputs))
            row["settings"].append(entry)
            print(f"  {spec} {chunk}/{warps}/{stages} {grid} ({entry['programs']} programs): {fmt(entry.get('us'))} us, "
                  f"err {err:.1e}", flush=True)
        del want
    timed = [s for s in row["settings"] if s.get("us")]
    row["best"] = min(timed, key=lambda s: s["us"]) if timed else None
    row["correct"] = all(s["correct"] for s in row["settings"])
    return row


def table(rows: list[dict]) -> str:
    lines = ["| problem | arm (CHUNK / warps / stages, grid: programs) | us | GB/s | x eager | x compile | err |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['problem']} | skipped: {r['skipped'][:100]} | | | | | |")
            continue

        def cells(us, err):
            gbs = "-" if not us else f"{r['bytes'] / us / 1e3:.0f}"
            eager = f"{r['eager_us'] / us:.2f}" if us and r.get("eager_us") else "-"
            comp = f"{r['compile_us'] / us:.2f}" if us and r.get("compile_us") else "-"
            return f"{fmt(us)} | {gbs} | {eager} | {comp} | {err:.1e}"
        lines.append(f"| {r['problem']} | eager | {cells(r['eager_us'], r['eager_err'])} |")
        if "compile_us" in r:
            lines.append(f"| {r['problem']} | torch.compile | {cells(r['compile_us'], r['compile_err'])} |")
        for s in sorted(r["settings"], key=lambda s: s.get("us") or float("inf")):
            arm = (f"{s['chunk']} / {s['warps']} / {s['stages']}, {s['grid']}: {s['programs']}"
                   + (" (default)" if s["label"] == "default" else "") + ("" if s["correct"] else " INCORRECT"))
            lines.append(f"| {r['problem']} | {arm} | {cells(s.get('us'), s['err'])} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", type=Path, help="a folder with level1/ (KernelBench/)")
    parser.add_argument("--problems", default=PROBLEMS, help=f"comma-separated LEVEL/NUMBER (default {PROBLEMS})")
    parser.add_argument("--time-limit", type=float, default=190.0, help="start no setting after this many seconds")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
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
    meta: dict = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
                  "smoke": args.smoke}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        meta |= {"l2_bytes": getattr(props, "L2_cache_size", 0), "sms": props.multi_processor_count}
    rows = run_problems(run_problem, args, bench, device, start, out_dir / "rows_l2.json", meta)
    print()
    print(table(rows))
    print(f"\n{meta['device']}, torch {torch.__version__}, L2 {meta.get('l2_bytes', 0) / 2**20:.0f} MiB, "
          f"{meta.get('sms', '-')} SMs, {time.monotonic() - start:.0f} s" + ("; smoke run: no time is claimed" if args.smoke else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
