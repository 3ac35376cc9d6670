"""The Modal evaluator without a network: authentication errors, the app and image
definitions, and the GPU function's body run in-process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from okgit.errors import OkgitError
from okgit.eval import modal as om
from okgit.eval.types import Comparison, EvalResult, Reference, Status
from okgit.problem import Problem, load_problem

TOKENS = {"MODAL_TOKEN_ID": "ak-test", "MODAL_TOKEN_SECRET": "as-test"}


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    for key in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE", "MODAL_CONFIG_PATH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def credentials(no_credentials, monkeypatch):
    for k, v in TOKENS.items():
        monkeypatch.setenv(k, v)


# --- authentication --------------------------------------------------------------------------------


def test_credentials_from_token_variables():
    assert om.has_credentials(TOKENS)
    assert not om.has_credentials({"MODAL_TOKEN_ID": "ak-test", "HOME": "/nonexistent"})


def test_credentials_from_the_modal_toml_profiles(tmp_path):
    toml = tmp_path / ".modal.toml"
    toml.write_text('[default]\ntoken_id = "ak-1"\ntoken_secret = "as-1"\n')
    assert om.has_credentials({"HOME": str(tmp_path)})
    toml.write_text('[work]\ntoken_id = "ak-1"\ntoken_secret = "as-1"\nactive = true\n\n[other]\ntoken_id = "ak-2"\n')
    assert om.has_credentials({"HOME": str(tmp_path)})
    assert not om.has_credentials({"HOME": str(tmp_path), "MODAL_PROFILE": "other"})  # no secret there
    moved = tmp_path / "elsewhere.toml"
    toml.rename(moved)
    assert not om.has_credentials({"HOME": str(tmp_path)})
    assert om.has_credentials({"HOME": str(tmp_path), "MODAL_CONFIG_PATH": str(moved)})


def test_no_credentials_is_one_clear_error(no_credentials):
    pytest.importorskip("modal")
    with pytest.raises(OkgitError) as e:
        om.ModalEvaluator(gpu="H100")
    assert str(e.value) == om.MISSING_AUTH and "\n" not in str(e.value)


def test_missing_modal_package_is_one_clear_error(credentials, monkeypatch):
    monkeypatch.setitem(sys.modules, "modal", None)  # import modal -> ImportError
    with pytest.raises(OkgitError, match=r"pip install 'okgit\[modal\]'"):
        om.ModalEvaluator()


def test_cli_without_credentials_exits_1_with_one_line(no_credentials, tmp_path):
    pytest.importorskip("modal")
    from okgit.repo import git

    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "op.py").write_text((Path(__file__).parent / "kb_fixture/KernelBench/level1/1_ScaledRelu.py").read_text())
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", "op.py", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "op", cwd=repo)
    proc = subprocess.run([sys.executable, "-m", "okgit", "optimize", "op.py", "--eval", "modal"], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"okgit: {om.MISSING_AUTH}"
    assert not (repo / ".okgit" / "runs").exists()  # refused before anything was created


# --- definitions, built offline ----------------------------------------------------------------------


def test_image_pins_the_local_versions_and_a_cuda_toolkit(credentials, monkeypatch):
    modal = pytest.importorskip("modal")
    import numpy
    import pydantic
    import torch
    import triton

    calls: dict[str, tuple] = {}
    real = {name: getattr(modal.Image, name) for name in ("from_registry", "pip_install", "add_local_python_source")}

    def spy(name):
        def wrapper(*args, **kwargs):
            calls[name] = (args, kwargs)
            return real[name](*args, **kwargs)
        return wrapper

    monkeypatch.setattr(modal.Image, "from_registry", staticmethod(spy("from_registry")))
    monkeypatch.setattr(modal.Image, "pip_install", spy("pip_install"))
    monkeypatch.setattr(modal.Image, "add_local_python_source", spy("add_local_python_source"))
    image = om.build_image()
    assert isinstance(image, modal.Image)
    tag = calls["from_registry"][0][0]
    assert tag.startswith("nvidia/cuda:") and "-devel-" in tag  # nvcc for the CUDA backend
    assert calls["from_registry"][1]["add_python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    pins = calls["pip_install"][0][1:]
    assert f"triton=={triton.__version__}" in pins
    assert any(p.startswith(f"torch=={torch.__version__.split('+')[0]}") for p in pins)
    assert f"pydantic=={pydantic.VERSION}" in pins and f"numpy=={numpy.__version__}" in pins
    assert calls["add_local_python_source"][0][1:] == ("okgit",)


def test_cuda_image_tags():
    assert om.cuda_image_tag("12.4") == "nvidia/cuda:12.4.1-devel-ubuntu22.04"
    assert om.cuda_image_tag(None) == om.cuda_image_tag(om.DEFAULT_CUDA)
    assert om.cuda_image_tag("99.9") == om.cuda_image_tag(om.DEFAULT_CUDA)


def test_the_gpu_function_is_defined_with_isolation_timeouts_and_retries(credentials):
    modal = pytest.importorskip("modal")
    options = om.function_options("H200")
    assert options["gpu"] == "H200"
    assert options["block_network"] is True and options["restrict_modal_access"] is True
    assert options["timeout"] == om.TIMEOUT_S and isinstance(options["retries"], modal.Retries)
    assert options["max_containers"] == om.MAX_CONTAINERS
    app, fn = om.build_app("L40S")
    assert isinstance(app, modal.App) and isinstance(fn, modal.Function)
    assert fn._spec_.gpus == "L40S"  # the GPU is the user's choice
    body = fn._raw_f_  # the plain function the container runs (pickled by reference to okgit)
    assert (body.__module__, body.__qualname__) == ("okgit.eval.modal", "remote_job")
    assert om.function_name().startswith("evaluate-")


def test_modal_deploy_finds_the_app_attribute(credentials, monkeypatch):
    modal = pytest.importorskip("modal")
    monkeypatch.setenv("OKGIT_MODAL_GPU", "A100")
    app = om.app
    assert isinstance(app, modal.App) and app.name == om.APP_NAME
    with pytest.raises(AttributeError):
        om.not_a_thing  # noqa: B018


# --- the function's body, in-process ---------------------------------------------------------------


def test_problem_payload_round_trips_with_sibling_files(tmp_path):
    (tmp_path / "helper.py").write_text("SCALE = 3\n")
    op = tmp_path / "op.py"
    op.write_text("from helper import SCALE\n")
    problem = Problem(path="ops/op.py", source=op.read_text(), root=str(tmp_path), knobs={"dim": 4},
                      extra_shapes=((("dim", 8),),), atol=1e-3)
    data = om.problem_payload(problem)
    assert set(data["files"]) == {"helper.py", "op.py"}
    remote_root = tmp_path / "remote"
    remote_root.mkdir()
    again = om._problem_from(data, remote_root)
    assert again.path == problem.path and again.source == problem.source and again.knobs == problem.knobs
    assert again.extra_shapes == problem.extra_shapes and again.atol == 1e-3
    assert (remote_root / "helper.py").read_text() == "SCALE = 3\n"


TRITON_RELU2 = (Path(__file__).parent / "kb_fixture/candidates/1_ScaledRelu_triton.py").read_text()


@pytest.fixture
def relu_problem():
    pytest.importorskip("okgit.eval.local")
    path = Path(__file__).parent / "kb_fixture/KernelBench/level1/1_ScaledRelu.py"
    return load_problem(path.name, source=path.read_text(), root=None)


def _comparable(r: EvalResult) -> dict:
    return r.model_dump(mode="json", exclude={"wall_s", "runtime_us", "ref_runtime_us", "speedup", "profile"})


def test_remote_body_gives_the_local_evaluators_result(relu_problem):
    from okgit.eval.local import LocalEvaluator

    payload = {"kind": "evaluate", "problem": om.problem_payload(relu_problem), "source": TRITON_RELU2,
               "mode": "fast", "backend": "triton", "device": "cpu"}
    remote = EvalResult.model_validate(om.remote_job(payload)["result"])
    local = LocalEvaluator(device="cpu").evaluate(relu_problem, TRITON_RELU2, mode="fast", backend="triton")
    assert remote.status is Status.correct, remote.error
    assert _comparable(remote) == _comparable(local)
    ref = Reference.model_validate(om.remote_job({"kind": "reference", "problem": om.problem_payload(relu_problem),
                                                  "device": "cpu"})["result"])
    assert ref.timed is False


def test_remote_body_reports_the_users_error_once(relu_problem):
    broken = Problem(path="bad.py", source="import torch\nclass Model: pass\ndef get_inputs(): raise ValueError('no')\n"
                     "def get_init_inputs(): return []\n")
    out = om.remote_job({"kind": "reference", "problem": om.problem_payload(broken), "device": "cpu"})
    assert set(out) == {"okgit_error"}


class LocalFunction:
    """Stands in for the Modal function: runs the body in-process, as the container would."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()

    def remote(self, payload):
        return om.remote_job({**payload, "device": "cpu"})

    def map(self, payloads, return_exceptions=False, order_outputs=True):
        for i, payload in enumerate(payloads):
            yield RuntimeError("container lost") if i in self.fail else self.remote(payload)


