"""The profiling pass on development problems (issue 32), with okgit's own evaluator.

    python3 bench/profile_pass.py [KB] [--problems "1:21,27,24,48,42,45;2:63,59,71,87"] [--tools all] [--time-limit S]
                             [--resume FILE] [--smoke]
    python3 bench/profile_pass.py [KB] --autotune [--problems "1:21,24;2:63"] [--iterations N] [--time-limit S]
                             [--resume FILE]
    python3 bench/profile_pass.py [KB] --cost [--problems "2:63"]

KB holds `level1/`, `level2/` (or `KernelBench/level1/`, ...; default `.kb`). Three measurements,
each one call of at most about five minutes:

- default: per problem (elementwise, reduction, GEMM + epilogue, convolution + epilogue, pooling),
  the reference prepared and the first template candidate (okgit.search.proposers.templates.plan)
  evaluated by okgit's LocalEvaluator, then the profiling pass (LocalEvaluator.profile) on both,
  (the reference's with ncu where it runs, else Proton; the candidate's with both). Prints,
  per problem and arm, the tools that ran, what each did not say and why, the seconds the pass
  took, and the figures: DRAM bandwidth and its share of peak, SM throughput, occupancy achieved /
  theoretical with the limiter, L2 hits, the top stalls. The first two problems' candidates are
  evaluated again after their pass: the verdict must be the same. Then one critic prompt (the
  critic's own code, okgit.search.critic.diagnose, answered by a scripted reply) showing the
  counters of the first candidate that has them, written to critic_prompt.txt.
- `--autotune` (the same ten problems; resumable): per problem, the template candidate then the
  autotune phase for --iterations candidates, twice: with the profiling pass and the
  profile-driven focus (today's code: the settings the bottleneck names first, then the others),
  and with neither (the autotune phase before issue 32: the same variants, nearest first, no
  setting ahead of another). Prints the best speedup of each and the candidates each took to
  reach its best (within 1%), then issue 32's measure over every problem run so far.
- `--cost`: one `okgit optimize` run (offline, default iterations, --profiler auto) of the first
  problem in a fresh repository: its wall time, each pass's seconds and their share of the run.

--time-limit S (default 270) starts no problem after S seconds and prints the `--problems` left.
Writes profile.json (after every problem; `--resume FILE` skips the problems it holds),
critic_prompt.txt, and raw/ (what ncu and Proton wrote, numbered in pass order: the pass keeps them
where OKGIT_PROFILE_RAW points) to $OUT (default /tmp/out). --smoke runs the default measurement
on the CPU under Triton's interpreter (two problems, scaled down as a CPU run scales them): every
profile is then empty and says why.
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
import traceback
from pathlib import Path
from typing import Any

from coverage_gpu import problem_paths

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # the workers' okgit

DEFAULT_PROBLEMS = "1:21,27,24,48,42,45;2:63,59,71,87"  # elementwise x2, reduction x2, pooling x2; GEMM x2, conv x2
SMOKE_PROBLEMS = "1:21;2:63"
CLASSES = {"1:21": "elementwise", "1:27": "elementwise", "1:24": "reduction", "1:48": "reduction",
           "1:42": "pooling", "1:45": "pooling", "2:63": "GEMM + epilogue", "2:59": "GEMM + epilogue",
           "2:71": "conv + epilogue", "2:87": "conv + epilogue"}
FIGURES = ("bandwidth", "compute", "occupancy", "limiter", "l2", "stalls")  # what issue 32 asks of each profile


def figures(prof: Any) -> dict[str, Any]:
    """The figures of one profile, each with its tool, and which of issue 32's are there."""
    if prof is None:
        return {"filled": []}
    s = prof.sources
    out = {
        "bottleneck": prof.bottleneck_type, "bottleneck_from": s.get("bottleneck_type"), "why": prof.bottleneck_why,
        "bandwidth_Bps": prof.bandwidth, "bandwidth_utilization": prof.bandwidth_utilization,
        "compute_utilization": prof.compute_utilization, "occupancy": prof.occupancy,
        "occupancy_theoretical": prof.occupancy_theoretical, "limiter": prof.occupancy_limiter,
        "l2_hit_rate": prof.cache_hit_rate, "stalls": [(x.reason, round(x.share, 3), x.line) for x in prof.stalls[:3]],
        "sources": s, "tools": prof.tools, "not_run": prof.not_run, "profile_s": prof.profile_s,
        "kernels": [{"name": k.name[:80], "us": round(k.time_us, 2), "custom": k.custom, "limiter": k.occupancy_limiter,
                     "occupancy": [k.occupancy, k.occupancy_theoretical], "stalls": [(x.reason, round(x.share, 3), x.line)
                                                                                for x in k.stalls[:3]]}
                    for k in prof.top_kernels[:4]],
    }
    measured = {"bandwidth": prof.bandwidth is not None and s.get("bandwidth") == "ncu",
                "compute": s.get("compute_utilization") == "ncu", "occupancy": prof.occupancy is not None,
                "limiter": prof.occupancy_limiter is not None, "l2": prof.cache_hit_rate is not None,
                "stalls": bool(prof.stalls)}
    out["filled"] = [f for f in FIGURES if measured[f]]
    return out


