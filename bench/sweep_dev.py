"""The whole development set (KernelBench levels 1 and 2) swept across device calls, each within its limit.

    python3 bench/sweep_dev.py [KB] [--limit S] [--parallel N] [--state DIR] [--smoke] [okgit bench flags, as --flag=value]

KB is the development set's checkout (default `.kb`, a copy of ../shared/kernelbench carried to
the GPU machine); only its level1 and level2 folders are swept, at their real sizes and okgit's
default iterations, no model. Each call runs `okgit bench kernelbench ... --time-limit S` (default
510 s, so a call of the device's 10 minutes ends inside them): no problem starts late, the
problems in flight are stopped with their runs resumable, and the sweep's state is packed into
`$OUT/sweep-dev.tar.gz` (the finished problems' state files, the repositories of the problems
in flight with their interrupted runs, every problem's ledger of device time, the winners,
logs and journals). The next call starts from `--state DIR/sweep-dev.tar.gz` (default
bench/results/sweep-dev/, where that file is committed between calls) and goes on; a call with
nothing left to run only prints the table.

Prints, at the end of every call: per problem its status and eager, torch.compile and okgit
times (pending ones marked), where the time went (by stage: wall, the device held shared and
alone, lock waits), and the device-minutes used so far: the wall of every call of this script
(the device is held for all of it), its sum against the hour the issue allows. Writes
`sweep-dev.md` and `sweep-dev.json` beside the tarball in $OUT (default /tmp/out).

--smoke: the same path on the CPU over tests/kb_fixture (Triton's interpreter, one iteration,
nothing timed), with its state in a temporary folder unless --state is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import resumable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's okgit, as the sweep's processes get it (PYTHONPATH below)
from okgit.journal.files import read_jsonl  # noqa: E402 - this checkout's

TARBALL = "sweep-dev.tar.gz"
HOUR_S = 3600.0
WORK = Path(tempfile.gettempdir()) / "okgit-sweep-dev"  # the same path in every call: runs resume there


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", nargs="?", default=".kb", help="the development set's KernelBench checkout")
    parser.add_argument("--limit", type=float, default=510.0, metavar="S", help="the sweep's time limit in this call")
    parser.add_argument("--parallel", type=int, default=6, help="problems at once (admitted by their memory)")
    parser.add_argument("--state", help="folder holding the last call's sweep-dev.tar.gz (default bench/results/sweep-dev)")
    parser.add_argument("--smoke", action="store_true", help="CPU and tests/kb_fixture: the plumbing, nothing timed")
    args, passthrough = parser.parse_known_args()
    started = time.monotonic()
    kb = Path(args.kb) if not args.smoke else ROOT / "tests" / "kb_fixture"
    state = Path(args.state) if args.state else (Path(tempfile.mkdtemp(prefix="okgit-sweep-dev-state-")) if args.smoke
                                                 else ROOT / "bench" / "results" / "sweep-dev")
    if args.smoke:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        passthrough += ["--device", "cpu", "--iterations", "1"]
    out = Path(os.environ.get("OUT") or "/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(WORK, ignore_errors=True)
    sweep_out = WORK / "out"
    sweep_out.mkdir(parents=True)
    if resumable.restore(state / TARBALL, sweep_out):
        print(f"resuming from {state / TARBALL}", flush=True)
    before = {r["key"] for r in _report(sweep_out).get("problems", [])}
    levels = _layout(kb, WORK / "kb")
    cmd = [sys.executable, "-m", "okgit", "bench", "kernelbench", str(WORK / "kb"), "--out", str(sweep_out),
           "--parallel", str(args.parallel), "--time-limit", str(args.limit), "--json", *passthrough]
    print(f"levels {', '.join(levels)} of {kb}: {' '.join(cmd[3:])}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1"}
    code = resumable.run_relaying(cmd, env)
    wall = time.monotonic() - started
    finished = sorted({r["key"] for r in _report(sweep_out).get("problems", [])} - before)
    calls = _add_call(sweep_out, wall, code, finished)
    resumable.pack(sweep_out, out / TARBALL)
    shutil.copy(out / TARBALL, _mkdir(state) / TARBALL)
    report = _report(sweep_out)
    text = _table(report, calls) + _screened(sweep_out)
    print(text)
    (out / "sweep-dev.md").write_text(text + "\n\n" + _milestones(sweep_out) + "\n\n" + _profiles(sweep_out) + "\n")
    (out / "sweep-dev.json").write_text(json.dumps({"report": report, "calls": calls}, indent=1) + "\n")
    return 0 if code in (0, 130) else code


def _layout(kb: Path, dest: Path) -> list[str]:
    """dest/KernelBench/level1 and level2, linked to the checkout's (levels 1 and 2 only)."""
    from okgit.kernelbench.reader import level_dirs

    found = level_dirs(kb)
    (dest / "KernelBench").mkdir(parents=True, exist_ok=True)
    levels = []
    for n in (1, 2):
        if n in found:
            (dest / "KernelBench" / f"level{n}").symlink_to(found[n].resolve())
            levels.append(f"level{n}")
    if not levels:
        raise SystemExit(f"{kb}: no level1 or level2 folder")
    return levels


