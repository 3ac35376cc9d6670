"""The Inductor seed: torch.compile's kernels as a standalone op file.

The fixture `inductor/bn_min_softmax.capture.json` is what okgit.inductor.capture made of
`inductor/bn_min_softmax.py` on a CPU (torch 2.13); the fast tests check the pure text
transform on it, the slow one has `okgit optimize` make a seed afresh and judge it with the real
evaluator. A fresh seed of bn_min_softmax.py run under Triton's interpreter in both modes:
test_inductor_dynamic.py, in the process that makes its other seeds.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from okgit.eval.parent.gates.static import static_findings
from okgit.inductor.standalone import standalone_file
from okgit.lower.graph import Unsupported

HERE = Path(__file__).parent
OP = HERE / "bn_min_softmax.py"


def _fixture() -> dict:
    return json.loads((HERE / "bn_min_softmax.capture.json").read_text())


def test_the_file_has_plain_triton_kernels_launchers_and_no_compiler_at_run_time() -> None:
    text = standalone_file(OP.read_text(), _fixture(), "cpu")
    tree = ast.parse(text)
    kernels = [f for f in tree.body if isinstance(f, ast.FunctionDef) and any(ast.unparse(d) == "triton.jit" for d in f.decorator_list)]
    assert kernels, "no @triton.jit kernel in the seed"
    for k in kernels:
        assert [ast.unparse(d) for d in k.decorator_list] == ["triton.jit"]  # no Inductor autotuner left
    launchers = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("launch_")}
    assert {f"launch_{k.name}" for k in kernels if not k.name.split("_")[-1].isdigit()} <= launchers
    code = "\n".join(line.split("#")[0] for line in text.splitlines())  # what runs, not the comments
    for banned in ("async_compile", "assert_size_stride", "torch.compile", "_dynamo", "get_raw_stream", "_DeviceGuard",
                   "triton_heuristics"):
        assert banned not in code, banned
    imports = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [i for i in imports if "_inductor" in i] == ["from torch._inductor.runtime import triton_helpers"]
    # both module modes compiled (batch norm reads self.training), the reference kept for the rest
    assert "def call_train(" in text and "def call_eval(" in text and "def forward_reference(self, x)" in text
    assert "def fits_train(self, x)" in text and "return reference_forward(self, x)" in text
    assert static_findings(ast.parse(text)) == []


def test_the_forward_checks_what_the_kernels_assumed(tmp_path: Path) -> None:
    text = standalone_file(OP.read_text(), _fixture(), "cpu")
    path = tmp_path / "seed.py"  # a real file: @triton.jit reads its kernels' source
    path.write_text(text)
    ns: dict = {"__file__": str(path)}
    exec(compile(text, str(path), "exec"), ns)
    torch = ns["torch"]
    model = ns["Model"](40, 48, 0.5)
    fits = ns["fits_eval"]
    model.eval()
    with torch.no_grad():
        # the batch and the knob-following sizes are free: another batch, other features
        assert fits(model, torch.randn(7, 40))
        assert fits(ns["Model"](33, 17, 0.5).eval(), torch.randn(5, 33))
        assert not fits(model, torch.randn(7, 41))  # not the weight's
        assert not fits(model, torch.randn(1, 40))  # a size of 1 was not compiled for
        assert not fits(model, torch.randn(40, 7).t())  # strides
        assert not fits(model, torch.randn(7, 40, dtype=torch.float64))
    assert not fits(model, torch.randn(7, 40))  # a gradient wanted of the parameters: the kernels compute the forward only
    model.ceiling = 0.25  # a module attribute the kernels baked in
    with torch.no_grad():
        assert not fits(model, torch.randn(7, 40))


def test_a_capture_the_file_cannot_express_is_refused_in_words() -> None:
    cap = _fixture()
    cap["graphs"][0]["body"] = cap["graphs"][0]["body"].replace("extern_kernels.addmm(", "some_private_helper(")
    with pytest.raises(Unsupported, match="some_private_helper"):
        standalone_file(OP.read_text(), cap, "cpu")
    with pytest.raises(Unsupported, match="ModelNew"):
        standalone_file(OP.read_text() + "\n\nclass ModelNew(Model):\n    pass\n", _fixture(), "cpu")


@pytest.mark.slow  # a real okgit process: Inductor, then the evaluator
@pytest.mark.timeout(900)  # Inductor's compile and the interpreter: minutes on a loaded 2-core machine
def test_optimize_proposes_the_seed_tags_it_and_its_patch_applies(git_repo: Path) -> None:
    from conftest import okgit, sh

    # a pointwise chain at a size the evaluator scales down on a CPU: the seed is made at the shape
    # the evaluator times, here (129, 128), half the elements of the example's own 4096 x 8192
    # scaled (the interpreter runs one program of the seed's per 256 elements, each checked call)
    example = Path(__file__).resolve().parents[2] / "examples" / "01_relu_bias_scale.py"
    source = example.read_text().replace("batch_size = 4096\n", "batch_size = 4128\n").replace("features = 8192\n", "features = 4096\n")
    assert "batch_size = 4128" in source and "features = 4096" in source
    (git_repo / "ops").mkdir(exist_ok=True)
    (git_repo / "ops" / "relu_bias_scale.py").write_text(source)
    (git_repo / "okgit.toml").write_text("inductor = true\n")  # on a CPU the seed is opt-in
    sh(git_repo, "add", "ops/relu_bias_scale.py", "okgit.toml")
    sh(git_repo, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "op")
    proc = subprocess.run([sys.executable, "-m", "okgit", "optimize", "ops/relu_bias_scale.py", "--device", "cpu", "--iterations", "3",
                           "--json"], cwd=git_repo, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    events = [json.loads(line) for line in (git_repo / ".okgit" / "runs" / result["run_id"] / "journal.jsonl").read_text().splitlines()]
    seed = next(e for e in events if e["type"] == "proposal" and e["origin"] == "inductor")
    verdict = next(e for e in events if e["type"] == "evaluated" and e["cand"] == seed["cand"])
    assert verdict["correct"], verdict
    assert any(e["type"] == "accepted" and e["cand"] == seed["cand"] for e in events)
    shown = okgit("show", f"okgit/{result['run_id']}/{seed['cand']}", cwd=git_repo)
    assert "def forward_reference(self, x):" in shown.stdout and "@triton.jit" in shown.stdout
