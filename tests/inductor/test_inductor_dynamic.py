"""The Inductor seed at the user's shapes: the dims that follow the knobs (and the batch) compiled
dynamic, the forward's own argument names (upper-case ones too), and a fallback to the
reference's forward that says so.

The fast tests check which dims are marked and how dynamo's sources read as Python; the slow
ones capture seeds afresh (this module's ops, and test_inductor_seed.py's batch norm in both of
its modes), in one process, and run them under Triton's interpreter at several shapes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from okgit.inductor.shapes import dynamic_dims, python_expr

HERE = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def seeds_and_checks(tmp: Path, jobs: dict[str, tuple[Path, tuple[str, ...], str]]) -> dict[str, tuple[dict, str, str]]:
    """Per job NAME: (OP, ARGS, CHECK): `python -m okgit.inductor OP cpu TMP/NAME.py ARGS`'s main,
    then CHECK (`op` and `out` its paths), the jobs one after the other in one process (one torch,
    Inductor and Triton start for all; okgit's own seed process makes its modes one after the
    other too): under the interpreter, as that process is on a CPU
    (okgit.eval.parent.sandbox.worker_env). A job that fails does not stop the next. Per job: the
    seed's JSON line, what the job printed (ending in "ok" where the check passed) and the
    process's stderr."""
    script = "import sys, traceback\nfrom okgit.inductor.__main__ import main\n"
    for name, (op, args, check) in jobs.items():
        out = str(tmp / f"{name}.py")
        job = f"op, out = {str(op)!r}, {out!r}\nassert main({[str(op), 'cpu', out, *args]!r}) == 0\n" + check
        script += (f"print('job {name}', flush=True)\ntry:\n    exec({job!r}, {{'main': main}})\n"
                   "except BaseException:\n    traceback.print_exc(file=sys.stdout)\n")
    run = subprocess.run([sys.executable, "-c", script], env={**ENV, "TRITON_INTERPRET": "1"}, capture_output=True,
                         text=True, timeout=1200)
    said: dict[str, list[str]] = {}
    for line in run.stdout.splitlines():
        if line.startswith("job ") and line[4:] in jobs:
            said[line[4:]] = []
        elif said:
            said[list(said)[-1]].append(line)
    answers = {}
    for name in jobs:
        lines = said.get(name, [])
        made = [line for line in lines if line.startswith("{")]
        answers[name] = (json.loads(made[0]) if made else {}, "\n".join(lines), run.stderr[-2000:])
    return answers


def test_dynamo_sources_read_as_the_forward_writes_them() -> None:
    assert python_expr("L['self']._modules['lin']._parameters['weight']") == "self.lin.weight"
    assert python_expr("L['self']._modules['bn']._buffers['running_mean'].size()[0]") == "self.bn.running_mean.size(0)"
    assert python_expr("L['Q'].stride()[2]") == "Q.stride(2)"
    assert python_expr("G['hidden']") == "hidden"
    # a child that is not an identifier keeps its subscript (still Python)
    assert python_expr("L['self']._modules['layers']._modules['0'].eps") == "self.layers._modules['0'].eps"


def test_the_dims_that_follow_a_knob_and_the_batch_are_dynamic() -> None:
    inputs, named = dynamic_dims(str(HERE / "bn_min_softmax.py"), {})
    assert inputs == [{0, 1}]  # batch_size and in_features
    assert named["lin.weight"] == {0, 1} and named["lin.bias"] == {0} and named["bn.running_mean"] == {0}
    assert named["bn.num_batches_tracked"] == set()
    # every knob of the attention op sizes its inputs; the batch is dim 0 whatever the knobs
    inputs, named = dynamic_dims(str(HERE / "attention_upper.py"), {"batch_size": 2})
    assert inputs == [{0, 1, 2, 3}] * 3 and named == {}


GPU_BODY = """        arg0_1, arg1_1 = args
        args.clear()
        s0 = arg0_1
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda((s0, ), (1, ), torch.float32)
            stream0 = get_raw_stream(0)
            triton_poi_fused_0.run(arg1_1, buf0, s0, stream=stream0)
            del arg1_1
        return (buf0, )"""


def test_a_gpu_wrappers_arguments_and_outputs_are_counted_inside_its_device_guard() -> None:
    import torch

    from okgit.inductor.capture import NotCaptured, _check_outputs

    graph = {"placeholders": [("L['x'].size()[0]", 2), ("L['x']", None)], "outputs": 1}
    assert _check_outputs(torch, GPU_BODY, graph, torch.zeros(2)) is False  # one tensor, returned bare
    with pytest.raises(NotCaptured, match="return value"):
        _check_outputs(torch, GPU_BODY, graph, (torch.zeros(2), torch.zeros(2)))  # the forward returns two
    with pytest.raises(NotCaptured, match="takes 2 arguments for the graph's 3"):
        _check_outputs(torch, GPU_BODY, {"placeholders": [1, 2, 3], "outputs": 1}, torch.zeros(2))


