"""Sweep the repository's example ops as a KernelBench folder on this machine's GPUs.

    python3 bench/sweep.py [--parallel N] [--work DIR] [okgit bench flags, e.g. --iterations 6 --problems 1-5]

Lays examples/*.py out as KernelBench/level1/<i>_<Name>.py, runs `okgit bench kernelbench`
over it with --parallel (default: one problem per visible GPU), prints the Markdown table and
the wall time, and writes sweep.json and sweep.md to $OUT when it is set. With --work the
layout and the sweep's state stay in DIR, so a second call resumes (a long sweep can span
several calls); without it they live in a temp dir. For the GPU machine (no network): okgit
runs from this checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layout(examples: list[Path], dest: Path) -> Path:
    """examples -> dest/KernelBench/level1/<i>_<Name>.py, numbered in file-name order."""
    level = dest / "KernelBench" / "level1"
    level.mkdir(parents=True, exist_ok=True)
    for i, src in enumerate(examples, start=1):
        name = re.sub(r"\W", "_", src.stem)
        shutil.copy(src, level / f"{i}_{name}.py")
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", type=int, help="problems at once (default: visible GPUs, at least 1)")
    parser.add_argument("--examples", default=str(ROOT / "examples"), help="folder of op files")
    parser.add_argument("--work", help="keep the layout and the sweep's state here (resumable)")
    args, passthrough = parser.parse_known_args()

    examples = sorted(p for p in Path(args.examples).glob("*.py") if not p.name.startswith("_"))
    if not examples:
        print(f"no example ops in {args.examples}", file=sys.stderr)
        return 1
    import torch

    gpus = torch.cuda.device_count()
    parallel = args.parallel or max(gpus, 1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory(prefix="okgit-examples-kb-") as tmp:
        work = Path(args.work).resolve() if args.work else Path(tmp)
        kb = layout(examples, work)
        out = work / "out"
        cmd = [sys.executable, "-m", "okgit", "bench", "kernelbench", str(kb), "--parallel", str(parallel),
               "--out", str(out), "--json", *passthrough]
        print(f"{len(examples)} ops, {gpus} GPU(s) ({torch.cuda.get_device_name(0) if gpus else 'none'}), "
              f"parallel {parallel}: {' '.join(cmd[3:])}", flush=True)
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, text=True)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            print(f"okgit bench kernelbench failed (exit {proc.returncode})", file=sys.stderr)
            return proc.returncode
        report = json.loads(proc.stdout)
        markdown = (out / "report.md").read_text()
    print(markdown)
    print(f"wall time of this call: {wall:.1f} s, --parallel {parallel} on {gpus} GPU(s)")
    if os.environ.get("OUT"):
        dest = Path(os.environ["OUT"])
        (dest / "sweep.json").write_text(json.dumps({**report, "bench_wall_s": round(wall, 1)}, indent=2) + "\n")
        (dest / "sweep.md").write_text(markdown + f"\nwall time of this call: {wall:.1f} s, --parallel {parallel}, {gpus} GPU(s)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
