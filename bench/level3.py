"""KernelBench level 3 on a GPU: every whole model as a model campaign, in calls of a few minutes.

    python3 bench/level3.py KB [--problems 2,4,8] [--parallel N] [--top N] [--iterations N] [--search-s S]
                            [--time-limit S] [--state DIR]
    python3 bench/level3.py KB --profile-check [--models 4,8,44]
    python3 bench/level3.py --smoke     # CPU: two tiny models through both, the plumbing only

KB is a KernelBench folder (its level3/ under it, or under KB/KernelBench/; on the device `.kb`,
a carried copy of the development set). Models run at their own sizes.

Sweep: `okgit bench kernelbench KB --level 3 --top N` (each model a model campaign: its top N
modules and chains searched offline, swapped in, verified, then eager, torch.compile and the
patched model timed in one process with each arm's noise), with OKGIT_TIME_BUDGET_S=--search-s
as each campaign's search time. A campaign cannot resume, so a model must finish inside one
call: --top 2 (the default here; the sweep's own is 4) and --search-s 150 aim at that (each
problem of a campaign costs its reference, its search and its final gate; then the whole model
is verified and timed). The sweep's state (one file per finished model) is restored from
--state (default bench/results/level3/) before the call and saved back there and, as one
archive (a device call returns few files), to $OUT/level3.tar.gz after it (unpack it into
--state; the models' okgit logs go to $OUT/level3-logs.tar.gz); a call stops starting work at
--time-limit (default 500 s: the sweep is interrupted, a model cut short is run again next
call), so the same command, rerun with the state carried, goes on. Prints the table of every finished model (eager, torch.compile, okgit's
patched model, both speedups, each arm's noise, modules swapped, device minutes) and the
geomeans, and writes $OUT/level3.md and $OUT/level3.json.

Profile check: `okgit profile` twice on each of --models, printing the top 5 rows of each run
with their spread, and whether the two runs agree on the order of the rows both rank past the
noise. Writes $OUT/level3-profile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from okgit.kernelbench.reader import find_problems  # noqa: E402
from okgit.kernelbench.scoring import ProblemResult, SweepReport, summarize  # noqa: E402

KEPT = ("sweep.json", "calls.json", "state/*.json", "logs/*.campaign.json")  # what a later call needs, and the results
TOP_ROWS = 5

SMOKE = ROOT / "tests" / "kb_level3"  # two tiny whole models: a Linear, ReLU and LayerNorm; a Conv2d, BatchNorm2d and ReLU


def out_dir() -> Path:
    path = Path(os.environ.get("OUT") or "/tmp/out")
    path.mkdir(parents=True, exist_ok=True)
    return path


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1"}


def copy_kept(src: Path, dst: Path) -> int:
    n = 0
    for pattern in KEPT:
        for f in src.glob(pattern):
            target = dst / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
            n += 1
    return n


def gpus() -> int:
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listed.splitlines())


def sweep(kb: Path, args: argparse.Namespace) -> int:
    state = Path(args.state)
    work = Path(args.work)
    out = work / "sweep"
    out.mkdir(parents=True, exist_ok=True)
    restored = copy_kept(state, out) if state.is_dir() else 0
    print(f"level3: {restored} files of earlier calls restored from {state}", file=sys.stderr, flush=True)
    parallel = args.parallel or max(1, gpus())
    cmd = [sys.executable, "-m", "okgit", "bench", "kernelbench", str(kb), "--level", "3", "--parallel", str(parallel),
           "--iterations", str(args.iterations), "--top", str(args.top), "--out", str(out), "--json", *(["--problems", args.problems] if args.problems else []),
           *(["--device", "cpu"] if args.smoke else [])]
    print(f"level3: {' '.join(cmd)} (OKGIT_TIME_BUDGET_S={args.search_s:.0f}, stops starting work after "
          f"{args.time_limit:.0f} s)", file=sys.stderr, flush=True)
    before = len(_calls(out))
    started = time.monotonic()
    with open(work / "sweep.log", "a") as log:
        # its own process group: Ctrl-C's signal reaches the sweep, the campaign and its runs alike
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
                                env={**env(), "OKGIT_TIME_BUDGET_S": str(args.search_s)})
        try:
            proc.communicate(timeout=args.time_limit)
            cut = False
        except subprocess.TimeoutExpired:
            cut = True
            os.killpg(proc.pid, signal.SIGINT)  # every finished model's state is kept; its workers stop
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    wall = time.monotonic() - started
    _record_call(out / "calls.json", before, {"wall_s": round(wall, 1), "parallel": parallel, "cut": cut})
    saved = copy_kept(out, state)
    with tarfile.open(out_dir() / "level3.tar.gz", "w:gz") as archive:
        for f in sorted(state.rglob("*")):
            if f.is_file():
                archive.add(f, arcname=f.relative_to(state).as_posix())
    # each model's okgit log beside it (what a model without figures said), not kept as state
    with tarfile.open(out_dir() / "level3-logs.tar.gz", "w:gz") as archive:
        for f in sorted((out / "logs").glob("*.log")):
            archive.add(f, arcname=f.name)
    shutil.copyfile(work / "sweep.log", out_dir() / "level3-sweep.log")
    print(f"level3: the sweep {'was cut at the time limit' if cut else f'ended (exit {proc.returncode})'} after "
          f"{wall:.0f} s; {saved} files saved to {state} and {out_dir() / 'level3.tar.gz'}", file=sys.stderr)
    return table(kb, out, args.problems)


def _calls(out: Path) -> list[dict]:
    return json.loads((out / "calls.json").read_text()) if (out / "calls.json").is_file() else []


def _record_call(path: Path, before: int, this: dict) -> None:
    """This call in the sweep's `calls.json`: the entry the sweep wrote itself (it records each
    call it ends cleanly), completed, or this one where the sweep was killed before it could."""
    calls = _calls(path.parent)
    if len(calls) > before:
        calls[-1].update(this)
    else:
        calls.append(this)
    path.write_text(json.dumps(calls, indent=1) + "\n")


def table(kb: Path, out: Path, problems: str | None) -> int:
    selected = find_problems(kb, 3, problems)
    done = []
    for p in selected:
        path = out / "state" / f"level{p.level}_{p.id}_{p.name}.json"
        if path.is_file():
            done.append(ProblemResult.model_validate_json(path.read_text()))
    missing = [p.key for p in selected if p.key not in {r.key for r in done}]
    calls = _calls(out)
    report = SweepReport(dir=str(kb), out=str(out), device="cuda" if any(r.device.startswith("cuda") for r in done) else "cpu",
                         parallel=max([c.get("parallel", 1) for c in calls] or [1]), wall_s=sum(c["wall_s"] for c in calls),
                         problems=done, summary=summarize(done)) if done else None
    text = report.markdown() if report else "no model finished yet\n"
    text += f"\n{len(done)} of {len(selected)} models finished over {len(calls)} calls" + (
        f"; still to run: {', '.join(missing)} (rerun the same command with the state carried)" if missing else "") + "\n"
    print(text)
    (out_dir() / "level3.md").write_text(text)
    (out_dir() / "level3.json").write_text(report.model_dump_json(indent=1) if report else "{}")
    return 0


def profile_check(kb: Path, models: str, device: str | None) -> int:
    found: list[dict[str, Any]] = []
    for p in find_problems(kb, 3, models):
        runs = []
        for _ in range(2):
            proc = subprocess.run([sys.executable, "-m", "okgit", "profile", str(p.path), "--json",
                                   *(["--device", device] if device else [])],
                                  capture_output=True, text=True, env=env(), timeout=600)
            runs.append(json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr.strip()[-300:]})
        found.append({"model": p.key, "runs": runs, "stable": stable(runs)})
        print(f"level3 profile: {p.key}: {found[-1]['stable']}", file=sys.stderr, flush=True)
    (out_dir() / "level3-profile.json").write_text(json.dumps(found, indent=1))
    lines = []
    for f in found:
        lines.append(f"## {f['model']}: {f['stable']}")
        for i, run in enumerate(f["runs"], 1):
            if "error" in run:
                lines.append(f"run {i}: error: {run['error']}")
                continue
            lines.append(f"run {i}: {run['total_us']:.1f} us per call on {run['device']} (spread "
                         f"{(run['total_spread'] or 0) * 100:.1f}% over {run['repeats']} repeats), top {run['settled']} "
                         "ranked past the noise")
            lines += [f"  {j}{'~' if r['tied'] else ' '} {r['name'][:50]:50} {r['time_us']:10.1f} us  "
                      f"spread {(r['spread'] or 0) * 100:5.1f}%  {r['share']:.1%}" for j, r in enumerate(run["rows"][:TOP_ROWS], 1)]
    print("\n".join(lines))
    return 0


def stable(runs: list[dict[str, Any]]) -> str:
    """Whether two profiles agree on the order of the rows both rank past the noise."""
    if any("error" in r for r in runs):
        return "not compared (a run failed)"
    settled = min(min(r["settled"] for r in runs), TOP_ROWS)
    first, second = ([row["name"] for row in r["rows"][:TOP_ROWS]] for r in runs)
    same_top = "the same top 5 in the same order" if first == second else (
        "the same top 5, in another order" if set(first) == set(second) else "other modules in the top 5")
    if not settled:
        return f"no row ranked past the noise in both runs: nothing to hold stable ({same_top})"
    agree = first[:settled] == second[:settled]
    return f"{'stable' if agree else 'NOT stable'}: the top {settled} past the noise {'agree' if agree else 'differ'} ({same_top})"


def smoke(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="okgit-level3-smoke-") as tmp:
        args.iterations, args.parallel, args.problems = 1, 1, None
        args.state, args.work = str(Path(tmp) / "state"), str(Path(tmp) / "work")
        sweep(SMOKE, args)
        sweep(SMOKE, args)  # a second call finds both models finished in the state the first saved
        return profile_check(SMOKE, "1,2", "cpu")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kb", nargs="?", help="a KernelBench folder (on the device: .kb)")
    parser.add_argument("--problems", help="level-3 ids, e.g. 2,4,8-12 (default: every model)")
    parser.add_argument("--parallel", type=int, help="models at once (default: one per visible GPU)")
    parser.add_argument("--top", type=int, default=2, help="modules and chains optimized per model (default: 2)")
    parser.add_argument("--iterations", type=int, default=4, help="per problem of a campaign, on average (default: 4)")
    parser.add_argument("--search-s", type=float, default=150.0, help="each campaign's search time in seconds (default: 150)")
    parser.add_argument("--time-limit", type=float, default=500.0, help="stop the sweep after this many seconds (default: 500)")
    parser.add_argument("--state", default=str(ROOT / "bench" / "results" / "level3"),
                        help="where the sweep's state is kept between calls (default: bench/results/level3)")
    parser.add_argument("--work", default="/tmp/okgit-level3", help="the sweep's working folder (default: /tmp/okgit-level3)")
    parser.add_argument("--profile-check", action="store_true", help="okgit profile twice on each of --models instead")
    parser.add_argument("--models", default="4,8,44", help="level-3 ids for --profile-check (default: 4,8,44)")
    parser.add_argument("--smoke", action="store_true", help="CPU: two tiny models through the sweep and the profile check")
    args = parser.parse_args()
    if args.smoke:
        return smoke(args)
    if not args.kb:
        parser.error("KB (a KernelBench folder) is needed unless --smoke")
    kb = Path(args.kb).resolve()
    return profile_check(kb, args.models, None) if args.profile_check else sweep(kb, args)


if __name__ == "__main__":
    sys.exit(main())
