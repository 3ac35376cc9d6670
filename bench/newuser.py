"""A new user's ops, as issues 30 and 31 ask them tried: each op of bench/newuser/ optimized in a
git repository of its own, the best candidate applied, then the applied file run at the op's own
shape and at a second batch size, counting its Triton launches (0: the original forward ran) and
comparing its output with the original's (training and eval mode where the op has a mode); on a
GPU eager, torch.compile (default mode) and the applied file timed at the own shape with the
evaluator's timer (CUDA events, L2 flushed, interleaved rounds, median).

    python bench/newuser.py                      # GPU: every op, default iterations (resumable)
    python bench/newuser.py --ops conv_bn,attn64c --iterations 8
    python bench/newuser.py --smoke              # CPU, Triton's interpreter, no timing

Each op's row is saved as it finishes in $OUT/newuser.json (default /tmp/out); `--resume FILE`
skips the ops a previous call finished. Prints a table. Exit 1 where an applied file launched
nothing at some shape or disagreed with the original.
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

from seed_shapes import CHILD_PRELUDE, ROUNDS, SAMPLES, run_json, scaled

ROOT = Path(__file__).resolve().parents[1]
OPS = Path(__file__).resolve().parent / "newuser"

CHILD = CHILD_PRELUDE + r'''
rows = {}
for shape, knobs in job["shapes"].items():
    original, ref = arm(job["original"], f"original_{shape}", knobs)
    _, new = arm(job["applied"], f"applied_{shape}", knobs)
    new.load_state_dict(ref.state_dict())
    torch.manual_seed(1)
    with torch.device(device):
        inputs = list(original.get_inputs())
    for mode in job["modes"]:
        ref.train(mode == "train"); new.train(mode == "train")
        counter.reset()
        try:
            with torch.no_grad():
                want, got = outputs(ref(*inputs)), outputs(new(*inputs))
            rows[f"{shape} {mode}"] = {"launches": counter.total(), "rel_err": rel_err(got, want)}
        except Exception as e:
            rows[f"{shape} {mode}"] = {"launches": counter.total(), "error": f"{type(e).__name__}: {str(e)[:200]}"}
    if shape != "own" or device != "cuda":
        continue
    ref.eval(); new.eval()
    rows["time_us"] = time_arms({"eager": ref, "compile": torch.compile(ref), "okgit": new}, inputs)
print("RESULT " + json.dumps(rows))
'''


def no_kernel(run: subprocess.CompletedProcess, runs: list[dict], repo: Path, env: dict[str, str]) -> str:
    """Why no kernel was handed out: the run's status and each candidate's, or the run's last words."""
    if not runs:
        return (run.stderr.strip().splitlines() or run.stdout.strip().splitlines() or ["no run"])[-1][:300]
    cands = json.loads(okgit(["history", runs[0]["run_id"], "--json"], repo, env, 120).stdout or "{}").get("candidates", [])
    return f"run {runs[0]['status']}, no kernel handed out; candidates: {', '.join(each(cands)) or 'none'}"[:600]


def each(cands: list[dict]) -> list[str]:
    """Every candidate of a run as "c005 inductor correct 1.32x": which seed or kind timed how."""
    return [f"{c['cand']} {c['origin']} {c['status']}" + (f" {c['speedup']:.2f}x" if c.get("speedup") else "")
            for c in cands]


def okgit(args: list[str], repo: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "okgit", *args], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=timeout)