def verdict(r: Any) -> tuple:
    return (r.status.value, r.error.gate if r.error else None, [(g.name, g.passed) for g in r.gates])


def one_problem(key: str, path: Path, device: str, tools: str | None, recheck: bool) -> tuple[dict[str, Any], Any]:
    """The reference and the first template candidate, evaluated and profiled."""
    from okgit.eval.parent.local import LocalEvaluator
    from okgit.problem import load_problem
    from okgit.search.proposers.templates import plan
    from okgit.search.types import Attempt, Context

    problem = load_problem(path, root=str(path.parent))
    row: dict[str, Any] = {"problem": key, "file": path.name, "class": CLASSES.get(key, "")}
    with LocalEvaluator(device=device) as ev:
        t0 = time.monotonic()
        ref = ev.reference(problem)
        row["reference_s"], row["ref_us"] = round(time.monotonic() - t0, 2), ref.runtime_us
        t0 = time.monotonic()
        ref_prof = ev.profile(problem, problem.source, base=ref.profile, runtime_us=ref.runtime_us,
                              tools=tools or "auto", baseline=True)
        row["reference"] = {"pass_s": round(time.monotonic() - t0, 2), **figures(ref_prof)}
        ctx = Context(problem=problem, reference=ref.model_copy(update={"profile": ref_prof}), backend="triton",
                      device=ev.device, hardware=ref.hardware)
        proposals = plan(ctx)
        if not proposals:
            row["candidate"] = {"missing": "no template candidate for this problem"}
            return row, None
        cand = proposals[0]
        first = ev.evaluate(problem, cand.source)
        row["candidate"] = {"origin": cand.origin, "status": first.status.value, "speedup": first.speedup,
                            "us": first.runtime_us, "error": first.error.message[:200] if first.error else None}
        if not first.correct:
            return row, None
        t0 = time.monotonic()
        prof = ev.profile(problem, cand.source, base=first.profile, runtime_us=first.runtime_us, tools=tools or "all")
        row["candidate"].update(pass_s=round(time.monotonic() - t0, 2), **figures(prof))
        if recheck:
            again = ev.evaluate(problem, cand.source)
            row["candidate"]["same_verdict_after_the_pass"] = verdict(again) == verdict(first)
        first.profile = prof
        return row, (ctx, Attempt(cand="c001", proposal=cand, result=first))