def test_modal_evaluator_end_to_end_through_a_local_function(credentials, relu_problem, monkeypatch):
    pytest.importorskip("modal")
    ev = om.ModalEvaluator(gpu="H100")
    monkeypatch.setattr(ev, "_function", lambda: LocalFunction(fail={1}))
    assert ev.device == "modal:H100"
    assert ev.reference(relu_problem).timed is False
    results = ev.evaluate_many(relu_problem, [TRITON_RELU2, TRITON_RELU2.replace("* 2.0", "* 3.0")])
    assert results[0].status is Status.correct
    assert results[1].status is Status.error and results[1].error.gate == "modal"
    assert "container lost" in results[1].error.message


def test_modal_evaluator_turns_service_failures_into_one_line(credentials, relu_problem, monkeypatch):
    pytest.importorskip("modal")

    class Down:
        def remote(self, payload):
            raise ConnectionError("no route to host\nmore detail")

        def map(self, *a, **k):
            raise ConnectionError("no route to host")

    ev = om.ModalEvaluator()
    monkeypatch.setattr(ev, "_function", lambda: Down())
    with pytest.raises(OkgitError, match="^Modal: ConnectionError: no route to host$"):
        ev.reference(relu_problem)
    with pytest.raises(OkgitError, match="^Modal: ConnectionError"):
        ev.evaluate(relu_problem, TRITON_RELU2)


def test_compare_results_travel_as_comparisons(credentials, monkeypatch):
    pytest.importorskip("modal")
    cmp = Comparison(rounds=3, baseline_us=[2.0] * 3, candidate_us=[1.0] * 3, noise=0.01, wins=3,
                     sign_test_p=0.125, speedup=2.0, optimized=True)

    class Fn:
        def remote(self, payload):
            assert payload["kind"] == "compare" and payload["rounds"] == 3
            return {"result": cmp.model_dump(mode="json")}

    ev = om.ModalEvaluator()
    monkeypatch.setattr(ev, "_function", lambda: Fn())
    assert ev.compare(Problem(path="op.py", source=""), "src", rounds=3) == cmp