def shapes(path: Path, smoke: bool) -> dict[str, dict[str, int]]:
    """The op's own knobs and a second batch size (on the CPU both scaled down first)."""
    from okgit.problem import shape_knobs

    own = shape_knobs(path.read_text(), str(path))
    if smoke:
        own = scaled(path, own)
    return {"own": own, "batch": {**own, "batch": own["batch"] // 2 + 1}}


def one(op: Path, args: argparse.Namespace, env: dict[str, str]) -> dict:
    row: dict = {"op": op.stem}
    repo = Path(tempfile.mkdtemp(prefix="okgit-newuser-"))
    try:
        shutil.copy(op, repo / op.name)
        for cmd in (["init", "-q"], ["add", op.name], ["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "op"]):
            subprocess.run(["git", *cmd], cwd=repo, check=True)
        original = repo / "original.py"
        shutil.copy(op, original)  # untracked: okgit leaves files it did not patch alone
        t0 = time.monotonic()
        flags = ["--iterations", str(args.iterations)] if args.iterations else []
        run = okgit(["optimize", op.name, *flags], repo, env, args.run_timeout)
        row["optimize_s"] = round(time.monotonic() - t0, 1)
        runs = json.loads(okgit(["history", "--json"], repo, env, 120).stdout or "[]")
        if run.returncode != 0 or not runs or not runs[0].get("best_tag"):
            row["error"] = no_kernel(run, runs, repo, env)
            return row
        best = runs[0]["best_tag"]
        cands = json.loads(okgit(["history", runs[0]["run_id"], "--json"], repo, env, 120).stdout)["candidates"]
        row.update(status=runs[0]["status"], speedup=runs[0]["speedup"], best=best,
                   origin=next((c["origin"] for c in cands if c["tag"] == best), "-"),
                   candidates=each(cands))
        applied = okgit(["apply", best], repo, env, 300)
        if applied.returncode != 0:
            row["error"] = f"apply: {(applied.stderr.strip().splitlines() or ['failed'])[-1][:300]}"
            return row
        modes = ["train", "eval"] if "BatchNorm" in op.read_text() or "Dropout" in op.read_text() else ["eval"]
        job = {"original": str(original), "applied": str(repo / op.name), "shapes": shapes(op, args.smoke),
               "device": "cpu" if args.smoke else "cuda", "modes": modes, "rounds": ROUNDS, "samples": SAMPLES}
        result, err = run_json([sys.executable, "-c", CHILD, json.dumps(job)], 900, env, prefix="RESULT ")
        row.update(result or {"error": err})
        return row
    except subprocess.TimeoutExpired as e:
        row["error"] = f"timeout: {' '.join(map(str, e.cmd[2:4]))} after {e.timeout:.0f} s"
        return row
    finally:
        shutil.rmtree(repo, ignore_errors=True)


def failed(row: dict) -> bool:
    checks = [v for k, v in row.items() if isinstance(v, dict) and ("own" in k or "batch" in k)]
    return "error" in row or not checks or any("error" in c or c["launches"] == 0 or c["rel_err"] > 1e-3 for c in checks)


def table(rows: list[dict]) -> str:
    lines = ["| op | status | best (origin) | launches per shape (and mode) | worst rel. err | eager us | compile us | okgit us | x eager | x compile |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['op']} | - | {row['error']} | | | | | | | |")
            continue
        checks = {k: v for k, v in row.items() if isinstance(v, dict) and ("own" in k or "batch" in k)}
        launches = " / ".join(str(v.get("launches")) for v in checks.values())
        worst = max((v["rel_err"] for v in checks.values() if "rel_err" in v), default=None)
        t = row.get("time_us", {})
        us = [f"{t[a]:.1f}" if a in t else "-" for a in ("eager", "compile", "okgit")]
        ratio = [f"{t[a] / t['okgit']:.2f}" if t.get(a) and t.get("okgit") else "-" for a in ("eager", "compile")]
        lines.append(f"| {row['op']} | {row['status']} | {row['best'].rsplit('/', 1)[-1]} ({row['origin']}) | {launches} | "
                     f"{f'{worst:.1e}' if worst is not None else '-'} | {' | '.join(us)} | {' | '.join(ratio)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="", help="comma-separated op names of bench/newuser/ (default: all)")
    parser.add_argument("--iterations", type=int, default=0, help="okgit optimize --iterations (default: okgit's)")
    parser.add_argument("--smoke", action="store_true", help="CPU, Triton's interpreter, scaled-down sizes, no timing")
    parser.add_argument("--resume", type=Path, help="a previous call's newuser.json: its finished ops are kept")
    parser.add_argument("--run-timeout", type=float, default=900.0, help="seconds for one okgit optimize")
    parser.add_argument("--time-limit", type=float, default=520.0, help="start no op after this many seconds")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if args.smoke:
        env["TRITON_INTERPRET"] = "1"
    names = [n for n in args.ops.split(",") if n] or sorted(p.stem for p in OPS.glob("*.py"))
    rows = {r["op"]: r for r in json.loads(args.resume.read_text())} if args.resume and args.resume.exists() else {}
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    for name in names:
        if name in rows and "error" not in rows[name]:
            continue
        if time.monotonic() - start > args.time_limit:
            print(f"time limit: not started: {','.join(n for n in names if n not in rows)}", flush=True)
            break
        rows[name] = one(OPS / f"{name}.py", args, env)
        (out / "newuser.json").write_text(json.dumps(list(rows.values()), indent=1))
        print(f"{name}: {'FAILED' if failed(rows[name]) else 'ok'} ({rows[name].get('optimize_s', '-')} s)", flush=True)
    print(table([rows[n] for n in names if n in rows]))
    return 1 if any(failed(rows[n]) for n in names if n in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
