"""The local evaluator on the CPU: honest Triton kernels pass through real workers under the
interpreter; the pieces the parent owns (static gates, environment, tolerances, statistics,
rendering, the CLI) behave as documented."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from okgit.errors import OkgitError
from okgit.eval.judge.tolerance import (
    check_leaf,
    degenerate_reason,
    leaf_tolerance,
    random_reason,
    summarize_outputs,
)
from okgit.eval.parent.gates.static import static_findings
from okgit.eval.parent.local import LocalEvaluator
from okgit.eval.parent.rounds import sign_test_p, summarize
from okgit.eval.parent.sandbox import worker_env
from okgit.eval.types import Status
from okgit.problem import load_problem
from okgit.views.eval_text import eval_text

OPS = Path(__file__).parents[1] / "ops"


# Each op at a size still above the interpreter's input limit (its CPU-scaled shape is what runs),
# in fewer of the interpreter's programs: softmax's 16 x 8192 scales to 8 rows (tests/ops's
# 64 x 4096: 32), matmul's 256 x 256 x 256 to 2 x 2 tiles of 64, 4 K steps each (1024 x 1024 x 512:
# 4 x 4 tiles); the odd and halved shapes still end in partial rows and tiles
SMALLER = {"softmax": {"batch_size = 64": "batch_size = 16", "dim = 4096": "dim = 8192"},
           "matmul": {"M = 1024": "M = 256", "N = 1024": "N = 256", "K = 512": "K = 256"}}


@pytest.mark.slow  # the real evaluator
@pytest.mark.parametrize("op", ["softmax", "matmul"])
def test_honest_kernels_pass(evaluator, op):
    source = (OPS / f"{op}.py").read_text()
    for old, new in SMALLER[op].items():
        assert old in source, old
        source = source.replace(old, new)
    problem = load_problem(OPS / f"{op}.py", source=source, root=str(OPS))
    result = evaluator.evaluate(problem, (OPS / f"{op}_triton.py").read_text())
    assert result.status is Status.correct, result.error
    names = [g.name for g in result.gates]
    for gate in ("seeds", "outputs_written", "fresh_inputs", "distribution", "extra_shapes", "init_inputs",
                 "backend_kernel"):
        assert gate in names
    assert all(g.passed for g in result.gates)
    assert not result.timed and result.runtime_us is None and result.speedup is None
    assert len(result.shapes) >= 2  # the CPU-scaled shape and at least one odd variant
    assert sum(result.shapes[0].values()) < sum(problem.knobs.values())  # scaled
    assert result.profile.launch_count == 1
    assert result.flags["torch.backends.cuda.matmul.allow_tf32"] is False
    if op == "matmul":
        assert result.profile.flops and result.profile.min_bytes


@pytest.mark.slow  # the real evaluator, its judge stopped between two evaluations
def test_a_reference_whose_judge_is_gone_is_prepared_anew(evaluator):
    """A Ctrl-C in a run stops every process okgit started (sandbox.stop_all), the judges of
    references prepared earlier too, and removes their directories: an evaluation after that
    prepares its reference again instead of judging against a file no longer there."""
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    before = evaluator.prepared(problem)
    before.judge.close()  # what stop_all does to it: killed, its directory (and reference.py) removed
    result = evaluator.evaluate(problem, (OPS / "relu_triton.py").read_text())
    assert result.status is Status.correct, result.error
    after = evaluator.prepared(problem)
    assert after is not before and after.judge.alive() and Path(after.reference_path).is_file()


@pytest.mark.slow  # the real evaluator prepares the reference
def test_reference_scaled_for_cpu_and_not_degenerate(evaluator):
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    ref = evaluator.reference(problem)
    assert not ref.timed and ref.runtime_us is None and ref.degenerate is None
    main = ref.shapes[0]
    assert main["batch_size"] * main["dim"] <= 65536 < 16 * 16384


@pytest.mark.slow  # the real evaluator prepares the reference
@pytest.mark.parametrize(("forward", "reason"), [
    ("return torch.relu(x) * 0", "zero"),  # its output cannot change
    ("return torch.relu(x) + torch.rand_like(x)", "the reference is random"),  # two calls differ
])
def test_degenerate_reference_flagged(evaluator, tmp_path, forward, reason):
    op = tmp_path / "op.py"
    op.write_text((OPS / "relu.py").read_text().replace("return torch.relu(x)", forward))
    ref = evaluator.reference(load_problem(op, root=str(tmp_path)))
    assert ref.degenerate and reason in ref.degenerate


def test_random_reason_tells_a_draw_from_reordered_rounding():
    import torch

    x = torch.randn(1000, dtype=torch.float32)
    assert random_reason([torch.rand(1000)], [torch.rand(1000)]) is not None
    assert random_reason([x + x.abs() * 1e-6], [x]) is None  # an atomic's order: rounding, not a draw
    assert random_reason([torch.randint(0, 9, (64,))], [torch.randint(10, 19, (64,))]) is not None
    assert random_reason([x.clone(), None], [x, None]) is None


def test_static_gate_names_cheats():
    src = (
        "import torch\nimport torch.nn.functional as F\nimport time\n"
        "F.relu = lambda x: x\n"
        "setattr(torch, 'allclose', None)\n"
        "torch.backends.cuda.matmul.allow_tf32 = True\n"
        "x = eval('1')\n"
        "class T(torch.Tensor):\n    pass\n"
        "def __torch_function__(*a):\n    pass\n"
    )
    messages = [str(f) for f in static_findings(ast.parse(src))]
    assert any("F.relu" in m for m in messages)
    assert any("setattr" in m for m in messages)
    assert any("allow_tf32" in m for m in messages)
    assert any("eval()" in m for m in messages)
    assert any("subclasses torch.Tensor" in m for m in messages)
    assert any("__torch_function__" in m for m in messages)
    honest = (OPS / "matmul_triton.py").read_text()
    assert static_findings(ast.parse(honest)) == []


def test_worker_env_has_no_credentials():
    env = worker_env("cpu", {"PATH": "/bin", "HOME": "/root", "OPENAI_API_KEY": "sk", "MODAL_TOKEN_ID": "x",
                             "AWS_SECRET_ACCESS_KEY": "x", "HF_TOKEN": "x", "TORCH_AUTH_TOKEN": "x",
                             "TRITON_CACHE_DIR": "/c", "RANDOM_VAR": "x", "GITHUB_TOKEN": "x"})
    assert env["PATH"] == "/bin" and env["HOME"] == "/root" and env["TRITON_CACHE_DIR"] == "/c"
    assert env["TRITON_INTERPRET"] == "1"
    for k in ("OPENAI_API_KEY", "MODAL_TOKEN_ID", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "TORCH_AUTH_TOKEN",
              "RANDOM_VAR", "GITHUB_TOKEN"):
        assert k not in env


CACHE_CHECK = """
import importlib, json, os
from okgit.eval.parent import sandbox
before = sandbox.worker_env("cpu").get("TORCHINDUCTOR_CACHE_DIR")
import torch._dynamo
print(json.dumps([before, os.environ.get("TORCHINDUCTOR_CACHE_DIR"), sandbox.worker_env("cpu").get("TORCHINDUCTOR_CACHE_DIR")]))
os.environ["TORCHINDUCTOR_CACHE_DIR"] = "/elsewhere"  # a process started with the user's own directory:
sandbox = importlib.reload(sandbox)  # okgit's import sees it (torch._dynamo's import, 5 s of CPU, done once)
print(json.dumps([sandbox.worker_env("cpu").get("TORCHINDUCTOR_CACHE_DIR"), os.environ.get("TORCHINDUCTOR_CACHE_DIR")]))
"""


@pytest.mark.slow  # a Python that imports torch._dynamo
def test_the_inductor_cache_torch_writes_at_import_leaves_the_workers_environment_as_it_was():
    """Importing torch._dynamo (torch.export does, in template planning) writes torch's default
    TORCHINDUCTOR_CACHE_DIR into os.environ: the workers' environment, and so their zygote's key,
    must not change with it (a second zygote mid-run); a directory of the user's own is kept."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    out = subprocess.run([sys.executable, "-c", CACHE_CHECK], env=env, capture_output=True, text=True, check=True).stdout
    (before, written, after), own = map(json.loads, out.splitlines())
    assert written and before is None and after is None  # torch wrote its default; the workers never saw it
    assert own == ["/elsewhere"] * 2