def critic_prompt(found: tuple[Any, Any]) -> str:
    """The critic's prompt for one candidate, through the critic's own code, a scripted reply answering."""
    from okgit.llm import Completion
    from okgit.search.critic import describe_hardware, diagnose

    ctx, attempt = found
    shown: list[str] = []

    def ask(role, messages, cand, parse):
        shown.append("\n\n".join(f"=== {m['role']} ===\n{m['content']}" for m in messages))
        reply = '{"bottleneck_type": "memory", "specific_issue": "scripted", "recommendation": "scripted", "confidence": 0.5}'
        return Completion(text=reply, model="scripted"), parse(reply)

    diagnose(ask, ctx, attempt, describe_hardware(ctx))
    return shown[0]


def table(rows: list[dict[str, Any]]) -> None:
    print(f"{'problem':<7} {'class':<16} {'arm':<9} {'tools':<11} {'pass s':>6} {'bound':<8} {'DRAM':>14} {'SM':>5} "
          f"{'occ a/t':>9} {'limiter':<13} {'L2':>5}  top stall / not run")
    for row in rows:
        for arm in ("reference", "candidate"):
            a = row.get(arm) or {}
            if "missing" in a or "filled" not in a:
                print(f"{row['problem']:<7} {row['class']:<16} {arm:<9} {a.get('missing') or a.get('status') or '-'}")
                continue
            bw = (f"{a['bandwidth_Bps'] / 1e12:.2f}TB/s {pct(a['bandwidth_utilization'])}" if a["bandwidth_Bps"] else "-")
            stall = f"{a['stalls'][0][0]} {a['stalls'][0][1]:.0%}" if a["stalls"] else "; ".join(
                f"{t}: {w[:40]}" for t, w in a["not_run"].items()) or "-"
            print(f"{row['problem']:<7} {row['class']:<16} {arm:<9} {'+'.join(a['tools']) or '-':<11} "
                  f"{a['pass_s']:>6.1f} {a['bottleneck']:<8} {bw:>14} {pct(a['compute_utilization']):>5} "
                  f"{pct(a['occupancy']) + '/' + pct(a['occupancy_theoretical']):>9} {a['limiter'] or '-':<13} "
                  f"{pct(a['l2_hit_rate']):>5}  {stall}")


    arms = [row.get(arm) or {} for row in rows for arm in ("reference", "candidate")]
    full = [a for a in arms if set(a.get("filled", [])) == set(FIGURES)]
    print(f"{len(full)} of {len(arms)} profiles carry all of {', '.join(FIGURES)}; tools that ran: "
          f"{sorted({t for a in arms for t in a.get('tools', [])}) or 'none'}; pass seconds: "
          f"{', '.join(str(a['pass_s']) for a in arms if 'pass_s' in a) or '-'}")


def pct(v: Any) -> str:
    return "-" if v is None else f"{v:.0%}"


