"""A whole model: `okgit profile` ranks its modules, `okgit optimize MODEL.py --campaign` extracts
the top ones, optimizes them and swaps the winners back in. Real repositories, the CLI in this
process (`cli`; the sweep as a subprocess), the model in its own process, Triton kernels under
the interpreter (CPU)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import okgit, sh, snapshot

pytestmark = pytest.mark.slow  # profiles, campaigns and a sweep with real evaluation

MODEL = '''"""Two small blocks: Linear, GELU, LayerNorm, then a scale of the model's own and a softmax."""
import torch
import torch.nn as nn

batch_size = 4
seq = 8
dim = 32
hidden = 64


class Scale(nn.Module):
    """A leaf of the model's own class: okgit cannot rebuild it from torch.nn, and says so."""

    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * self.gain


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x):
        return self.norm(x + self.fc2(self.act(self.fc1(x))))


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, hidden) for _ in range(2)])
        self.scale = Scale(dim)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return torch.softmax(self.scale(x), dim=-1)


def get_inputs():
    return [torch.randn(batch_size, seq, dim)]


def get_init_inputs():
    return [dim, hidden]
'''


def _commit(root: Path, rel: str, text: str) -> None:
    (root / rel).write_text(text)
    sh(root, "add", rel)
    sh(root, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", f"add {rel}")


def test_profile_ranks_the_leaf_modules_and_call_sites(cli, git_repo: Path) -> None:
    _commit(git_repo, "model.py", MODEL)
    proc = cli("profile", "model.py", "--device", "cpu", "--json", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["device"] == "cpu" and not report["timed"] and "CPU" in report["note"]
    rows = report["rows"]
    modules = {r["name"]: r for r in rows if r["kind"] == "module"}
    assert set(modules) == {f"blocks.{i}.{m}" for i in (0, 1) for m in ("fc1", "act", "fc2", "norm")} | {"scale"}
    assert [r["time_us"] for r in rows] == sorted((r["time_us"] for r in rows), reverse=True)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    sites = [r["name"] for r in rows if r["kind"] == "call site"]
    assert any(s.startswith("model.py:") and "softmax" in s for s in sites), sites
    assert modules["blocks.0.fc1"]["extractable"] and modules["blocks.0.fc1"]["flops"] == 2 * 4 * 8 * 32 * 64
    assert modules["blocks.0.fc1"]["type"] == "torch.nn.modules.linear.Linear"
    assert not modules["scale"]["extractable"] and "model's own class" in modules["scale"]["refused"]
    assert report["repeats"] == 10 and all(len(r["samples_us"]) == 10 and r["spread"] is not None for r in rows)
    assert 0 <= report["settled"] <= len(rows)
    # the text (`--top 3`): profile_text, on the patched model's profile in the campaign's test


def test_a_model_campaign_swaps_the_winners_into_the_model_file(cli, git_repo: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _commit(git_repo, "model.py", MODEL)
    before = snapshot(git_repo)
    proc = cli("optimize", "model.py", "--campaign", "--top", "4", "--iterations", "1", "--device", "cpu", "--json",
               cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert snapshot(git_repo) == before  # the extracted op files live in the campaign's own repository
    # the whole model as one op; fc1 and its GELU as one chain, fc2, norm: each once for both blocks
    assert result["kind"] == "model" and len(result["problems"]) == 4
    assert [p["time_share"] for p in result["problems"] if p["module"] == "(the whole model)"] == [1.0]
    assert any(p["module"] == "blocks.0.fc1+blocks.0.act, blocks.1.fc1+blocks.1.act" for p in result["problems"])
    assert all(p["module"] and p["time_share"] for p in result["problems"])
    assert all(p["run_id"] for p in result["problems"])  # each a normal run in the ops repository
    ops_repo = Path(result["ops_repo"])
    history = json.loads(cli("history", "--json", cwd=ops_repo).stdout)
    assert {r["run_id"] for r in history} == {p["run_id"] for p in result["problems"]}
    end = result["end_to_end"]
    assert end and end["status"] == result["status"] == "unverified" and end["ok"] and not end["timed"]
    assert end["state"] == "unchanged" and end["patched_us"] is None and "timing is not claimed" in end["untimed"]
    assert any("norm" in s for s in end["swapped"]), end  # the rows template fuses a LayerNorm
    # the chain's kernel (GELU fused after the Linear) is in; a chain counts each of its modules
    assert "blocks.0.fc1+blocks.0.act, blocks.1.fc1+blocks.1.act" in end["swapped"], end
    assert end["modules_swapped"] == sum(len(site.split("+")) for label in end["swapped"] for site in label.split(", "))
    # untimed, the modules' patch is kept over the whole model's (both correct): the smaller change
    assert end["dropped"] == {"(the whole model)": "nothing timed: the modules' patch is kept, the smaller change"}
    journal = (git_repo / ".okgit" / "campaigns" / result["campaign_id"] / "journal.jsonl").read_text()
    assert "not extracted: scale:" in journal

    # The patch applies to a clean checkout, and the model there runs the winners' kernels.
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(git_repo), str(clone)], check=True)
    applied = subprocess.run(["git", "apply", result["diff"]], cwd=clone, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    assert "_okgit_swap_in(Model)" in (clone / "model.py").read_text()  # the modules' package, swapped in
    check = '''