def _add_call(sweep_out: Path, wall: float, code: int, finished: list[str]) -> list[dict]:
    """Each call's wall, its code revision (SWEEP_REV, set by the caller: the GPU machine's copy has
    no .git) and the problems it finished, so rows measured on different code are told apart."""
    path = sweep_out / "dev_calls.json"
    calls = json.loads(path.read_text()) if path.is_file() else []
    calls.append({"wall_s": round(wall, 1), "exit": code, "ended": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "rev": os.environ.get("SWEEP_REV", "unknown"), "card": _card(), "finished": finished})
    path.write_text(json.dumps(calls, indent=1) + "\n")
    return calls


def _screened(sweep_out: Path) -> str:
    """How many proposals (launch-setting variants, Inductor seeds) the search dropped unchecked
    (its screen: a `note` each, okgit.search.driver), over the runs in the sweep's folder,
    problems in flight included."""
    from okgit.search.driver import DROPPED

    dropped: dict[str, int] = {}
    for journal in sweep_out.glob("repos/*/.okgit/runs/*/journal.jsonl"):
        for event in read_jsonl(journal)[0]:
            if event.get("type") == "note" and DROPPED in str(event.get("message", "")):
                problem = journal.parents[3].name
                dropped[problem] = dropped.get(problem, 0) + 1
    if not dropped:
        return "\nscreen: no proposal dropped unchecked"
    return (f"\nscreen: {sum(dropped.values())} proposal(s) dropped unchecked over {len(dropped)} problem(s): "
            + ", ".join(f"{k} {n}" for k, n in sorted(dropped.items())))


MILESTONES = ("run started", "judge up", "reference ready", "reference profiled", "first candidate", "search ended",
              "thorough checked", "rounds done", "run finished", "baselines hold", "end")


def _milestones(sweep_out: Path) -> str:
    """When each step of a problem finished in one call was done, in seconds from its admission
    (written to sweep-dev.md, not printed): where a problem's wall goes, read off its ledger
    and its run's journal (the judge's start and the baselines' first hold from the ledger)."""
    lines = ["Milestones (seconds from each problem's admission; problems finished in one call)", "",
             "| problem | " + " | ".join(MILESTONES) + " |", "|---|" + "---|" * len(MILESTONES)]
    seconds: list[str] = []
    for ledger in sorted((sweep_out / "ledgers").glob("*.jsonl")):
        entries = read_jsonl(ledger)[0]
        stretches = [e["running"] for e in entries if "running" in e]
        journals = list((sweep_out / "repos" / ledger.stem).glob(".okgit/runs/*/journal.jsonl"))
        if len(stretches) != 1 or len(journals) != 1:
            continue  # in flight, or resumed over calls: its steps span calls
        (start, end), events = stretches[0], read_jsonl(journals[0])[0]
        if not any(e.get("type") == "run_finished" for e in events):
            continue

        def first(match) -> float | None:
            return next((float(e["ts"]) for e in events if match(e)), None)

        judge = next((float(e["t"]) for e in entries if e.get("role") == "judge"), None)
        held = next((float(e["t"]) - float(e.get("held_s", 0.0)) for e in entries if e.get("stage") == "baselines"), None)
        gates = [float(e["ts"]) for e in events if e.get("type") == "gate"]
        times = [first(lambda e: e["type"] == "run_started"), judge, first(lambda e: e["type"] == "reference"),
                 first(lambda e: e["type"] == "profiled" and e.get("cand") is None),
                 first(lambda e: e["type"] == "proposal"),
                 first(lambda e: e["type"] == "note" and str(e.get("message", "")).startswith("search ended")),
                 gates[0] if gates else None, gates[-1] if len(gates) > 1 else None,
                 first(lambda e: e["type"] == "run_finished"), held, end]
        lines.append(f"| {ledger.stem} | " + " | ".join("-" if t is None else f"{t - start:.1f}" for t in times) + " |")
        phases = next((e["judge_phases"] for e in entries if "judge_phases" in e), [])
        if phases and all(len(row) > 4 for row in phases):  # each phase's seconds (ledgers before 2026-12-05 lack them)
            seconds.append(f"- {ledger.stem}: " + ", ".join(f"{str(row[0]).removeprefix('reference: ')} {row[4]:.1f}"
                                                          for row in phases))
    if seconds:
        lines += ["", "The reference's preparation and timing in the judge, seconds by phase:", *seconds]
    return "\n".join(lines)