def profiles(args: argparse.Namespace, out: Path, problems: list[tuple[str, Path]], state: dict[str, Any]) -> list[str]:
    os.environ["OKGIT_PROFILE_RAW"] = str(out / "raw")
    rows, left, found = state.setdefault("rows", []), [], None
    start = time.monotonic()
    for i, (key, path) in enumerate(problems):
        if any(r["problem"] == key for r in rows):
            continue
        if time.monotonic() - start > args.time_limit:
            left.append(key)
            continue
        print(f"{key} {path.name}", flush=True)
        try:
            row, attempt = one_problem(key, path, args.device, args.tools, recheck=i < 2)
        except Exception as e:  # noqa: BLE001 (one problem's failure is a row, the sweep goes on)
            row, attempt = {"problem": key, "file": path.name, "class": CLASSES.get(key, ""),
                            "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}, None
            print(f"  failed: {row['error']}", flush=True)
        rows.append(row)
        if found is None and attempt is not None and (attempt[1].result.profile.tools or args.smoke):
            found = attempt
            (out / "critic_prompt.txt").write_text(critic_prompt(found))
        (out / "profile.json").write_text(json.dumps(state, indent=1, default=str))
    table(rows)
    return left


def autotune(args: argparse.Namespace, out: Path, problems: list[tuple[str, Path]], state: dict[str, Any]) -> list[str]:
    """The template candidate, then autotune, with the profile-driven focus (and the pass) and without."""
    from okgit.eval.parent.local import LocalEvaluator
    from okgit.problem import load_problem
    from okgit.search.driver import Budget, Search
    from okgit.search.proposers import autotune as tune
    from okgit.search.proposers.templates import plan
    from okgit.search.types import Context

    rows, left, start = state.setdefault("autotune", []), [], time.monotonic()
    for key, path in problems:
        if any(r["problem"] == key for r in rows):
            continue
        if time.monotonic() - start > args.time_limit:
            left.append(key)
            continue
        problem, row = load_problem(path, root=str(path.parent)), {"problem": key, "class": CLASSES.get(key, "")}
        with LocalEvaluator(device=args.device) as ev:
            ref = ev.reference(problem)
            for arm, profiler in (("profile-driven", args.tools), ("before", "off")):
                notes: list[dict[str, Any]] = []  # the search's journal: the focus, the screen's drops, why it stopped
                ctx = Context(problem=problem, reference=ref, backend="triton", device=ev.device, hardware=ref.hardware,
                              log=lambda type, **fields: notes.append({"type": type, **fields}))
                template = plan(ctx)[:1]
                focus = tune.Focus.of
                if profiler == "off":  # the autotune phase as it was: no focus, every setting in the plain order
                    tune.Focus.of = classmethod(lambda cls, p: None)  # type: ignore[method-assign,assignment]
                try:
                    t0 = time.monotonic()
                    Search(ctx, ev, Budget(iterations=args.iterations, patience=args.iterations), accept=lambda a: None,
                           profiler=profiler).run([_Fixed(template), tune.AutotuneProposer()])
                finally:
                    tune.Focus.of = focus  # type: ignore[method-assign]
                speeds = [a.result.speedup if a.result.correct and a.result.timed else None for a in ctx.attempts]
                best = max((s for s in speeds if s), default=None)
                reach = next((i + 1 for i, s in enumerate(speeds) if best and s and s >= 0.99 * best), None)
                row[arm] = {"best": best, "candidates_to_best": reach, "speedups": speeds, "wall_s": round(time.monotonic() - t0, 1),
                            "candidates": [{"intent": a.proposal.intent, "speedup": a.result.speedup,
                                            "roofline": a.result.profile.roofline_position if a.result.profile else None,
                                            "bottleneck": a.result.profile.bottleneck_type if a.result.profile else None}
                                           for a in ctx.attempts],
                            "journal": [n for n in notes if n["type"] in ("note", "screened", "dropped", "search_stopped")]}
        rows.append(row)
        (out / "profile.json").write_text(json.dumps(state, indent=1, default=str))
        print(f"{key:<6} {row['class']:<16} " + "  ".join(
            f"{arm}: best {row[arm]['best'] or 0:.3f}x in {row[arm]['candidates_to_best']} of {len(row[arm]['speedups'])}"
            for arm in ("profile-driven", "before")), flush=True)
    print(autotune_verdict(rows), flush=True)
    return left


def autotune_verdict(rows: list[dict[str, Any]]) -> str:
    """Issue 32's measure over every problem both arms ran: the profile-driven arm's best the same
    (within 1%) or better in no more candidates, and in at most half of the unfocused arm's."""
    both = [r for r in rows if (r["profile-driven"]["best"] or 0) and (r["before"]["best"] or 0)]
    held = [r for r in both if r["profile-driven"]["best"] >= 0.99 * r["before"]["best"]
            and r["profile-driven"]["candidates_to_best"] <= r["before"]["candidates_to_best"]]
    half = [r for r in held if r["profile-driven"]["candidates_to_best"] <= r["before"]["candidates_to_best"] / 2]
    missed = [r["problem"] for r in both if r not in held]
    return (f"autotune over {len(both)} problems: profile-driven as good in no more candidates on {len(held)}, in at most "
            f"half the candidates on {len(half)}" + (f"; not on {', '.join(missed)}" if missed else ""))


class _Fixed:
    name = "templates"

    def __init__(self, proposals: list[Any]) -> None:
        self.proposals = list(proposals)

    def propose(self, ctx: Any) -> Any:
        return self.proposals.pop(0) if self.proposals else None


def cost(args: argparse.Namespace, out: Path, problems: list[tuple[str, Path]], state: dict[str, Any]) -> list[str]:
    """One offline run at default iterations with the pass on: its wall and the pass's share."""
    key, path = problems[0]
    repo = Path(tempfile.mkdtemp(prefix="okgit-cost-"))
    shutil.copy(path, repo / path.name)
    for cmd in (["init", "-q"], ["add", "."], ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "op"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "okgit", "optimize", path.name, "--profiler", args.tools,
                           "--device", args.device, "--json"], cwd=repo, capture_output=True, text=True)
    wall = time.monotonic() - t0
    result = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else {"stderr": proc.stderr[-2000:]}
    journal = [json.loads(line) for line in (Path(result["report"]).parent / "journal.jsonl").read_text().splitlines()] \
        if "report" in result else []
    passes = [(e["cand"], e["seconds"], e["tools"]) for e in journal if e["type"] == "profiled"]
    spent = sum(s for _, s, _ in passes)
    state["cost"] = {"problem": key, "wall_s": round(wall, 1), "status": result.get("status"), "passes": passes,
                     "profile_s": round(spent, 1), "share_of_wall": round(spent / wall, 3) if wall else None,
                     "added_to_the_run": round(spent / max(wall - spent, 1e-9), 3),
                     "candidates": result.get("candidates"), "notes": [e["message"] for e in journal
                                                                        if e["type"] == "note" and "profil" in e["message"]]}
    (out / "profile.json").write_text(json.dumps(state, indent=1, default=str))
    c = state["cost"]
    print(f"{key}: {c['status']} in {c['wall_s']} s; {len(passes)} passes, {c['profile_s']} s "
          f"({c['share_of_wall']:.1%} of the wall, +{c['added_to_the_run']:.1%} on the run without them)")
    for cand, seconds, tools in passes:
        print(f"  {cand or 'baseline'}: {seconds:.1f} s ({', '.join(tools) or 'no counters'})")
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", nargs="?", default=".kb")
    parser.add_argument("--problems")
    parser.add_argument("--tools", choices=["auto", "ncu", "proton", "all", "off"],
                        help="the pass's tools (default: the reference auto, the candidate all (Proton reads its Triton "
                             "kernels' source lines); --autotune and --cost: auto, as a run uses)")
    parser.add_argument("--time-limit", type=float, default=270.0, metavar="S")
    parser.add_argument("--resume", metavar="FILE", help="an earlier call's profile.json")
    parser.add_argument("--autotune", action="store_true")
    parser.add_argument("--iterations", type=int, default=8, help="--autotune: candidates per arm")
    parser.add_argument("--cost", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="the CPU, Triton's interpreter, two problems")
    args = parser.parse_args()
    args.device = "cpu" if args.smoke else "cuda"
    args.tools = args.tools or ("auto" if args.autotune or args.cost else None)
    kb = Path(args.kb)
    if args.smoke and not kb.exists():
        kb = Path("/work/shared/kernelbench")
    problems = problem_paths(kb, args.problems or (SMOKE_PROBLEMS if args.smoke else
                                                   "2:63" if args.cost else DEFAULT_PROBLEMS))
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    state = json.loads(Path(args.resume).read_text()) if args.resume else {}
    run = cost if args.cost else autotune if args.autotune else profiles
    left = run(args, out, problems, state)
    if left:
        print(f"time limit: next call --problems \"{';'.join(left)}\" --resume profile.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