def test_only_the_judge_on_a_gpu_grows_its_allocator_segments_in_place():
    user = {"PATH": "/bin", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    assert worker_env("cuda:0", user, role="judge")["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert worker_env("cuda:0", user)["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64"  # timed: the user's own
    assert "PYTORCH_CUDA_ALLOC_CONF" not in worker_env("cpu", {"PATH": "/bin"}, role="judge")


def test_tolerance_scales_and_respects_reference_error():
    import torch

    ref64 = torch.linspace(-100, 100, 101, dtype=torch.float64)
    native = ref64.float()
    tol = leaf_tolerance(native, ref64, ref_error=0.0)
    assert tol.rtol == 1e-4 and abs(tol.atol - 1e-2) < 1e-9
    loose = leaf_tolerance(native, ref64, ref_error=1.0)  # e.g. a TF32 reference: 4x its own error
    assert loose.atol == 4.0
    facts = {"exact": True}
    assert check_leaf(native + 5e-3, facts, native, ref64, tol, "seeds").ok
    bad = native.clone()
    bad[3] += 1.0
    check = check_leaf(bad, facts, native, ref64, tol, "seeds")
    assert not check.ok and check.gate == "seeds"
    unwritten = native.clone()
    unwritten[-1] = float("nan")
    assert check_leaf(unwritten, facts, native, ref64, tol, "seeds").gate == "outputs_written"
    nan_ref = native.clone()
    nan_ref[0] = float("inf")
    assert check_leaf(native, facts, nan_ref, None, tol, "seeds").gate == "nan_pattern"


def _reason(expected: dict) -> str | None:
    """The judge's summaries of each case's outputs (against the first case's), then the rule."""
    first = next(iter(expected.values()))["native"]
    return degenerate_reason([summarize_outputs(v["native"], first if i else None)
                              for i, v in enumerate(expected.values())])


def test_degenerate_reason():
    import torch

    zeros = {f"s{i}": {"native": [torch.zeros(4)]} for i in range(3)}
    assert "zero" in _reason(zeros)
    same = {f"s{i}": {"native": [torch.arange(4.0)]} for i in range(3)}
    assert "does not change" in _reason(same)
    varied = {f"s{i}": {"native": [torch.arange(4.0) * i]} for i in range(3)}
    assert _reason(varied) is None
    constant = {f"s{i}": {"native": [torch.full((4,), 2.0 + i)]} for i in range(3)}
    assert "constant tensor" in _reason(constant)
    # a scalar loss is one element: "constant" says nothing there, a change across seeds is enough
    losses = {f"s{i}": {"native": [torch.tensor(0.5 + i)]} for i in range(3)}
    assert _reason(losses) is None
    stuck = {f"s{i}": {"native": [torch.tensor(0.5)]} for i in range(3)}
    assert "does not change" in _reason(stuck)


@pytest.mark.slow  # starts worker processes
def test_compare_rounds_start_their_workers_at_once(monkeypatch):
    """Each round of the final gate is a fresh worker: they are started together, not one by one,
    up to a cap (10; 3 here, for fewer processes to start), in the timing-only line."""
    from okgit.eval.parent import local

    assert local.MAX_IDLE == 10
    monkeypatch.setattr(local, "MAX_IDLE", 3)
    evaluator = LocalEvaluator(device="cpu", idle_workers=1)
    try:
        evaluator.prestart_for(2)
        assert len(evaluator.pool.idle[("cpu", True)]) == 2
        evaluator.prestart_for(50)
        assert len(evaluator.pool.idle[("cpu", True)]) == 3  # capped: each holds torch in memory
        assert evaluator.wait_warm(120)
        left = list(evaluator.pool.idle[("cpu", True)])
        evaluator.end_rounds()  # rounds that ended early: their workers closed, no evaluation takes them
        assert ("cpu", True) not in evaluator.pool.idle and not any(w.alive() for w in left)
        assert len(evaluator.pool.idle[("cpu", False)]) == 1  # an evaluation's, untouched
    finally:
        evaluator.close()


@pytest.mark.slow  # the real evaluator, a thorough check (8 seeds)
def test_code_that_passed_a_thorough_check_is_remembered_against_its_reference(evaluator, monkeypatch):
    """What lets the final gate's comparison and the sweep's check of the winner skip their own
    fast check (the comparison itself needs a GPU: tests/eval/test_eval_gpu.py): only a thorough
    pass of that very code, backend and prepared reference counts."""
    from okgit.eval.parent.local import _digest
    from okgit.eval.parent.one_shot import check_winner

    problem = load_problem(OPS / "relu.py", root=str(OPS))
    honest = (OPS / "relu_triton.py").read_text()
    wrong = honest.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)")
    assert wrong != honest
    assert evaluator.evaluate(problem, honest, mode="fast").status is Status.correct
    prep = evaluator.prepared(problem)
    assert _digest(problem, honest, "triton") not in prep.thorough  # a fast check is a subset
    assert evaluator.evaluate(problem, wrong, mode="thorough").status is Status.incorrect
    assert evaluator.evaluate(problem, honest, mode="thorough").status is Status.correct
    assert prep.thorough == {_digest(problem, honest, "triton")}
    assert _digest(problem, honest, "cuda") not in prep.thorough
    assert evaluator.passed_thorough(problem, honest) and not evaluator.passed_thorough(problem, wrong)
    assert not evaluator.passed_thorough(problem, honest, backend="cuda")
    asked: list[str] = []
    monkeypatch.setattr(evaluator, "evaluate", lambda problem, source, **kw: asked.append(source))
    assert check_winner(evaluator, problem, honest) == (None, None) and asked == []  # answered by the thorough pass
    prep.judge.close()  # its judge gone: a new one prepares the reference afresh, with no verdicts
    assert not evaluator.passed_thorough(problem, honest)


def test_final_gate_statistics():
    assert sign_test_p(5, 5) == pytest.approx(1 / 32)
    clear = summarize([100.0, 101.0, 100.5], [80.0, 81.0, 80.0])
    assert clear.optimized and clear.wins == 3 and clear.speedup > 1.2
    noisy = summarize([100.0, 110.0, 100.0], [95.0, 96.0, 95.0])  # 10% A/A noise > 5% gain
    assert not noisy.optimized and noisy.wins == 3


def test_one_disturbed_round_hides_no_slower_candidate():
    """L1/87 on an H200: the baseline's first round disturbed (5521 us against 3424-3439), the
    candidate at half its speed in every round; the A/A noise (61%) once called that `matched`."""
    gate = summarize([5521.2, 3431.6, 3424.3, 3425.4, 3438.8], [6794.0, 6694.6, 6805.3, 6797.9, 6858.6])
    assert gate.slower and not gate.optimized and gate.wins == 0
    assert gate.noise > 0.6 and "(typical 0.63%)" in gate.detail
    # the same disturbed baseline against a candidate as fast: within the noise, not slower
    level = summarize([5521.2, 3431.6, 3424.3, 3425.4, 3438.8], [3429.0, 3436.0, 3427.5, 3433.1, 3426.0])
    assert not level.slower and not level.optimized
    # two disturbed rounds of five (problem 15, 2026-12-03): still the median's spread
    two = summarize([4859.0, 4982.0, 1848.0, 1849.5, 1847.2], [2301.0, 2295.0, 2310.4, 2299.0, 2305.8])
    assert two.slower
    # a steady baseline: the typical spread is capped by the A/A noise, so nothing changes there
    steady = summarize([100.0, 101.0, 100.5], [100.6, 100.9, 100.7])
    assert not steady.slower and steady.detail.endswith("A/A noise 0.50%")


@pytest.mark.slow  # the real evaluator
def test_render_cpu_result(evaluator):
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    text = eval_text(evaluator.evaluate(problem, "import torch\nclass ModelNew(torch.nn.Module):\n"
                                                 "    def forward(self, x):\n        return x.clamp(min=0)\n"))
    assert "status: rejected" in text and "backend_kernel" in text and "not claimed on cpu" in text


@pytest.mark.slow  # `okgit eval` as a process: its stdout only the JSON
def test_cli_eval_json(tmp_path):
    env = {**os.environ, "OPENAI_API_KEY": "sk-fake"}
    proc = subprocess.run([sys.executable, "-m", "okgit", "eval", str(OPS / "relu_triton.py"), "--ref",
                           str(OPS / "relu.py"), "--device", "cpu", "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "correct" and data["timed"] is False and data["device"] == "cpu"


def test_a_gpu_of_several_is_named_by_its_physical_id_and_pinned_in_workers(monkeypatch):
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(OkgitError, match="no CUDA GPU is visible"):
            LocalEvaluator(device="cuda", prestart=False)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # naming needs no GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    evaluator = LocalEvaluator(device="cuda:1", prestart=False)
    try:
        assert evaluator.device == "cuda:5"
    finally:
        evaluator.close()
    assert worker_env("cuda:1")["CUDA_VISIBLE_DEVICES"] == "5"
    assert worker_env("cpu")["CUDA_VISIBLE_DEVICES"] == ""
    with pytest.raises(OkgitError, match="unknown device"):
        LocalEvaluator(device="gpu", prestart=False)


@pytest.mark.slow  # the real evaluator prepares the reference
def test_extra_shapes_from_settings_are_checked(evaluator):
    from dataclasses import replace

    problem = load_problem(OPS / "relu.py", root=str(OPS))
    knob = sorted(problem.knobs)[0]
    problem = replace(problem, extra_shapes=(((knob, 37),),))
    assert any(shape.get(knob) == 37 for shape in evaluator.reference(problem).shapes)


def test_perturb_floats_changes_floats_only():
    import torch

    from okgit.eval.protocol.jobs import perturb_floats

    t = torch.ones(2)
    new, changes = perturb_floats([0.5, 3, True, "mean", t, (2.0, [4.0, 7]), 0.0], ["scale", "n"])
    assert new[:5] == [0.75, 3, True, "mean", t] and new[4] is t
    assert new[5] == (3.0, [6.0, 7]) and type(new[5]) is tuple and new[6] == 0.0
    assert changes == ["scale=0.75 (was 0.5)", "argument 5[0]=3.0 (was 2.0)", "argument 5[1][0]=6.0 (was 4.0)"]
    assert perturb_floats([64, False, "x"]) == ([64, False, "x"], [])


@pytest.mark.slow  # the real evaluator prepares four references
def test_init_inputs_case_dropped_where_it_proves_nothing(evaluator, tmp_path):
    """No float to perturb, a reference that raises on the perturbed arguments, or one that is
    not finite there: the case is dropped, as the other variants are."""
    base = (OPS / "scaled_softmax.py").read_text()
    ops = {
        "raises": base.replace("self.temperature = temperature",
                               "assert temperature < 1.0\n        self.temperature = temperature"),
        "nonfinite": base.replace("x / self.temperature",
                                  "x * torch.log(torch.tensor(1.0 - self.temperature))"),
    }
    for name, src in ops.items():
        (tmp_path / f"{name}.py").write_text(src)
    for name, why in (("raises", "the reference raises with temperature=1.05 (was 0.7)"),
                      ("nonfinite", "i0: the reference is not finite there")):
        prep = evaluator.prepared(load_problem(tmp_path / f"{name}.py", root=str(tmp_path)))
        assert not any(c.kind == "init_inputs" for c in prep.cases), name
        assert any(why in d for d in prep.dropped), (name, prep.dropped)
    prep = evaluator.prepared(load_problem(OPS / "relu.py", root=str(OPS)))
    assert not any(c.kind == "init_inputs" for c in prep.cases)
    assert "init_inputs: no float constructor argument to perturb" in prep.dropped
    prep = evaluator.prepared(load_problem(OPS / "scaled_softmax.py", root=str(OPS)))
    case = next(c for c in prep.cases if c.kind == "init_inputs")
    assert case.shape == 0 and case.note.endswith("temperature=1.05 (was 0.7)")


@pytest.mark.slow  # the real evaluator
def test_candidate_refusing_other_constructor_arguments_is_incorrect(evaluator):
    src = (Path(__file__).parents[1] / "cases" / "honest_init_arg" / "candidate.py").read_text()
    src = src.replace("self.temperature = temperature", "assert temperature == 0.7\n        self.temperature = temperature")
    result = evaluator.evaluate(load_problem(OPS / "scaled_softmax.py", root=str(OPS)), src)
    assert result.status is Status.incorrect and result.error.gate == "init_inputs", result.error
    assert "temperature=1.05" in result.error.message and "constructor raised" in result.error.message