BN_CHECK = '''
import importlib.util, torch
def load(p, n):
    spec = importlib.util.spec_from_file_location(n, p); m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m); return m
ref, seed = load(op, "ref"), load(out, "seed")
torch.manual_seed(0); a = ref.Model(*ref.get_init_inputs())
b = seed.Model(*seed.get_init_inputs()); b.load_state_dict(a.state_dict())
calls = []
for mode in ("train", "eval"):
    real = getattr(seed, "call_" + mode)
    setattr(seed, "call_" + mode, lambda args, real=real, mode=mode: calls.append(mode) or real(args))
torch.set_grad_enabled(False)
for training in (True, False, True):
    a.train(training); b.train(training)
    x = torch.randn(24, 40)
    assert torch.allclose(a(x), b(x), atol=1e-5, rtol=1e-5)
    for k, v in a.state_dict().items():
        assert torch.allclose(v.float(), b.state_dict()[k].float(), atol=1e-6), k
assert calls == ["train", "eval", "train"], calls
y = torch.randn(7, 40)  # another batch: the same kernels (their sizes are arguments)
assert torch.allclose(a(y), b(y), atol=1e-5) and calls == ["train", "eval", "train", "train"]
y = torch.randn(1, 40)  # a size of 1, which dynamo specialises: the reference's own forward, said in a warning
a.eval(); b.eval()
import warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    assert torch.allclose(a(y), b(y), atol=1e-5) and len(calls) == 4
assert any("do not apply to inputs [(1, 40)] (eval mode)" in str(w.message) for w in seen), [str(w.message) for w in seen]
print("ok")
'''

RMS_CHECK = '''
import importlib.util, torch
specialised = out[:-3] + ".specialised.py"  # where the answer's "specialised" is written
spec = importlib.util.spec_from_file_location("seed", specialised); seed = importlib.util.module_from_spec(spec)
spec.loader.exec_module(seed)
calls = []
for path in ("any", "any_static"):
    real = getattr(seed, "call_" + path)
    setattr(seed, "call_" + path, lambda args, real=real, path=path: calls.append(path) or real(args))
model = seed.Model(1e-5)
torch.set_grad_enabled(False)
for shape in [(4, 16, 8, 8), (3, 16, 8, 8), (4, 5, 7, 9)]:
    x = torch.randn(shape)
    torch.testing.assert_close(model(x), model.forward_reference(x), rtol=1e-5, atol=1e-5)
assert calls == ["any_static", "any", "any"], calls
print("ok")
'''

ATTENTION_CHECK = '''
import importlib.util, warnings, torch
def load(p, n):
    spec = importlib.util.spec_from_file_location(n, p); m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m); return m
ref, seed = load(op, "ref"), load(out, "seed")
calls = []
real = seed.call_any
seed.call_any = lambda args: calls.append(1) or real(args)
a, b = ref.Model(), seed.Model()
torch.set_grad_enabled(False)
warnings.filterwarnings("error", message=".*Inductor kernels do not apply")
# the compiled shape, another batch, and every size changed (head dim 6, odd sequence)
for shape in [(3, 2, 12, 8), (5, 2, 12, 8), (2, 3, 7, 6)]:
    q, k, v = (torch.randn(shape) for _ in range(3))
    torch.testing.assert_close(b(q, k, v), a(q, k, v), atol=1e-5, rtol=1e-5)
assert len(calls) == 3, calls
warnings.resetwarnings()
q = torch.randn(1, 2, 12, 8)  # a batch of 1 was not compiled for (dynamo specialises it)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    torch.testing.assert_close(b(q, q, q), a(q, q, q))
assert len(calls) == 3 and any("do not apply" in str(w.message) for w in seen)
# the evaluator's probe of a shape too large for the interpreter: the meta device, launches counted, none run
from okgit.backends.triton import install_launch_counter
counter = install_launch_counter()
counter.dry = True
q = torch.randn(64, 8, 512, 32, device="meta")
b(q, q, q)
assert len(calls) == 4 and counter.total() > 0, counter.counts
print("ok")
'''


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, tuple[dict, str, str]]]:
    """The slow tests' seeds and checks in one process; the attention's last, as its check leaves
    Triton's launches counted and not run."""
    tmp = tmp_path_factory.mktemp("seeds")
    jobs = {"bn": (HERE / "bn_min_softmax.py", (), BN_CHECK),
            "rms": (HERE / "rms_norm.py", ("default", "{}", "both"), RMS_CHECK),
            "attention": (HERE / "attention_upper.py", (), ATTENTION_CHECK)}
    return tmp, seeds_and_checks(tmp, jobs)


def _passed(seeds: tuple[Path, dict[str, tuple[dict, str, str]]], name: str) -> tuple[Path, dict]:
    """The job's seed made and its check passed (what it printed ends in "ok"): (the seeds'
    directory, the seed's answer)."""
    tmp, answers = seeds
    answer, said, err = answers[name]
    assert answer.get("ok") and said.rstrip().endswith("ok"), f"{said[-3000:]}\n{err}"
    return tmp, answer


@pytest.mark.slow  # Inductor compiles, then the interpreter runs the seed
@pytest.mark.timeout(1200)
def test_a_seed_of_upper_case_arguments_runs_its_kernels_at_other_shapes(seeds) -> None:
    tmp, answer = _passed(seeds, "attention")
    assert answer["modes"] == ["any"] and {"Q.size(2)", "Q.size(3)"} <= set(answer["dynamic"])
    text = (tmp / "attention.py").read_text()
    assert "def forward(self, Q, K, V):" in text and "def forward_reference(self, Q, K, V):" in text


@pytest.mark.slow  # Inductor compiles, then the interpreter runs the seed
@pytest.mark.timeout(1200)
def test_the_specialised_seed_takes_its_static_kernels_at_the_compiled_shape_only(seeds) -> None:
    tmp, answer = _passed(seeds, "rms")
    assert answer["specialised"] == str(tmp / "rms.specialised.py")
    assert "triton_per" in answer["differs"] and "triton_red" in answer["differs"]


@pytest.mark.slow  # Inductor compiles, then the interpreter runs the seed
@pytest.mark.timeout(1200)
def test_a_fresh_seed_runs_under_the_interpreter_and_matches_in_both_modes(seeds) -> None:
    """test_inductor_seed.py's op (batch norm: both module modes compiled), made afresh."""
    _, answer = _passed(seeds, "bn")
    assert answer["modes"] == ["train", "eval"]