import torch, model
torch.manual_seed(1)
fast = model.Model(32, 64)
norm = fast.blocks[0].norm
assert "forward" in norm.__dict__, norm  # the kernel's forward, on the model's own module
x = torch.randn(4, 8, 32)
with torch.no_grad():
    got = fast(x)
    for block in fast.blocks:
        for m in block.children():
            m.__dict__.pop("forward", None)  # back to torch.nn's forward
    want = fast(x)
print(json.dumps({"err": float((got - want).abs().max()), "keys": list(fast.state_dict())}))
'''
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    ran = subprocess.run([sys.executable, "-c", "import json\n" + check], cwd=clone, capture_output=True, text=True,
                         env=env, timeout=300)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert out["err"] < 1e-4
    assert "blocks.0.norm.weight" in out["keys"] and not any("layer" in k for k in out["keys"])

    # `okgit profile` runs the patched model on a CPU too: its kernels under Triton's interpreter,
    # which the user need not ask for
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    profiled = cli("profile", "model.py", "--device", "cpu", "--top", "3", cwd=clone)
    assert profiled.returncode == 0, profiled.stderr
    profile_text(profiled.stdout)

    # okgit's own commands take the campaign like a run.
    assert cli("apply", "campaign:latest", "--check", cwd=git_repo).returncode == 0
    listed = json.loads(cli("history", "campaign:latest", "--json", cwd=git_repo).stdout)
    assert listed["kind"] == "model" and listed["status"] == "unverified"


def profile_text(text: str) -> None:
    """`okgit profile --top 3`'s text, of the model or the patched model (one profile: the same rows)."""
    assert "Profiled on the CPU" in text and "more rows" in text and "median of 10 repeats" in text
    # what SHARE is a part of, said beside the call's total (this run's own figures)
    assert re.search(r"us per call \(median of 10 repeats, spread \d+%\); the rows below [\d.]+ us of it together, "
                     r"each row's SHARE a part of those", text), text
    assert "ranked past" in text


# a process of its own, as the sweep runs each problem in one
PLAIN_MODEL = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, n))

    def forward(self, x):
        return torch.relu(x * self.scale) + 1.0


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return [64]
"""


def test_a_level3_sweep_goes_through_the_model_campaign(tmp_path: Path) -> None:
    """The sweep's side of a level-3 problem (the campaign as a process, its patch applied in the
    problem's repository as the winner, the report's row) is the same whatever the campaign
    swapped in; a campaign that swaps modules in is the test above's. So one problem: the one
    with no module to extract, which no other test runs."""
    level3 = tmp_path / "KernelBench" / "level3"
    level3.mkdir(parents=True)
    (level3 / "2_PlainTensorCode.py").write_text(PLAIN_MODEL)
    out = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "okgit", "bench", "kernelbench", str(tmp_path / "KernelBench"), "--level",
                           "3", "--device", "cpu", "--iterations", "1", "--out", str(out), "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    (plain,) = report["problems"]
    # no leaf module to extract: the campaign's one problem is the whole model, its forward one op
    assert plain["key"] == "level3/2_PlainTensorCode" and plain["status"] == "unverified" and plain["correct"]
    assert plain["best_tag"] == f"campaign:{plain['run_id']}" and plain["modules_swapped"] == 0 and not plain["timed"]
    assert "| level3/2_PlainTensorCode | unverified | - | - | - | untimed | untimed | -/-/- | 0 |" in (
        out / "report.md").read_text()
    whole = json.loads((out / "logs" / "level3_2_PlainTensorCode.campaign.json").read_text())
    assert whole["kind"] == "model" and [r["module"] for r in whole["problems"]] == ["(the whole model)"]
    assert whole["end_to_end"]["swapped"] == ["(the whole model)"]
    # the winner file the sweep keeps is the patched model, applied in the problem's repository:
    # the whole model's kernel in the model file itself
    winner = (out / "winners" / "level3_2_PlainTensorCode.py").read_text()
    assert "@triton.jit" in winner and "def get_inputs():" in winner


@pytest.mark.gpu
def test_on_a_gpu_the_profile_is_device_time_with_kernels_and_roofline(git_repo: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _commit(git_repo, "model.py", MODEL.replace("batch_size = 4", "batch_size = 256"))
    proc = okgit("profile", "model.py", "--json", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["device"] == "cuda" and report["timed"] and report["total_us"] > 0
    modules = {r["name"]: r for r in report["rows"] if r["kind"] == "module"}
    fc1 = modules["blocks.0.fc1"]
    assert fc1["time_us"] > 0 and fc1["kernels"], fc1  # cuBLAS's kernel, attributed to the module
    assert fc1["floor_us"] and 0 < fc1["roofline_position"] <= 1
    assert sum(r["share"] for r in report["rows"]) == pytest.approx(1.0)


def test_matched_winners_are_tried_in_the_whole_model_and_slower_ones_are_not() -> None:
    """A module's winner `matched` on its own rounds (often faster, within the noise on one) goes
    into the whole model, whose interleaved rounds judge it; one that was slower never does."""
    from okgit.campaign.core import ProblemRow
    from okgit.campaign.model import swappable

    rows = [ProblemRow(op=f"{status}.py", status=status, best_tag=f"okgit/r/{status}")
            for status in ("optimized", "matched", "unverified", "slower", "fallback")]
    rows.append(ProblemRow(op="untagged.py", status="matched"))
    assert [r.op for r in swappable(rows)] == ["optimized.py", "matched.py", "unverified.py"]


def test_of_the_two_patches_the_faster_whole_model_is_kept_and_untimed_the_modules() -> None:
    """The modules' patch and the whole model's, each verified: timed, the faster whole model
    wins and the other is named with both speedups; untimed, the modules' (the smaller change)."""
    from okgit.campaign.model import WHOLE_LABEL, faster
    from okgit.campaign.result import EndToEnd

    def end(swapped: list[str], speedup: float | None, ok: bool = True, dropped: dict | None = None) -> EndToEnd:
        return EndToEnd(model="m.py", ok=ok, status="optimized" if ok else "fallback", reason="", swapped=swapped,
                        device="cuda:0", speedup=speedup, dropped=dropped or {})

    modules = (end(["fc1+act"], 1.10, dropped={"norm": "slower alone"}), {"okgit_m/x.py": "..."})
    whole = (end([WHOLE_LABEL], 1.30), {"m.py": "..."})
    kept, files = faster([modules, whole])
    assert kept.swapped == [WHOLE_LABEL] and files == {"m.py": "..."}
    assert kept.dropped == {"norm": "slower alone", "fc1+act": f"the whole model 1.10x with it, 1.30x with {WHOLE_LABEL}"}
    kept, _ = faster([(end(["fc1+act"], 1.10), {}), (end([WHOLE_LABEL], 0.95, ok=False, dropped={WHOLE_LABEL: "slower"}), {})])
    assert kept.swapped == ["fc1+act"] and kept.dropped == {WHOLE_LABEL: "slower"}
    kept, _ = faster([(end(["fc1+act"], None), {}), (end([WHOLE_LABEL], None), {})])
    assert kept.swapped == ["fc1+act"]
    assert kept.dropped == {WHOLE_LABEL: "nothing timed: the modules' patch is kept, the smaller change"}


def test_a_patch_whose_state_dict_changed_gives_way_to_the_other(git_repo: Path) -> None:
    """The faster patch is judged as a whole model first; a state dict of other names (a
    checkpoint of the model would no longer load) hands out none of it, says why for each of its
    swaps, and the other patch that held is judged and handed out instead."""
    from types import SimpleNamespace

    from okgit.campaign.model import WHOLE_LABEL, _whole_model, handed_out
    from okgit.campaign.result import EndToEnd
    from okgit.git.repo import Repo

    _commit(git_repo, "plain.py", PLAIN_MODEL)
    repo, config = Repo.find(git_repo), SimpleNamespace(device="cpu", backend="triton")

    def end(swapped: list[str], speedup: float) -> EndToEnd:
        return EndToEnd(model="plain.py", ok=True, status="optimized", reason="", swapped=swapped, device="cpu",
                        speedup=speedup, dropped={"norm": "slower alone"} if len(swapped) > 1 else {})

    renamed = {"plain.py": PLAIN_MODEL.replace("self.scale", "self.gain")}  # the same model, another name
    kept = {"plain.py": PLAIN_MODEL + "\n# the modules' kernels would be swapped in here\n"}
    tried = [(end(["fc1+act", "fc2"], 1.10), kept), (end([WHOLE_LABEL], 1.30), renamed)]
    chosen, tried = handed_out(tried, lambda e, files: _whole_model(e, "plain.py", files, repo, config))
    assert chosen is not None
    handed, files = chosen
    assert files is kept and handed.swapped == ["fc1+act", "fc2"] and handed.ok and handed.state == "unchanged"
    assert set(handed.dropped) == {"norm", WHOLE_LABEL}
    assert handed.dropped[WHOLE_LABEL].startswith("the patched model's state dict: ") and "gain" in handed.dropped[WHOLE_LABEL]
    # neither holds: nothing handed out, each swap of each patch says why
    chosen, tried = handed_out([(end(["fc1+act", "fc2"], 1.10), renamed)],
                               lambda e, files: _whole_model(e, "plain.py", files, repo, config))
    assert chosen is None and not tried[0][0].ok
    assert set(tried[0][0].dropped) == {"norm", "fc1+act", "fc2"}
