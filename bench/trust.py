"""Trust under real use, on one GPU, across device calls (issue 29):

    python3 bench/trust.py [--kb .kb] [--time-limit 540] [--state DIR] [--iterations 2] [--smoke]

Stages, each kept in DIR/trust.json (default bench/results/trust/) once finished, so the next call
goes on where the last stopped:
  tests     the GPU tests of the contract, all of tests/eval/test_eval_gpu.py (the side-stream
            variants, the honest two-stream kernel, the remembered-output caches with the roofline
            gate off, ...); run again when the recorded selection is not this one
  parallel  PROBLEMS (8 development problems of level 2, among them the three with a batch
            norm: 11, 15, 39) at --parallel 6 on the one GPU, through `okgit bench kernelbench
            --cross-check` (KernelBench's own evaluation of each winner, where the kernelbench
            package is importable: bench/kbpkg.sh). The sweep stops inside the call's time and is
            packed into $OUT/trust-parallel.tar.gz (copied to DIR): the next call resumes it.
  alone     each winner of the parallel sweep judged again with the GPU to itself, one at a time
            (`okgit eval --mode thorough`, every gate): the verdict okgit gave while six problems
            shared the GPU against the verdict alone, for the same kernel.
The sweep runs with `--profiler off`: profiling never changes a verdict and is not what this checks.
Then one table: per problem the verdict at --parallel 6 and alone and whether they agree (the
speedups beside them: the sweep's over eager from its baselines, the evaluator's alone),
out-of-memory failures (any log or error that says so) and the cross-check's verdict; and a line
of totals. $OUT (default /tmp/out) gets trust.json, trust.md and the tarball.

--smoke: the same path on the CPU (tests/kb_fixture, one problem, --device cpu, one iteration,
--parallel 2), its state in a temporary folder unless --state is given; the GPU tests and
KernelBench's cross-check are skipped and named. No time is claimed.
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

from okgit.kernelbench.reader import KBProblem
from okgit.kernelbench.runs import slug

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = "11,15,31,39,59,63,83,99"  # level 2: three batch norms (11, 15, 39), a dropout (83), GEMMs, convs
BATCHNORM = {"11", "15", "39"}
GPU_TESTS = "tests/eval/test_eval_gpu.py"  # the whole file: pytest's selection as recorded in trust.json
OOM_SIGNS = ("out of memory", "OutOfMemoryError")
TARBALL = "trust-parallel.tar.gz"
WORK = Path(tempfile.gettempdir()) / "okgit-trust"  # the same path in every call: the sweep resumes there
UNFINISHED = {"interrupted", "timeout"}


def parallel_sweep(kb: Path, level: int, problems: str, parallel: int, flags: list[str], limit_s: float,
                   env: dict[str, str]) -> dict:
    """The sweep, resumed from WORK/out, stopped after limit_s; its rows and whether all finished."""
    out = WORK / "out"
    cmd = [sys.executable, "-m", "okgit", "bench", "kernelbench", str(kb), "--level", str(level), "--problems", problems,
           "--parallel", str(parallel), "--out", str(out), "--time-limit", str(int(limit_s)), "--json", *flags]
    t0 = time.monotonic()
    code = resumable.run_relaying(cmd, env, cwd=ROOT)
    report_path = out / "report.json"
    if not report_path.is_file():
        return {"error": f"no report (exit {code})", "wall_s": round(time.monotonic() - t0, 1), "done": False}
    report = json.loads(report_path.read_text())
    logs = "\n".join(p.read_text(errors="replace") for p in (out / "logs").glob("*.log")) if (out / "logs").is_dir() else ""
    rows = {}
    for r in report["problems"]:
        cc = r.get("cross_check") or {}
        rows[str(r["id"])] = {"name": r["name"], "status": r["status"], "correct": r["correct"],
                              "speedup_eager": r.get("speedup_eager"), "level": r["level"],
                              "oom": any(s in (r.get("error") or "") for s in OOM_SIGNS),
                              "cross_check": None if not cc or cc.get("correct") is None else bool(cc["correct"]),
                              "cross_check_error": cc.get("error"), "error": r.get("error")}
    wanted = set(problems.split(","))
    done = wanted <= set(rows) and not any(rows[p]["status"] in UNFINISHED for p in wanted)
    return {"wall_s": round(time.monotonic() - t0, 1), "parallel": parallel, "problems": rows, "done": done,
            "oom_in_logs": sum(logs.count(s) for s in OOM_SIGNS), "cross_check": report.get("cross_check")}


def judge_alone(problem: Path, winner: Path, device: str, limit_s: float, env: dict[str, str]) -> dict:
    """`okgit eval --mode thorough` of one winner, the GPU to itself."""
    cmd = [sys.executable, "-m", "okgit", "eval", "--json", "--mode", "thorough", "--device", device,
           "--ref", str(problem), str(winner)]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(10.0, limit_s))
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {limit_s:.0f} s", "wall_s": round(time.monotonic() - t0, 1)}
    wall = round(time.monotonic() - t0, 1)
    if proc.returncode != 0:
        tail = [line for line in proc.stderr.splitlines() if line.strip()][-2:]
        text = " | ".join(tail) or f"exit {proc.returncode}"
        return {"error": text[:400], "oom": any(s in text for s in OOM_SIGNS), "wall_s": wall}
    r = json.loads(proc.stdout)
    err = r.get("error") or {}
    return {"status": r["status"], "correct": r["correct"], "speedup": r.get("speedup"), "wall_s": wall,
            "gate": err.get("gate"), "oom": any(s in (err.get("message") or "") for s in OOM_SIGNS)}


def gpu_tests(limit_s: float) -> dict:
    # one process (no pyproject addopts): the device carries okgit's dependencies, not pytest-xdist
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-m", "gpu", *GPU_TESTS.split(), "-p", "no:cacheprovider"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(10.0, limit_s))
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {limit_s:.0f} s"}
    last = [line for line in proc.stdout.splitlines() if line.strip()][-1:] or ["no output"]
    return {"returncode": proc.returncode, "summary": last[0], "tail": proc.stdout[-2000:]}


def _verdict(r: dict | None) -> str:
    if not r:
        return "-"
    if r.get("error") and "status" not in r:
        return f"error: {r['error'][:60]}"
    return f"{r['status']}{' (correct)' if r['correct'] else ''}"


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v else "-"


def table(state: dict) -> list[str]:
    par = state.get("parallel", {}).get("problems", {})
    alone = state.get("alone", {})
    lines = [f"problem | parallel {state.get('parallel', {}).get('parallel', '-')} | alone | agree | speedup (sweep, alone) | OOM | cross-check",
             "---|---|---|---|---|---|---"]
    agree_n = oom_n = cc_bad = 0
    without = []  # no winner to judge again alone (the sweep's error names why)
    for pid in sorted(set(par), key=int):
        p, a = par[pid], alone.get(pid)
        agree = bool(a and "status" in a and bool(a["correct"]) == bool(p["correct"]))
        agree_n += agree
        no_winner = bool(a and "status" not in a and str(a.get("error", "")).startswith("no winner"))
        if no_winner:
            without.append(f"{pid} ({(p.get('error') or p['status']).split('.py: ', 1)[-1][:140]})")
        oom = sum(bool(r and r.get("oom")) for r in (p, a))
        oom_n += oom
        cc = p.get("cross_check")
        cc_bad += cc is False
        mark = " (batch norm)" if pid in BATCHNORM and not state.get("smoke") else ""
        lines.append(f"{pid}_{p['name']}{mark} | {_verdict(p)} | {_verdict(a)} | {'yes' if agree else ('-' if not a or no_winner else 'NO')} | "
                     f"{_x(p.get('speedup_eager'))}, {_x((a or {}).get('speedup'))} | {oom} | "
                     f"{'-' if cc is None else ('ok' if cc else 'INCORRECT')}")
    judged = len(par) - len(without)
    lines.append(f"totals: {agree_n}/{judged} winners with the same verdict at --parallel and alone; "
                 f"without a winner: {', '.join(without) or 'none'}; out-of-memory failures {oom_n} "
                 f"(mentions in the sweep's logs: {state.get('parallel', {}).get('oom_in_logs', 0)}); cross-check incorrect {cc_bad}")
    if state.get("parallel", {}).get("cross_check"):
        lines.append(f"cross-check: {state['parallel']['cross_check']}")
    if "tests" in state:
        lines.append(f"GPU tests: {state['tests'].get('summary') or state['tests'].get('error')}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", default=str(ROOT / ".kb"), help="a KernelBench checkout (default .kb, a copy of ../shared/kernelbench)")
    ap.add_argument("--time-limit", type=float, default=540.0, help="seconds for this call (default 540)")
    ap.add_argument("--state", help="folder of the earlier calls' trust.json and tarball (default bench/results/trust)")
    ap.add_argument("--iterations", type=int, default=2, help="okgit's iterations per problem (default 2: templates, no model)")
    ap.add_argument("--smoke", action="store_true", help="the CPU path on tests/kb_fixture")
    args = ap.parse_args()
    deadline = time.monotonic() + args.time_limit
    out_dir = Path(os.environ.get("OUT") or "/tmp/out").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    state_dir = Path(args.state) if args.state else (Path(tempfile.mkdtemp(prefix="okgit-trust-state-")) if args.smoke
                                                     else ROOT / "bench" / "results" / "trust")
    state_dir.mkdir(parents=True, exist_ok=True)
    state: dict = json.loads((state_dir / "trust.json").read_text()) if (state_dir / "trust.json").is_file() else {}
    state["smoke"] = args.smoke
    if args.smoke:
        kb, level, problems, device = ROOT / "tests" / "kb_fixture", 1, "1", "cpu"
        flags, parallel = ["--device", "cpu", "--iterations", "1"], 2
        state["skipped"] = ["tests: the GPU tests need a GPU", "cross-check: KernelBench's evaluation needs a GPU"]
    else:
        kb, level, problems, device = Path(args.kb), 2, PROBLEMS, "cuda"
        # the profiling pass off: it never changes a verdict (tests/eval) and Nsight Compute's replays
        # cost device time this check does not need
        flags, parallel = ["--iterations", str(args.iterations), "--cross-check", "--profiler", "off"], 6
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1", **({"CUDA_VISIBLE_DEVICES": ""} if args.smoke else {})}

    def save() -> None:
        for d in (out_dir, state_dir):
            (d / "trust.json").write_text(json.dumps(state, indent=1) + "\n")

    def left() -> float:
        return deadline - time.monotonic()

    if state.get("tests", {}).get("selection") != GPU_TESTS and not args.smoke:
        print(f"trust: tests: running ({left():.0f} s left)", flush=True)
        state["tests"] = {**gpu_tests(left()), "selection": GPU_TESTS}
        save()
    if not state.get("parallel", {}).get("done"):
        shutil.rmtree(WORK, ignore_errors=True)
        (WORK / "out").mkdir(parents=True)
        resumed = resumable.restore(state_dir / TARBALL, WORK / "out")
        limit = left() - 30  # the sweep stops inside it, then the pack
        print(f"trust: parallel: {'resuming' if resumed else 'starting'} ({limit:.0f} s for the sweep)", flush=True)
        state["parallel"] = parallel_sweep(kb, level, problems, parallel, flags, limit, env)
        resumable.pack(WORK / "out", out_dir / TARBALL)
        if out_dir.resolve() != state_dir.resolve():
            shutil.copy(out_dir / TARBALL, state_dir / TARBALL)
        save()
    alone = state.setdefault("alone", {})
    if state["parallel"].get("done"):
        if not (WORK / "out" / "winners").is_dir():  # a fresh call: the tarball holds the winners
            resumable.restore(state_dir / TARBALL, WORK / "out")
        for pid, row in sorted(state["parallel"]["problems"].items(), key=lambda kv: int(kv[0])):
            if pid in alone:
                continue
            problem = kb / "KernelBench" / f"level{level}" / f"{pid}_{row['name']}.py"
            winner = WORK / "out" / "winners" / f"{slug(KBProblem(row['level'], int(pid), row['name'], problem))}.py"
            if not winner.is_file():
                alone[pid] = {"error": f"no winner ({row['status']})"}
                continue
            if left() < 60:
                print(f"trust: alone: stopped before {pid} (time); the next call goes on", flush=True)
                break
            print(f"trust: alone: {pid}_{row['name']} ({left():.0f} s left)", flush=True)
            alone[pid] = judge_alone(problem, winner, device, left() - 10, env)
            save()
    save()
    text = "\n".join(table(state))
    (out_dir / "trust.md").write_text(text + "\n")
    print(text)
    if args.smoke:
        print("smoke run: no GPU figure; the GPU tests and the cross-check were skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
