"""Does torch.compile's baseline reuse the Inductor seed's compile (GPU)? And is the seed still made?

For each development problem, in a fresh Inductor cache folder of its own: the seed made as a
run makes it on a GPU in torch.compile's default mode (`python -m okgit.inductor REF cuda OUT
default {} both`: the dynamic file and the static one, whose compile is torch.compile's own;
the max-autotune seed a run also makes is left out, the baseline being the default mode), then the sweep's
baselines (`python -m okgit.kernelbench.baselines REF`: eager and torch.compile timed with the
evaluator's timer, interleaved). Then, in a second fresh cache folder, the baselines alone: a
cold compile. Per problem: whether the seed was made (and its kernels), the baseline's compile
seconds and Inductor's graph-cache verdict after the seed (`hit` wanted) and cold (`miss`), and
torch.compile's time in both (the same compile: the times should agree within the noise).

    python3 bench/seed_cache.py .kb/KernelBench      # about 2 minutes per problem
    python3 bench/seed_cache.py --smoke   # CPU, tests/kb_fixture's level-1 problem 1: the plumbing

Prints a table; writes seed_cache.json under $OUT (default /tmp/out). Exit 1 where a seed was not
made or, on a GPU, the baseline after the seed missed the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROBLEMS = "1:33 2:59"  # a batch norm (its two modes compiled apart), a fused GEMM


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", nargs="?", help="a KernelBench folder holding level1/ and level2/")
    parser.add_argument("--problems", default=DEFAULT_PROBLEMS, help=f"LEVEL:ID,ID ... (default {DEFAULT_PROBLEMS!r})")
    parser.add_argument("--smoke", action="store_true", help="CPU and tests/kb_fixture: the plumbing, nothing timed")
    args = parser.parse_args()
    if args.smoke:
        args.kb, args.problems = args.kb or str(ROOT / "tests" / "kb_fixture" / "KernelBench"), "1:1"
    if not args.kb:
        parser.error("the KernelBench folder is required (or --smoke)")
    out = Path(os.environ.get("OUT") or "/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"
    rows: list[dict[str, Any]] = []
    for path in _problems(Path(args.kb), args.problems):
        with tempfile.TemporaryDirectory(prefix="okgit-seed-cache-") as tmp:
            seeded = _env(Path(tmp) / "seeded")
            seed = _seed(path, device, Path(tmp) / "seed.py", seeded)
            warm = _baselines(path, seeded)
            cold = _baselines(path, _env(Path(tmp) / "cold"))
        rows.append({"problem": f"{path.parent.name}/{path.stem}", "seed": seed, "after_seed": warm, "cold": cold})
        print(_line(rows[-1]), flush=True)
    (out / "seed_cache.json").write_text(json.dumps(rows, indent=1) + "\n")
    bad = [r["problem"] for r in rows if not r["seed"].get("ok") or (
        not args.smoke and r["after_seed"].get("compile_cache") != "hit")]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} problems: seed made and, on a GPU, the baseline served from its "
          f"compile" + (f"; not: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


def _problems(kb: Path, spec: str) -> list[Path]:
    found = []
    for part in spec.split():
        level, ids = part.split(":")
        for n in ids.split(","):
            matches = sorted((kb / f"level{level}").glob(f"{int(n)}_*.py"))
            if not matches:
                raise SystemExit(f"no problem {n} in {kb / f'level{level}'}")
            found.append(matches[0])
    return found


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _seed(ref: Path, device: str, dest: Path, env: dict[str, str]) -> dict:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "okgit.inductor", str(ref), device, str(dest), "default", "{}", "both"],
                          env=env, capture_output=True, text=True, timeout=900)
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    first = answers[0] if answers else {"ok": False, "why": (proc.stderr.strip().splitlines() or ["no answer"])[-1]}
    return {"ok": bool(first.get("ok")), "kernels": first.get("kernels"), "why": first.get("why"),
            "modes": [a.get("mode") for a in answers if a.get("ok")], "wall_s": round(time.monotonic() - started, 1)}


def _baselines(ref: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "okgit.kernelbench.baselines", str(ref)], env=env,
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]}
    data = json.loads(lines[-1])
    return {k: data.get(k) for k in ("eager_us", "compile_us", "compile_s", "compile_cache", "errors")}


def _line(row: dict) -> str:
    seed, warm, cold = row["seed"], row["after_seed"], row["cold"]
    made = f"seed {seed['kernels']} kernels ({', '.join(seed['modes'])}, {seed['wall_s']:.0f} s)" if seed["ok"] else \
        f"no seed: {seed['why']}"

    def arm(b: dict) -> str:
        if "error" in b:
            return f"error: {b['error']}"
        us = f"{b['compile_us']:.1f} us" if b.get("compile_us") else "untimed"
        return f"compile {b.get('compile_s')} s, cache {b.get('compile_cache')}, torch.compile {us}"

    return f"{row['problem']}: {made}; after the seed: {arm(warm)}; cold: {arm(cold)}"


if __name__ == "__main__":
    sys.exit(main())