def _profiles(sweep_out: Path) -> str:
    """Issue 32's figures (written to sweep-dev.md, not printed): per finished run, the reference's
    and the winner's profiling pass as its journal's `profiled` events hold them (the tools that
    ran; DRAM bandwidth and SM throughput as shares of peak; occupancy achieved of theoretical and
    its limiter; L2 hits; the top stalls), or why a figure is missing."""
    lines = ["Profiles (the profiling pass's, from each run's journal: reference and winner)", "",
             "| problem | arm | tools | DRAM | SM | occupancy (theoretical, limiter) | L2 hits | top stalls | not run |",
             "|---|---|---|---|---|---|---|---|---|"]

    def pct(x: object) -> str:
        return f"{float(x):.0%}" if isinstance(x, (int, float)) else "-"

    for journal in sorted(sweep_out.glob("repos/*/.okgit/runs/*/journal.jsonl")):
        events = read_jsonl(journal)[0]
        # the last: a run resumed in a later call finished once per call, its winner the last one's
        finished = next((e for e in reversed(events) if e.get("type") == "run_finished"), None)
        if finished is None:
            continue
        profiled = {e.get("cand"): e for e in events if e.get("type") == "profiled"}
        for arm, cand in (("reference", None), (f"winner {finished.get('best_cand')}", finished.get("best_cand"))):
            if cand is None and arm != "reference":
                continue
            event = profiled.get(cand)
            if event is None:
                lines.append(f"| {journal.parents[3].name} | {arm} | not profiled | | | | | | |")
                continue
            prof = event.get("profile") or {}
            stalls = ", ".join(f"{x.get('reason')} {pct(x.get('share'))}" for x in (prof.get("stalls") or [])[:2])
            occupancy = (f"{pct(prof.get('occupancy'))} ({pct(prof.get('occupancy_theoretical'))}, "
                         f"{prof.get('occupancy_limiter') or '-'})")
            missing = "; ".join(f"{k}: {v}" for k, v in (prof.get("not_run") or {}).items())[:120]
            lines.append(f"| {journal.parents[3].name} | {arm} | {', '.join(event.get('tools') or []) or '-'} | "
                         f"{pct(prof.get('bandwidth_utilization'))} | {pct(prof.get('compute_utilization'))} | "
                         f"{occupancy} | {pct(prof.get('cache_hit_rate'))} | {stalls or '-'} | {missing or '-'} |")
    return "\n".join(lines)


def _card() -> str:
    """The GPU this call ran on (the device machine lends an H100 or an H200): rows timed on
    different cards are told apart as rows on different code are."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "no GPU"
    names = sorted(set(done.stdout.split("\n")) - {""})
    return ", ".join(names) if done.returncode == 0 and names else "no GPU"


def _report(sweep_out: Path) -> dict:
    path = sweep_out / "report.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _table(report: dict, calls: list[dict]) -> str:
    from okgit.kernelbench.scoring import SweepReport

    if not report:
        return "no report: the sweep wrote none (see its output above)"
    sweep = SweepReport.model_validate(report)
    used = sum(c["wall_s"] for c in calls)
    lines = [sweep.markdown().rstrip(), ""]
    if sweep.pending:
        lines.append(f"pending ({len(sweep.pending)}, {len(sweep.in_flight)} in flight): {', '.join(sweep.pending)}")
    where = sorted({_where(c) for c in calls})
    if len(where) > 1:  # never pooled: say which rows came from which code and card
        lines.append("rows measured on different code or cards: " + "; ".join(
            f"{w}: {', '.join(k for c in calls if _where(c) == w for k in c.get('finished', [])) or 'none'}"
            for w in where))
    lines.append(f"device-minutes used so far: {used / 60:.1f} over {len(calls)} call(s) of this script "
                 f"({used / HOUR_S:.0%} of the hour); finished {len(sweep.problems)} of "
                 f"{len(sweep.problems) + len(sweep.pending)} problems")
    return "\n".join(lines)


def _where(call: dict) -> str:
    """A call's code revision and card (calls recorded before cards were: the card unknown)."""
    return f"{call.get('rev', 'unknown')} on {call.get('card', 'an unrecorded card')}"


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    sys.exit(main())
