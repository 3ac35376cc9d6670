"""The Inductor seed over development problems at their real sizes (GPU).

For each problem: the seed file made (`python -m okgit.inductor`, which compiles the reference
with torch.compile's Inductor and runs its autotuning), judged by okgit's evaluator (`okgit eval
SEED --ref REF --json`: every gate), and timed against eager and torch.compile in one process
with the sweep's own baselines (`python -m okgit.kernelbench.baselines REF SEED`, eval mode,
interleaved rounds, L2 flushed). Seeds are made a few at a time (compiling is CPU work); the
judging and timing run one problem at a time.

    python bench/inductor_seed.py --kb .kb/KernelBench --problems 1:21,24 2:39 --state bench/results/inductor-seed.json

Resumable: problems already in --state are skipped. Prints a table; the seed files go under
--out (a tarball) for reading afterwards.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path


def problem_files(kb: Path, spec: list[str]) -> list[tuple[str, Path]]:
    out = []
    for item in spec:
        level, ids = item.split(":")
        for i in ids.split(","):
            hits = sorted((kb / f"level{level}").glob(f"{i}_*.py"))
            if hits:
                out.append((f"L{level}/{i}", hits[0]))
    return out


def run_json(cmd: list[str], timeout: float) -> tuple[dict | None, str, float]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout:.0f} s", time.monotonic() - t0
    try:  # okgit eval --json prints one indented object; the others one line
        return json.loads(p.stdout), "", time.monotonic() - t0
    except ValueError:
        lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return None, (p.stderr.strip().splitlines() or ["no output"])[-1][:300], time.monotonic() - t0
    return json.loads(lines[-1]), "", time.monotonic() - t0


def make_seed(key: str, ref: Path, seeds: Path) -> dict:
    out = seeds / (key.replace("/", "_") + ".py")
    answer, err, wall = run_json([sys.executable, "-m", "okgit.inductor", str(ref), "cuda", str(out)], 400)
    row = {"key": key, "ref": str(ref), "seed_s": round(wall, 1), "seed": str(out)}
    if answer is None:
        row["seed_error"] = err
    elif not answer.get("ok"):
        row["seed_error"] = answer.get("why")
    else:
        row.update(kernels=answer["kernels"], modes=answer["modes"])
    return row


def judge(row: dict) -> None:
    answer, err, wall = run_json([sys.executable, "-m", "okgit", "eval", row["seed"], "--ref", row["ref"],
                                  "--device", "cuda", "--json"], 240)
    row["eval_s"] = round(wall, 1)
    if answer is None:
        row["eval_error"] = err
    else:
        row["status"] = answer.get("status")
        row["gate"] = (answer.get("error") or {}).get("gate")
        row["message"] = ((answer.get("error") or {}).get("message") or "")[:300]
        row["eval_speedup"] = answer.get("speedup")
    base, err, wall = run_json([sys.executable, "-m", "okgit.kernelbench.baselines", row["ref"], row["seed"]], 300)
    row["base_s"] = round(wall, 1)
    if base is None:
        row["base_error"] = err
    else:
        row.update(eager_us=base.get("eager_us"), compile_us=base.get("compile_us"), seed_us=base.get("okgit_us"),
                   disagreement=base.get("disagreement"), base_errors=base.get("errors"))


def table(rows: list[dict]) -> str:
    lines = ["| problem | seed | kernels | status (gate) | eager us | compile us | seed us | seed/compile |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = (f"{r['compile_us'] / r['seed_us']:.3f}x" if r.get("compile_us") and r.get("seed_us") else "-")
        seed = "ok" if "kernels" in r else f"none: {str(r.get('seed_error'))[:60]}"
        status = f"{r.get('status', '-')}" + (f" ({r['gate']})" if r.get("gate") else "")
        def us(k: str) -> str:
            return f"{r[k]:.1f}" if isinstance(r.get(k), (int, float)) else "-"
        lines.append(f"| {r['key']} | {seed} | {r.get('kernels', '-')} | {status} | {us('eager_us')} | {us('compile_us')} "
                     f"| {us('seed_us')} | {ratio} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kb", default=".kb/KernelBench")
    ap.add_argument("--problems", nargs="+", required=True, help="LEVEL:ID,ID ...")
    ap.add_argument("--state", default="bench/results/inductor-seed.json")
    ap.add_argument("--out", default="/tmp/okgit-gpu-out")
    ap.add_argument("--time-limit", type=float, default=540)
    ap.add_argument("--parallel", type=int, default=3)
    args = ap.parse_args()
    t0 = time.monotonic()
    state_path = Path(args.state)
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    out = Path(args.out)
    seeds = out / "seeds"
    seeds.mkdir(parents=True, exist_ok=True)
    todo = [(k, p) for k, p in problem_files(Path(args.kb), args.problems) if k not in state]
    rows: dict[str, dict] = {}
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        futures = {pool.submit(make_seed, k, p, seeds): k for k, p in todo}
        for fut in concurrent.futures.as_completed(futures):
            row = fut.result()
            rows[row["key"]] = row
            print(f"[{time.monotonic() - t0:.0f}s] seed {row['key']}: {row.get('kernels', row.get('seed_error'))} "
                  f"in {row['seed_s']} s", flush=True)
    for key, _ in todo:
        row = rows[key]
        if time.monotonic() - t0 > args.time_limit:
            print(f"time limit: {key} not judged", flush=True)
            continue
        if "kernels" in row:
            try:
                judge(row)
            except Exception as e:  # noqa: BLE001 - one problem's failure is its row, not the end of the call
                row["judge_error"] = f"{type(e).__name__}: {e}"[:300]
        print(f"[{time.monotonic() - t0:.0f}s] {key}: {row.get('status')} {row.get('gate')} "
              f"eager {row.get('eager_us')} compile {row.get('compile_us')} seed {row.get('seed_us')}", flush=True)
        state[key] = row
        state_path.write_text(json.dumps(state, indent=1))
    with tarfile.open(out / "seeds.tar.gz", "w:gz") as tar:
        tar.add(seeds, arcname="seeds")
    for f in seeds.iterdir():  # the tarball brings them back (a call returns at most 8 files)
        f.unlink()
    (out / "inductor-seed.json").write_text(json.dumps(state, indent=1))
    print(table(list(state.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
