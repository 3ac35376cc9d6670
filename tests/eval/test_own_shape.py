"""The kernel judged is the kernel that runs (docs/design.md): a candidate whose kernels run only
at shapes other than the op file's own is not handed out, and what is handed out says where it
applies. Through `okgit optimize` on the CPU, in a real repository: the checked shapes are the
interpreter's (scaled down), the op file's own is called on the meta device with launches
counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import sh

OP = '''import torch
import torch.nn as nn

batch_size = 16
dim = 8192  # 131072 elements: the interpreter runs a smaller shape (at most 65536, as the candidate expects)


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

CASES = Path(__file__).parents[1] / "cases"


@pytest.mark.slow  # an interpreter search through the CLI, with the Inductor seed (~60 s)
@pytest.mark.timeout(1200)
def test_a_kernel_that_runs_only_at_other_shapes_is_not_handed_out(cli, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    sh(tmp_path, "init", "-q", "-b", "main", str(root))
    (root / "op.py").write_text(OP)
    (root / "okgit.toml").write_text("inductor = true\n")
    sh(root, "add", ".")
    sh(root, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "op")
    fallback = (CASES / "fallback_at_own_shape" / "candidate.py").read_text()
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"type": "candidate", "cand": "c001", "origin": "llm:m", "intent": "small shapes",
                                  "parent": None, "source": fallback, "result": {}}) + "\n")

    proc = cli("optimize", "op.py", "--device", "cpu", "--json", "--model", f"replay:{traces}", "--iterations", "4", cwd=root)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    run_dir = root / ".okgit" / "runs" / result["run_id"]
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    origin = {e["cand"]: e["origin"] for e in events if e["type"] == "proposal"}
    evaluated = {e["cand"]: e for e in events if e["type"] == "evaluated"}

    replayed = next(c for c, o in origin.items() if o == "replay")
    assert evaluated[replayed]["status"] == "rejected" and evaluated[replayed]["error"]["gate"] == "own_shape"
    assert "batch_size=16, dim=8192" in evaluated[replayed]["error"]["message"]
    # whatever is handed out ran its own kernels at the op file's own shape, and the report says where it applies
    best = result["best_tag"]
    assert best is None or not best.endswith(f"/{replayed}")
    seeds = [c for c, o in origin.items() if o.startswith("inductor")]
    assert seeds, origin  # the seed was proposed too (okgit.toml: inductor = true)
    for cand, e in evaluated.items():
        if e["correct"]:
            own = [s for s in e["kernel_shapes"] if s["own"]]
            assert own and own[0]["launches"], (origin[cand], e["kernel_shapes"])
    if best:
        report = (run_dir / "report.md").read_text()
        assert "Its kernels ran at: batch_size=16, dim=8192 (the op file's own shape" in report
        shown = cli("apply", best, cwd=root)
        assert shown.returncode == 0, shown.stderr
        assert "its kernels ran at: batch_size=16, dim=8192" in shown.stdout
