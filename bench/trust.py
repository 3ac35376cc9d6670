"""Trust under real use, on one GPU, in one device call (issue 20):

    python3 bench/trust.py [--kb .kb] [--time-limit 540] [--resume FILE] [--smoke]

Stages, each skipped when --resume's file (an earlier call's trust.json) already holds it:
  tests     the GPU tests of the contract: pytest -m gpu tests/eval/test_eval_gpu.py -k remembered
            (the four remembered-output caches with the roofline gate off)
  parallel  PROBLEMS (8 development problems of level 2, among them the three with a batch
            norm: 11, 15, 39) at --parallel 6 on the one GPU, through `okgit bench kernelbench
            --cross-check` (KernelBench's own evaluation of each winner, when installed)
  alone     the same problems one at a time
Then one table: per problem the verdict at --parallel 6 and alone (status, correct) and
whether they are the same, out-of-memory failures (any log or error that says so) and the
cross-check's `incorrect`; and a line of totals. trust.json goes to $OUT (default: the
working directory), rewritten after each stage, so a call cut short keeps what finished:
copy it to bench/results/trust-resume.json and pass --resume to go on.

--smoke: the same path on the CPU (tests/kb_fixture, one problem, --device cpu, one
iteration, --parallel 2 against alone); the GPU tests and KernelBench's cross-check are
skipped and named. No time is claimed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = "11,15,31,39,59,63,83,99"  # level 2: three batch norms (11, 15, 39), a dropout (83), GEMMs, convs
BATCHNORM = {"11", "15", "39"}
OOM_SIGNS = ("out of memory", "OutOfMemoryError")


def sweep(kb: Path, level: int, problems: str, parallel: int, out: Path, flags: list[str], limit_s: float) -> dict:
    """One `okgit bench kernelbench --json` run; its report, or why there is none."""
    cmd = [sys.executable, "-m", "okgit", "bench", "kernelbench", str(kb), "--level", str(level), "--problems", problems,
           "--parallel", str(parallel), "--out", str(out), "--json", *flags]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(10.0, limit_s))
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {limit_s:.0f} s", "wall_s": round(time.monotonic() - t0, 1)}
    if proc.returncode != 0:
        tail = [line for line in proc.stderr.splitlines() if line.strip()][-3:]
        return {"error": " | ".join(tail) or f"exit {proc.returncode}", "wall_s": round(time.monotonic() - t0, 1)}
    report = json.loads(proc.stdout)
    logs = "\n".join(p.read_text(errors="replace") for p in (out / "logs").glob("*.log")) if (out / "logs").is_dir() else ""
    rows = {}
    for r in report["problems"]:
        text = f"{r.get('error') or ''}"
        cc = r.get("cross_check") or {}
        rows[str(r["id"])] = {"name": r["name"], "status": r["status"], "correct": r["correct"],
                              "oom": any(s in text for s in OOM_SIGNS),
                              "cross_check": None if not cc or cc.get("correct") is None else bool(cc["correct"]),
                              "cross_check_error": cc.get("error"), "error": r.get("error")}
    return {"wall_s": round(time.monotonic() - t0, 1), "parallel": parallel, "problems": rows,
            "oom_in_logs": sum(logs.count(s) for s in OOM_SIGNS), "cross_check": report.get("cross_check")}


def gpu_tests(limit_s: float) -> dict:
    # one process (no pyproject addopts): the device carries okgit's dependencies, not pytest-xdist
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-m", "gpu", "tests/eval/test_eval_gpu.py", "-k", "remembered",
           "-p", "no:cacheprovider"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(10.0, limit_s))
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {limit_s:.0f} s"}
    last = [line for line in proc.stdout.splitlines() if line.strip()][-1:] or ["no output"]
    return {"returncode": proc.returncode, "summary": last[0], "tail": proc.stdout[-2000:]}


def table(state: dict) -> list[str]:
    par, alone = state.get("parallel", {}).get("problems", {}), state.get("alone", {}).get("problems", {})
    lines = [f"problem | parallel {state.get('parallel', {}).get('parallel', '-')} | alone | same | OOM | cross-check",
             "---|---|---|---|---|---"]
    same_n = oom_n = cc_bad = 0
    for pid in sorted(set(par) | set(alone), key=int):
        p, a = par.get(pid), alone.get(pid)
        verdict = [f"{r['status']}{' (correct)' if r['correct'] else ''}" if r else "-" for r in (p, a)]
        same = bool(p and a and (p["status"], p["correct"]) == (a["status"], a["correct"]))
        same_n += same
        oom = sum(bool(r and r["oom"]) for r in (p, a))
        oom_n += oom
        cc = [r["cross_check"] for r in (p, a) if r and r.get("cross_check") is not None]
        cc_bad += sum(c is False for c in cc)
        name = (p or a or {}).get("name", "")
        lines.append(f"{pid}_{name}{' (batch norm)' if pid in BATCHNORM and not state.get('smoke') else ''} | {verdict[0]} | {verdict[1]} | {'same' if same else 'DIFFERENT'} | {oom} | "
                     f"{'/'.join('ok' if c else 'INCORRECT' for c in cc) or '-'}")
    oom_logs = sum(state.get(s, {}).get("oom_in_logs", 0) for s in ("parallel", "alone"))
    lines.append(f"totals: {same_n}/{len(set(par) | set(alone))} verdicts the same; out-of-memory failures {oom_n} "
                 f"(mentions in logs: {oom_logs}); cross-check incorrect {cc_bad}")
    notes = {state.get(s, {}).get("cross_check") for s in ("parallel",)} - {None}
    lines += [f"cross-check: {n}" for n in notes]
    if "tests" in state:
        lines.append(f"GPU tests: {state['tests'].get('summary') or state['tests'].get('error')}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", default=str(ROOT / ".kb"), help="a KernelBench checkout (default .kb, a copy of ../shared/kernelbench)")
    ap.add_argument("--time-limit", type=float, default=540.0, help="seconds for all stages (default 540)")
    ap.add_argument("--resume", help="an earlier call's trust.json: its stages are not run again")
    ap.add_argument("--iterations", type=int, default=2, help="okgit's iterations per problem (default 2: templates, no model)")
    ap.add_argument("--smoke", action="store_true", help="the CPU path on tests/kb_fixture")
    args = ap.parse_args()
    out_dir = Path(os.environ.get("OUT") or ".").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    state: dict = json.loads(Path(args.resume).read_text()) if args.resume else {}
    state["smoke"] = args.smoke
    deadline = time.monotonic() + args.time_limit
    if args.smoke:
        kb, level, problems, parallel = ROOT / "tests" / "kb_fixture", 1, "1", 2
        flags = ["--device", "cpu", "--iterations", "1"]
        state["skipped"] = ["tests: the GPU tests need a GPU"]
    else:
        kb, level, problems, parallel = Path(args.kb), 2, PROBLEMS, 6
        flags = ["--iterations", str(args.iterations)]
    work = out_dir / "trust-sweeps"

    def save() -> None:
        (out_dir / "trust.json").write_text(json.dumps(state, indent=1))

    stages = [("tests", lambda left: gpu_tests(left)),
              ("parallel", lambda left: sweep(kb, level, problems, parallel, work / "parallel", flags + ["--cross-check"], left)),
              ("alone", lambda left: sweep(kb, level, problems, 1, work / "alone", flags, left))]
    for name, run in stages:
        if name in state or (args.smoke and name == "tests"):
            print(f"trust: {name}: {'from --resume' if name in state else 'skipped (smoke)'}", flush=True)
            continue
        left = deadline - time.monotonic()
        if left < 30:
            print(f"trust: {name}: not run, {left:.0f} s left (rerun with --resume)", flush=True)
            continue
        print(f"trust: {name}: running ({left:.0f} s left)", flush=True)
        state[name] = run(left)
        save()
    save()
    print("\n".join(table(state)))
    if args.smoke:
        print("smoke run: no GPU figure; the GPU tests were skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
