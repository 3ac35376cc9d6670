"""okgit's offline default on the example ops: `okgit bench kernelbench` over them, on this GPU.

    python3 bench/offline.py [--parallel N] [--work DIR] [--resume-from OFFLINE_JSON] [okgit bench flags, e.g. --iterations 4]

Lays examples/*.py out as KernelBench/level1/<i>_<Name>.py (numbered in file-name order) and
runs `okgit bench kernelbench` over it with no model: templates, then autotune, then the final
gate, each problem in its own git repository, --parallel problems at once (on one GPU they
share it through the device lock, which every GPU measurement holds; spawning workers and
torch.compile's compilation overlap). Per problem the sweep times eager PyTorch,
torch.compile (default mode) and okgit's winner live, in one process, interleaved, and checks
the winner against a float64 eager run at the default shapes. Prints the table (speedup vs
eager and vs torch.compile, device seconds and wall per op) and fast_p / geomean per baseline,
and writes offline.json, offline.md and journals.jsonl (every run's journal, one line per
event with its problem) to $OUT when it is set: three files, as a device call brings back
only a few.

Resumable: with --work the layout and the sweep's state stay in DIR; --resume-from seeds the
state with the problems of an earlier call's offline.json (fetched from the device machine):
they are skipped and reported with the new ones. Only problems that ran to a status are
taken; an `error` is run again.

--time-limit S stops the sweep (SIGTERM to its process group, as Ctrl-C) after S seconds and
still writes the files from the problems that finished (marked partial); a problem cut short
is left out, not scored. --smoke runs the same path on the CPU (--device cpu, one problem, one
iteration): correctness is real, nothing is timed, the baselines say why.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class _Stop(BaseException):
    """SIGTERM while the sweep runs: stop it and report what finished."""


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
    parser.add_argument("--resume-from", metavar="OFFLINE_JSON", help="an earlier call's offline.json")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="stop after S seconds and report the problems finished by then")
    parser.add_argument("--smoke", action="store_true",
                        help="CPU + Triton interpreter: --device cpu --iterations 1 --problems 1-1 unless given")
    args, passthrough = parser.parse_known_args()
    if args.smoke:
        given = {a.split("=")[0] for a in passthrough}
        for flag, value in (("--device", "cpu"), ("--iterations", "1"), ("--problems", "1-1")):
            if flag not in given:
                passthrough += [flag, value]

    examples = sorted(p for p in Path(args.examples).glob("*.py") if not p.name.startswith("_"))
    if not examples:
        print(f"no example ops in {args.examples}", file=sys.stderr)
        return 1
    if args.smoke:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the sweep and its problems see no GPU
        gpus = 0  # nor torch in this process: seconds of CPU a smoke call saves
    else:
        import torch

        gpus = torch.cuda.device_count()
    parallel = args.parallel or max(gpus, 1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory(prefix="okgit-examples-kb-", ignore_cleanup_errors=True) as tmp:
        work = Path(args.work).resolve() if args.work else Path(tmp)
        kb = layout(examples, work)
        out = work / "out"
        if args.resume_from:
            print(f"resuming: {seed_state(Path(args.resume_from), out / 'state')} problem(s) already done "
                  f"in {args.resume_from}", flush=True)
        cmd = [sys.executable, "-m", "okgit", "bench", "kernelbench", str(kb), "--parallel", str(parallel),
               "--out", str(out), "--json", *passthrough]
        if args.smoke:
            print("smoke: CPU under the Triton interpreter; the eager and torch.compile baselines are not timed "
                  "(GPU only), so no speedup is claimed", flush=True)
        print(f"{len(examples)} ops, {gpus} GPU(s) ({torch.cuda.get_device_name(0) if gpus else 'none'}), "
              f"parallel {parallel}: {' '.join(cmd[3:])}", flush=True)
        started = time.monotonic()
        # its own process group: a time limit stops okgit and its problems' runs together (each run
        # takes SIGTERM as Ctrl-C and closes its evaluation workers, which live in sessions of their own)
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)

        def on_term(signum, frame):  # e.g. the device call's `timeout`: it cannot reach okgit's own group
            raise _Stop()

        previous = signal.signal(signal.SIGTERM, on_term)
        try:
            stdout, _ = proc.communicate(timeout=args.time_limit)
            stopped = False
        except (subprocess.TimeoutExpired, _Stop):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            stdout, stopped = _stop(proc), True
        finally:
            signal.signal(signal.SIGTERM, previous)
        wall = time.monotonic() - started
        if stopped:
            report, markdown = _partial(kb, out, passthrough, parallel, wall, args.time_limit or wall)
        elif proc.returncode != 0:
            print(f"okgit bench kernelbench failed (exit {proc.returncode})", file=sys.stderr)
            return proc.returncode
        else:
            report = json.loads(stdout)
            markdown = (out / "report.md").read_text()
        journals = [{"problem": f.parts[-5], **json.loads(line)}  # kept before the temp dir goes
                    for f in sorted((out / "repos").glob("*/.okgit/runs/*/journal.jsonl"))
                    for line in f.read_text().splitlines() if line.strip()]
    report["offline"] = offline_figures(report["problems"])
    markdown += "\n" + offline_line(report["offline"]) + "\n"
    print(markdown)
    tail = f"wall time of this call: {wall:.1f} s, --parallel {parallel} on {gpus} GPU(s)"
    print(tail)
    if os.environ.get("OUT"):
        dest = Path(os.environ["OUT"])
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "offline.json").write_text(json.dumps({**report, "bench_wall_s": round(wall, 1)}, indent=2) + "\n")
        (dest / "offline.md").write_text(markdown + f"\n{tail}\n")
        (dest / "journals.jsonl").write_text("".join(json.dumps(e) + "\n" for e in journals))
    return 0


def seed_state(offline_json: Path, state: Path) -> int:
    """Write the finished problems of an earlier offline.json as the sweep's state files."""
    from okgit.kernelbench.scoring import ProblemResult

    state.mkdir(parents=True, exist_ok=True)
    done = [ProblemResult.model_validate(p) for p in json.loads(offline_json.read_text())["problems"]]
    done = [p for p in done if p.status != "error"]
    for p in done:
        (state / f"level{p.level}_{p.id}_{p.name}.json").write_text(p.model_dump_json())
    return len(done)


