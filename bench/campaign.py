"""Campaigns as a new user tries them: a freshly written model and a directory of four ops.

Stages, each in a fresh repository under --out, each recorded in --out/campaign.json as it
ends (a rerun with the same --out skips the stages already there):

  profile   okgit profile model.py: the transformer block's modules by share of time
  ops       okgit optimize ops/: four example ops as one campaign; its patch applied to a clean clone
  model     okgit optimize model.py --campaign: the top modules, then the whole model; the patch
            applied to a clean clone
  level3    okgit bench kernelbench over two KernelBench level-3 models (--kb), through the campaign path

    python bench/campaign.py [--out DIR] [--stages profile ops model level3] [--kb KernelBench]
                             [--iterations N] [--resume FILE] [--time-limit S]
    python bench/campaign.py --smoke   # CPU: a tiny model and two tiny ops, every time "-"

The state goes to $OUT/campaign.json (else DIR/campaign.json) after every stage; --resume FILE
(a carried copy of an earlier call's campaign.json) skips the stages it holds. Prints a short
table of every finished stage at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OPS = ["01_relu_bias_scale.py", "04_softmax.py", "06_layer_norm.py", "14_linear_gelu.py"]
SMOKE_OPS = [ROOT / "tests" / "ops" / "relu.py", ROOT / "tests" / "ops" / "softmax.py"]
LEVEL3 = "2,4"  # ShallowWideMLP (Linear/ReLU), LeNet5 (Conv2d/Linear)

MODEL = '''"""A pre-norm transformer block, freshly written: attention and an MLP."""
import torch
import torch.nn as nn

batch_size = {batch}
seq = {seq}
dim = {dim}
heads = {heads}


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


def get_inputs():
    return [torch.randn(batch_size, seq, dim)]


def get_init_inputs():
    return [dim, heads]
'''


TIME_LIMIT_S = [3600.0]  # one okgit command's; --time-limit sets it


def okgit(*args: str, cwd: Path) -> dict[str, Any]:
    try:
        proc = subprocess.run([sys.executable, "-m", "okgit", *args, "--json"], cwd=cwd, capture_output=True, text=True,
                              timeout=TIME_LIMIT_S[0], env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(ROOT), os.environ.get("PYTHONPATH", "")])})
    except subprocess.TimeoutExpired:
        return {"error": f"okgit {args[0]} ran past {TIME_LIMIT_S[0]:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout)


def fresh_repo(path: Path, files: dict[str, str]) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True)
    subprocess.run(["git", *ident, "add", "."], cwd=path, check=True)
    subprocess.run(["git", *ident, "commit", "-q", "-m", "fresh"], cwd=path, check=True)
    return path


def applies_to_clean_clone(repo: Path, diff: str) -> str:
    if not diff or not Path(diff).is_file() or not Path(diff).read_text().strip():
        return "no patch"
    clone = repo.parent / (repo.name + "-clone")
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    proc = subprocess.run(["git", "apply", "--check", diff], cwd=clone, capture_output=True, text=True)
    return "applies" if proc.returncode == 0 else f"does not apply: {proc.stderr.strip()[:200]}"


def model_source(smoke: bool) -> str:
    sizes = dict(batch=2, seq=8, dim=32, heads=2) if smoke else dict(batch=8, seq=512, dim=1024, heads=16)
    return MODEL.format(**sizes)


def stage_profile(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    repo = fresh_repo(work / "profile", {"model.py": model_source(args.smoke)})
    return okgit("profile", "model.py", *(["--device", "cpu"] if args.smoke else []), cwd=repo)


def stage_ops(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    sources = {f"ops/{p.name}": p.read_text() for p in SMOKE_OPS} if args.smoke else \
        {f"ops/{name}": (ROOT / "examples" / name).read_text() for name in OPS}
    repo = fresh_repo(work / "ops", sources)
    result = okgit("optimize", "ops/", "--iterations", str(args.iterations), *(["--device", "cpu"] if args.smoke else []),
                   cwd=repo)
    if "error" not in result:
        result["clean_clone"] = applies_to_clean_clone(repo, result["diff"])
    return result


def stage_model(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    repo = fresh_repo(work / "model", {"model.py": model_source(args.smoke)})
    result = okgit("optimize", "model.py", "--campaign", "--top", "4", "--iterations", str(args.iterations),
                   *(["--device", "cpu"] if args.smoke else []), cwd=repo)
    if "error" not in result:
        result["clean_clone"] = applies_to_clean_clone(repo, result["diff"])
    return result


def stage_level3(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    if not args.kb:
        return {"error": "needs --kb (a KernelBench checkout)"}
    cwd = work / "level3-cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    return okgit("bench", "kernelbench", str(Path(args.kb).resolve()), "--level", "3", "--problems", LEVEL3,
                 "--iterations", str(args.iterations), "--out", str(work / "level3"), cwd=cwd)


STAGES = {"profile": stage_profile, "ops": stage_ops, "model": stage_model, "level3": stage_level3}


def us(x: Any) -> str:
    return f"{x:.1f}" if isinstance(x, (int, float)) else "-"


def speed(x: Any) -> str:
    return f"{x:.2f}x" if isinstance(x, (int, float)) else "-"


def pct(x: Any) -> str:
    return f"{x:.0%}" if isinstance(x, (int, float)) else "-"


def summary(done: dict[str, Any]) -> str:
    out: list[str] = []
    p = done.get("profile")
    if p:
        out.append(f"## profile: {p['error']}" if "error" in p else
                   f"## profile: {us(p['total_us'])} us per call on {p['device']} ({p['note']})")
        out += ["| # | where | type | share | us | roofline | extractable |", "|---|---|---|---|---|---|---|"]
        out += [f"| {i} | {r['name']} | {(r['type'] or '-').rsplit('.', 1)[-1]} | {r['share']:.1%} | {us(r['time_us'])} | "
                f"{pct(r['roofline_position'])} | "
                f"{'yes' if r['extractable'] else (r['refused'] or '-')[:40]} |"
                for i, r in enumerate(p.get("rows", [])[:8], 1)]
    for name in ("ops", "model"):
        c = done.get(name)
        if not c:
            continue
        if "error" in c:
            out.append(f"## {name} campaign: {c['error']}")
            continue
        out.append(f"## {name} campaign {c['campaign_id']}: {c['status']} on {c['device']}, ordered by {c['ordered_by']}; "
                   f"patch on a clean clone: {c.get('clean_clone')}")
        out += ["| problem | ref us | floor us | headroom | share | iterations | status | speedup |", "|---|---|---|---|---|---|---|---|"]
        out += [f"| {r.get('module') or r['op']} | {us(r['reference_us'])} | {us(r['floor_us'])} | "
                f"{pct(r['headroom'])} | {pct(r['time_share'])} | "
                f"{r['iterations']} | {r['status']} | {speed(r['speedup'])} |" for r in c["problems"]]
        e = c.get("end_to_end")
        if e:
            out.append(f"whole model: {e['status']}: {us(e['baseline_us'])} us -> {us(e['optimized_us'])} us, "
                       f"{speed(e['speedup'])}, noise {us((e['noise'] or 0) * 100)}%; swapped {', '.join(e['swapped']) or '-'}; "
                       f"{e['reason']}")
    s = done.get("level3")
    if s:
        if "error" in s:
            out.append(f"## level 3: {s['error']}")
        else:
            out += ["## level 3 (campaign path)", "| problem | status | eager us | compile us | okgit us | vs eager | vs compile |",
                    "|---|---|---|---|---|---|---|"]
            out += [f"| {r['key']} | {r['status']} | {us(r['eager_us'])} | {us(r['compile_us'])} | {us(r['okgit_us'])} | "
                    f"{speed(r['speedup_eager'])} | {speed(r['speedup_compile'])} |" for r in s["problems"]]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/okgit-campaign", help="work directory (default: /tmp/okgit-campaign)")
    parser.add_argument("--resume", help="an earlier call's campaign.json: its finished stages are skipped")
    parser.add_argument("--time-limit", type=float, default=3600.0, help="seconds per okgit command (default: 3600)")
    parser.add_argument("--stages", nargs="+", choices=list(STAGES), default=["profile", "ops", "model"])
    parser.add_argument("--kb", help="a KernelBench checkout, for the level3 stage")
    parser.add_argument("--iterations", type=int, default=4, help="per problem on average (default: 4)")
    parser.add_argument("--smoke", action="store_true", help="CPU: a tiny model and two tiny ops")
    args = parser.parse_args()
    if args.smoke:
        args.iterations = 1
    TIME_LIMIT_S[0] = args.time_limit
    work = Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    state = Path(os.environ["OUT"]) / "campaign.json" if os.environ.get("OUT") else work / "campaign.json"
    earlier = Path(args.resume) if args.resume else state
    done: dict[str, Any] = json.loads(earlier.read_text()) if earlier.is_file() else {}
    for name in args.stages:
        if name in done and "error" not in done[name]:
            print(f"{name}: done in an earlier call", file=sys.stderr)
            continue
        started = time.monotonic()
        print(f"{name}: running", file=sys.stderr, flush=True)
        done[name] = STAGES[name](work, args)
        done[name]["stage_wall_s"] = round(time.monotonic() - started, 1)
        state.write_text(json.dumps(done, indent=1))
    print(summary(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