def offline_figures(problems: list[dict]) -> dict:
    """What a user without a model gets, over every op: the winner where it is correct, else the
    reference they keep (1.00x eager, eager/compile against torch.compile). Ops with no eager and
    compile time (an error, or no GPU) are listed, not guessed."""
    from okgit.kernelbench.scoring import geomean

    vs_eager, vs_compile, untimed = [], [], []
    for p in problems:
        if p["correct"] and p.get("speedup_eager") and p.get("speedup_compile"):
            vs_eager.append(p["speedup_eager"])
            vs_compile.append(p["speedup_compile"])
        elif not p["correct"] and p.get("eager_us") and p.get("compile_us"):
            vs_eager.append(1.0)
            vs_compile.append(p["compile_us"] / p["eager_us"])
        else:
            untimed.append(p["key"])
    n = len(vs_eager)
    return {"ops": len(problems), "placed": n, "untimed": untimed,
            "geomean_vs_eager": geomean(vs_eager), "geomean_vs_compile": geomean(vs_compile),
            "fast_1_vs_eager": sum(v > 1.0 for v in vs_eager) / n if n else None,
            "fast_1_vs_compile": sum(v > 1.0 for v in vs_compile) / n if n else None}


def offline_line(f: dict) -> str:
    if not f["placed"]:
        return f"offline result over all ops: none timed ({f['ops']} op(s)); no speedup is claimed"
    return (f"offline result over {f['placed']} of {f['ops']} ops (an op without a correct kernel keeps its reference): "
            f"geomean {f['geomean_vs_eager']:.2f}x vs eager, {f['geomean_vs_compile']:.2f}x vs torch.compile; "
            f"fast_1 {f['fast_1_vs_eager']:.0%} vs eager, {f['fast_1_vs_compile']:.0%} vs torch.compile"
            + (f"; not timed: {', '.join(f['untimed'])}" if f["untimed"] else ""))


def _stop(proc: subprocess.Popen) -> str:
    """SIGTERM to the sweep's process group (okgit treats it as Ctrl-C), SIGKILL after 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
    except ProcessLookupError:
        stdout, _ = proc.communicate()
    for _ in range(100):  # the group's other processes (problems, workers) end too before we read the state
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return stdout or ""


def _partial(kb: Path, out: Path, passthrough: list[str], parallel: int, wall: float,
             limit: float) -> tuple[dict, str]:
    """The report of the problems whose state file the sweep wrote before the time limit."""
    from okgit.kernelbench.scoring import ProblemResult, SweepReport, summarize

    finished = []
    for path in sorted((out / "state").glob("*.json")):
        try:
            finished.append(ProblemResult.model_validate_json(path.read_text()))
        except ValueError:
            continue
    finished.sort(key=lambda r: (r.level, r.id))
    gpu = any(r.device.startswith("cuda") for r in finished)
    report = SweepReport(
        dir=str(kb.resolve()), out=str(out), device="cuda" if gpu else "cpu",
        devices=sorted({r.device for r in finished}), parallel=parallel,
        flags={"args": " ".join(passthrough)}, wall_s=round(wall, 1), problems=finished,
        summary=summarize(finished),
        notes=[(f"partial: stopped after {limit:.0f} s (time limit or SIGTERM) with {len(finished)} problem(s) "
                "finished; the problem(s) in flight are left out, not scored")],
    )
    data = report.model_dump(mode="json")
    data["partial"] = True
    return data, report.markdown()


if __name__ == "__main__":
    sys.exit(main())
