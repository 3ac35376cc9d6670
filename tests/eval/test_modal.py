"""The Modal evaluator without a network: authentication errors, the app and image
definitions, and the GPU function's body run in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import okgit
from okgit.errors import OkgitError
from okgit.eval.modal import client as om
from okgit.eval.modal import remote
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
    """A machine with Modal tokens; below Python 3.11 --eval modal refuses before it reads them
    (Modal's images have no older Python: docs/modal.md), so what needs them is not tested there."""
    if sys.version_info < (3, 11):
        pytest.skip("--eval modal needs Python 3.11 or newer")
    for k, v in TOKENS.items():
        monkeypatch.setenv(k, v)


# --- authentication --------------------------------------------------------------------------------


def test_oauth_logins_are_credentials(tmp_path):
    toml = tmp_path / ".modal.toml"
    toml.write_text('[default]\noauth_refresh_token = "rt"\noauth_client_id = "cid"\noauth_client_secret = "cs"\n')
    assert om.has_credentials({"HOME": str(tmp_path)})
    toml.write_text('[default]\noauth_refresh_token = "rt"\n')  # half a login: the client refuses it too
    assert not om.has_credentials({"HOME": str(tmp_path)})
    assert om.has_credentials({"HOME": str(tmp_path), "MODAL_OAUTH_CLIENT_ID": "cid", "MODAL_OAUTH_JWT_KEY": "k"})


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


@pytest.mark.slow  # modal's import
def test_no_credentials_is_one_clear_error(no_credentials):
    pytest.importorskip("modal")
    with pytest.raises(OkgitError) as e:
        om.ModalEvaluator(gpu="H100")
    assert str(e.value) == om.MISSING_AUTH and "\n" not in str(e.value)


def test_missing_modal_package_is_one_clear_error(credentials, monkeypatch):
    monkeypatch.setitem(sys.modules, "modal", None)  # import modal -> ImportError
    with pytest.raises(OkgitError, match=r"pip install 'okgit\[modal\]'"):
        om.ModalEvaluator()


@pytest.mark.slow  # a real okgit process, modal's import
def test_cli_without_credentials_exits_1_with_one_line(no_credentials, tmp_path):
    pytest.importorskip("modal")
    from okgit.git.repo import git

    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "op.py").write_text((Path(__file__).parents[1] / "kb_fixture/KernelBench/level1/1_ScaledRelu.py").read_text())
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", "op.py", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "op", cwd=repo)
    proc = subprocess.run([sys.executable, "-m", "okgit", "optimize", "op.py", "--eval", "modal"], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"okgit: {om.MISSING_AUTH}"
    assert not (repo / ".okgit" / "runs").exists()  # refused: the run it began leaves no trace


# --- definitions, built offline ----------------------------------------------------------------------


# torch's installed metadata (Requires-Dist) as wheels of each kind carry it
CUDA12_REQUIRES = ["filelock", 'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"',
                   'triton==3.4.0; platform_system == "Linux" and platform_machine == "x86_64"',
                   'optree>=0.13.0; extra == "optree"']
CUDA13_REQUIRES = ['cuda-toolkit[cublas,cudart,cufft,curand,cusolver,cusparse,nvrtc]==13.0.3; platform_system == "Linux"',
                   'triton==3.7.1; platform_system == "Linux"', "sympy>=1.13.3"]
CPU_REQUIRES = ["filelock", "sympy>=1.13.3", 'optree>=0.13.0; extra == "optree"']  # a CPU build pins no triton
OTHERS = {"numpy": "2.1.0", "pydantic": "2.9.0"}


def _stack(version, cuda, requires, local_triton="3.9.0"):
    return om.image_stack(version, cuda, requires, local_triton, OTHERS, "3.11")


def test_a_cuda_12_torch_is_pinned_with_its_triton_and_its_toolkit():
    stack = _stack("2.8.0+cu128", "12.8", CUDA12_REQUIRES, local_triton="3.9.0")
    assert stack.torch == ("torch==2.8.0+cu128", "triton==3.4.0")  # torch's requirement, not the local triton
    assert stack.index == "https://download.pytorch.org/whl/cu128"
    assert stack.cuda == "12.8" and om.cuda_image_tag(stack.cuda) == "nvidia/cuda:12.8.1-devel-ubuntu22.04"
    assert stack.rest == ("numpy==2.1.0", "pydantic==2.9.0", "ninja>=1.11")  # ninja: load_inline, the CUDA backend
    plain = _stack("2.8.0", "12.8", CUDA12_REQUIRES)  # PyPI's Linux wheel is itself the CUDA build
    assert plain.torch[0] == "torch==2.8.0" and plain.index is None and plain.cuda == "12.8"


def test_a_cuda_13_torch_gets_a_cuda_13_toolkit():
    stack = _stack("2.13.0+cu130", "13.0", CUDA13_REQUIRES)
    assert stack.torch == ("torch==2.13.0+cu130", "triton==3.7.1")
    assert stack.cuda == "13.0" and om.cuda_image_tag(stack.cuda).startswith("nvidia/cuda:13.0.")


def test_a_cpu_torch_installs_its_versions_cuda_build_and_leaves_triton_to_its_metadata():
    # torch 2.13.0+cpu beside triton 3.9.0 (what pip picked for it): the image must not ask for
    # torch 2.13.0 (which requires triton 3.7.1) together with triton 3.9.0
    stack = _stack("2.13.0+cpu", None, CPU_REQUIRES, local_triton="3.9.0")
    assert stack.torch == ("torch==2.13.0+cu130",)  # triton comes with it, from that build's requirement
    assert not any("triton" in pin for pin in stack.torch + stack.rest)
    assert stack.index == "https://download.pytorch.org/whl/cu130" and stack.cuda == "13.0"
    older = _stack("2.7.1+cpu", None, CPU_REQUIRES)
    assert older.torch == ("torch==2.7.1+cu128",) and older.cuda == "12.8"


def test_the_toolkit_never_crosses_a_major_version():
    for cuda in ("11.7", "11.8", "12.0", "12.1", "12.3", "12.4", "12.8", "12.9", "12.10", "13.0", "13.1", "13.2", "14.0"):
        tag = om.cuda_image_tag(cuda)
        version = tag.split(":")[1].split("-")[0]
        assert version.split(".")[:2] == cuda.split(".")[:2], (cuda, tag)  # never 12.8 for a 13.x torch
    assert om.cuda_image_tag("13.1") == "nvidia/cuda:13.1.0-devel-ubuntu22.04"  # not in the table: its .0
    # a requirement of another major than torch was built with is not taken for the toolkit
    odd = ['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"']
    assert om.torch_cuda("2.13.0+cu130", "13.0", odd) == "13.0"
    assert om.torch_cuda("2.13.0+cu130", "13.0", CUDA13_REQUIRES) == "13.0"


@pytest.mark.parametrize("stack", [
    _stack("2.8.0+cu128", "12.8", CUDA12_REQUIRES), _stack("2.13.0+cu130", "13.0", CUDA13_REQUIRES),
    _stack("2.13.0+cpu", None, CPU_REQUIRES),
], ids=["cuda12", "cuda13", "cpu"])
def test_the_app_and_image_build_offline_for_each_torch(credentials, monkeypatch, stack):
    modal = pytest.importorskip("modal")
    calls: dict[str, list] = {}
    real = {name: getattr(modal.Image, name) for name in ("from_registry", "pip_install", "add_local_python_source")}

    def spy(name):
        def wrapper(*args, **kwargs):
            calls.setdefault(name, []).append((args, kwargs))
            return real[name](*args, **kwargs)
        return wrapper

    monkeypatch.setattr(modal.Image, "from_registry", staticmethod(spy("from_registry")))
    monkeypatch.setattr(modal.Image, "pip_install", spy("pip_install"))
    monkeypatch.setattr(modal.Image, "add_local_python_source", spy("add_local_python_source"))
    app, fn = om.build_app("H100", stack=stack)
    assert isinstance(app, modal.App) and isinstance(fn, modal.Function)
    (tag,), base = calls["from_registry"][0]
    assert tag == om.cuda_image_tag(stack.cuda) and "-devel-" in tag and base["add_python"] == "3.11"
    torch_layer, rest_layer = calls["pip_install"]
    assert torch_layer[0][1:] == stack.torch and torch_layer[1]["extra_index_url"] == stack.index  # its own layer
    assert rest_layer[0][1:] == stack.rest
    assert calls["add_local_python_source"][0][0][1:] == ("okgit",)
    assert om.function_name(stack=stack) != om.function_name(stack=_stack("2.6.0+cu124", "12.4", []))


def test_the_local_environment_gives_a_consistent_stack():
    import torch

    stack = om.local_stack()
    assert stack.python == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert stack.torch[0].startswith(f"torch=={torch.__version__.split('+')[0]}")
    if torch.version.cuda is None:  # this CI's CPU torch
        assert len(stack.torch) == 1 and stack.index and stack.index.endswith("cu" + stack.cuda.replace(".", ""))


def test_the_gpu_function_is_defined_with_isolation_and_bounded_cost(credentials):
    modal = pytest.importorskip("modal")
    options = om.function_options("H200")
    assert options["gpu"] == "H200"
    assert options["block_network"] is True and options["restrict_modal_access"] is True
    assert options["timeout"] == om.TIMEOUT_S and options["startup_timeout"] == om.STARTUP_TIMEOUT_S
    assert om.TIMEOUT_S > max(om.KIND_TIMEOUT_S.values())  # the in-container limits end a job first
    assert isinstance(options["retries"], modal.Retries) and options["retries"].max_retries == om.RETRIES
    assert options["max_containers"] == om.MAX_CONTAINERS and options["scaledown_window"] == om.SCALEDOWN_S
    assert options["cpu"] >= 2 and options["memory"] >= 8192  # not Modal's 0.125 cores and 128 MiB
    app, fn = om.build_app("L40S")
    assert isinstance(app, modal.App) and isinstance(fn, modal.Function)
    assert fn._spec_.gpus == "L40S"  # the GPU is the user's choice
    body = fn._raw_f_  # the plain function the container runs (pickled by reference to okgit)
    assert (body.__module__, body.__qualname__) == ("okgit.eval.modal.remote", "remote_job")
    assert om.function_name().startswith("evaluate-")


def test_docs_state_the_worst_case_of_a_call():
    text = (Path(__file__).parents[2] / "docs/modal.md").read_text()
    worst = om.worst_case_call_s()
    assert worst == (om.STARTUP_TIMEOUT_S + om.TIMEOUT_S) * (1 + om.RETRIES) + om.SCALEDOWN_S
    for figure in (worst, om.TIMEOUT_S, om.STARTUP_TIMEOUT_S, om.SCALEDOWN_S, om.MAX_CONTAINERS_ENV):
        assert str(figure) in text, figure


def test_the_container_limit_setting(monkeypatch):
    assert om.max_containers_setting({}) == om.MAX_CONTAINERS
    assert om.max_containers_setting({om.MAX_CONTAINERS_ENV: "3"}) == 3
    with pytest.raises(OkgitError, match=om.MAX_CONTAINERS_ENV):
        om.max_containers_setting({om.MAX_CONTAINERS_ENV: "0"})


def test_modal_deploy_finds_the_app_attribute(credentials, monkeypatch):
    modal = pytest.importorskip("modal")
    monkeypatch.setenv("OKGIT_MODAL_GPU", "A100")
    app = om.app
    assert isinstance(app, modal.App) and app.name == om.APP_NAME
    with pytest.raises(AttributeError):
        om.not_a_thing


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
    again = remote._problem_from(data, remote_root)
    assert again.path == problem.path and again.source == problem.source and again.knobs == problem.knobs
    assert again.extra_shapes == problem.extra_shapes and again.atol == 1e-3
    assert (remote_root / "helper.py").read_text() == "SCALE = 3\n"


TRITON_RELU2 = (Path(__file__).parents[1] / "kb_fixture/candidates/1_ScaledRelu_triton.py").read_text()


@pytest.fixture
def relu_problem():
    pytest.importorskip("okgit.eval.parent.local")
    path = Path(__file__).parents[1] / "kb_fixture/KernelBench/level1/1_ScaledRelu.py"
    return load_problem(path.name, source=path.read_text(), root=None)


def _comparable(r: EvalResult) -> dict:
    # the clock's figures differ from run to run; the phases the remote body timed must be the local ones
    return {**r.model_dump(mode="json", exclude={"wall_s", "runtime_us", "ref_runtime_us", "speedup", "profile", "phase_s"}),
            "phases": sorted(r.phase_s or {})}


@pytest.mark.slow  # the real evaluator, in the remote body and here
def test_remote_body_gives_the_local_evaluators_result(relu_problem, evaluator):
    payload = {"kind": "evaluate", "problem": om.problem_payload(relu_problem), "source": TRITON_RELU2,
               "mode": "fast", "backend": "triton", "device": "cpu"}
    remote = EvalResult.model_validate(om.remote_job(payload)["result"])
    local = evaluator.evaluate(relu_problem, TRITON_RELU2, mode="fast", backend="triton")
    assert remote.status is Status.correct, remote.error
    assert _comparable(remote) == _comparable(local)
    ref = Reference.model_validate(om.remote_job({"kind": "reference", "problem": om.problem_payload(relu_problem),
                                                  "device": "cpu"})["result"])
    assert ref.timed is False


@pytest.mark.slow  # the remote body's evaluator prepares the reference
def test_remote_body_reports_the_users_error_once(relu_problem):
    broken = Problem(path="bad.py", source="import torch\nclass Model: pass\ndef get_inputs(): raise ValueError('no')\n"
                     "def get_init_inputs(): return []\n")
    out = om.remote_job({"kind": "reference", "problem": om.problem_payload(broken), "device": "cpu"})
    assert "okgit_error" in out and "result" not in out and "failed" not in out


class LocalFunction:
    """Stands in for the Modal function: runs the body in-process, as the container would."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()

    def remote(self, payload):
        return om.remote_job({**payload, "device": "cpu"})

    def map(self, payloads, return_exceptions=False, order_outputs=True):
        for i, payload in enumerate(payloads):
            yield RuntimeError("container lost") if i in self.fail else self.remote(payload)


@pytest.mark.slow  # the remote body's real evaluator
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
    assert {r.device for r in results} == {"modal:H100"}  # the same name on a failed call
    assert results[0].queue_s is not None and results[0].queue_s >= 0 and results[0].cold_start is not None


@pytest.mark.slow  # modal's import
def test_modal_evaluator_turns_service_failures_into_one_line(credentials, relu_problem, monkeypatch):
    pytest.importorskip("modal")

    class Down:
        def remote(self, payload):
            raise ConnectionError("no route to host\nmore detail")

        def map(self, *a, **k):
            raise ConnectionError("no route to host")

    monkeypatch.setattr(om, "SERVICE_BACKOFF_S", 0.0)  # each call still retries the same times
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


# --- remote_job never raises; the sweep's baselines through the sandboxed worker -----------------


class _Raising:
    device = "cpu"

    def reference(self, problem):
        raise RuntimeError("CUDA error: an illegal memory access\nmore")


class _Hanging:
    device = "cpu"

    def reference(self, problem):
        import time

        time.sleep(30)


@pytest.mark.slow  # a job past its 1 s limit
@pytest.mark.parametrize("evaluator, expect", [(_Raising(), "RuntimeError: CUDA error: an illegal memory access"),
                                              (_Hanging(), "ran past its 1 s limit")], ids=["raises", "hangs"])
def test_remote_job_returns_failures_as_data(relu_problem, monkeypatch, evaluator, expect):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(remote, "_evaluator", lambda device: evaluator)
    monkeypatch.setattr(remote, "_STUCK", False)
    out = om.remote_job({"kind": "reference", "problem": om.problem_payload(relu_problem), "device": "cpu",
                         "limit_s": 1})
    assert expect in out["failed"] and "\n" not in out["failed"]
    assert out["job_s"] < 10 and isinstance(out["cold_start"], bool)
    if isinstance(evaluator, _Hanging):  # that container takes no further job
        assert "stuck" in om.remote_job({"kind": "reference", "problem": {}, "device": "cpu"})["failed"]


def test_remote_job_never_raises_on_bad_payloads(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert "okgit_error" in om.remote_job({"kind": "nonsense", "problem": {"path": "a.py", "source": ""}, "device": "cpu"})
    assert "KeyError" in om.remote_job({"kind": "evaluate", "device": "cpu"})["failed"]


@pytest.fixture
def fresh_evaluators(monkeypatch):
    """A fresh container: no evaluator (nor pre-started worker) from an earlier test."""
    monkeypatch.delenv("PYTHONPATH", raising=False)  # restored after: remote_job sets it
    monkeypatch.setattr(remote, "_EVALUATORS", {})
    yield
    for ev in remote._EVALUATORS.values():
        ev.close()


@pytest.mark.slow  # the remote body's real evaluator and workers
def test_sweep_baselines_run_in_the_sandboxed_worker(credentials, fresh_evaluators, tmp_path, relu_problem,
                                                     monkeypatch):
    pytest.importorskip("modal")
    from okgit.kernelbench import runs

    facts = tmp_path / "facts.json"
    # the reference records where it runs: its module is imported by the reference worker only
    spy = relu_problem.source + (
        "\nimport json as _json, os as _os, importlib.util as _util\n"
        f"_json.dump({{'pid': _os.getpid(), 'cwd': _os.getcwd(), 'token': _os.environ.get('MODAL_TOKEN_ID'),"
        f" 'okgit': _util.find_spec('okgit').origin}}, open({str(facts)!r}, 'w'))\n")
    ev = om.ModalEvaluator(gpu="H100")
    monkeypatch.setattr(ev, "_function", lambda: LocalFunction())
    times = ev.time_baselines(spy, TRITON_RELU2)
    seen = json.loads(facts.read_text())
    assert seen["pid"] != os.getpid() and seen["cwd"] != os.getcwd()  # a worker process, in its own directory
    assert seen["token"] is None  # the scrubbed environment: no Modal token, though this process has one
    assert Path(seen["okgit"]).resolve() == Path(okgit.__file__).resolve()  # PYTHONPATH: this checkout's okgit
    assert times.device == "modal:H100" and times.timed is False
    assert times.errors == {"all": "no GPU: timing is not claimed"} and times.disagreement is None

    ref, good, bad = tmp_path / "ref.py", tmp_path / "good.py", tmp_path / "bad.py"
    ref.write_text(spy)  # the reference prepared above, still warm in that container: prepared once
    good.write_text(TRITON_RELU2)
    bad.write_text(TRITON_RELU2.replace("* 2.0", "* 3.0"))
    fields = runs.baselines(ref, good, {}, timer=ev.time_baselines, gpu=False)
    assert fields["untimed_reason"] == "all: no GPU: timing is not claimed" and "status" not in fields
    wrong = runs.baselines(ref, bad, {}, timer=ev.time_baselines, gpu=False)
    assert wrong["status"] == "incorrect" and wrong["correct"] is False  # the evaluator's check, run again there

    class Down:
        def remote(self, payload):
            raise ConnectionError("no route to host")

    monkeypatch.setattr(ev, "_function", lambda: Down())
    lost = runs.baselines(ref, good, {}, timer=ev.time_baselines, gpu=False)
    assert "Modal: ConnectionError: no route to host" in lost["untimed_reason"] and "status" not in lost


@pytest.mark.slow  # the remote body's real evaluator
def test_a_winner_failing_its_check_there_is_untimed_or_incorrect(credentials, fresh_evaluators, relu_problem):
    rejected = "import threading\n" + TRITON_RELU2  # the static gate refuses it: no figure, not a wrong answer
    times = om.remote_baselines(relu_problem.source, rejected, "cpu")
    assert "rejected" in times.errors["okgit"] and times.disagreement is None
    raising = TRITON_RELU2.replace("def forward(self, x):", "def forward(self, x):\n        raise RuntimeError('boom')", 1)
    times = om.remote_baselines(relu_problem.source, raising, "cpu")
    assert "RuntimeError: boom" in times.disagreement and "\n" not in times.disagreement


class MappedLocally:
    """Modal's `.map` without a network: each input through the real modal Function's body
    (`Function.local`, as a container runs it), outputs given back in completion order,
    reversed here (the last input's first) so that only the echoed index can put them back."""

    def __init__(self, fn, lose: set[str] = frozenset()) -> None:
        self.fn = fn
        self.lose = lose  # sources whose container is lost: an exception comes back, no index
        self.calls: list[dict] = []

    def map(self, payloads, return_exceptions=False, order_outputs=True):
        payloads = list(payloads)
        self.calls.append({"sources": [p["source"] for p in payloads], "order_outputs": order_outputs,
                           "return_exceptions": return_exceptions})
        outs = [RuntimeError("container lost") if p["source"] in self.lose else self.fn.local({**p, "device": "cpu"})
                for p in payloads]
        yield from reversed(outs)


@pytest.mark.slow  # the remote body's real evaluator
def test_a_batch_goes_through_one_map_and_comes_back_in_proposal_order(credentials, relu_problem, monkeypatch):
    pytest.importorskip("modal")
    from okgit.search.driver import Budget, Search
    from okgit.search.types import Context, Proposal, propose_several

    wrong, lost = TRITON_RELU2.replace("* 2.0", "* 3.0"), TRITON_RELU2.replace("* 2.0", "* 2.0 + 0.0")
    ev = om.ModalEvaluator(gpu="H100", max_containers=3)
    mapped = MappedLocally(om.build_app("H100")[1], lose={lost})
    monkeypatch.setattr(ev, "_function", lambda: mapped)
    assert ev.width == 3  # the container limit is the widest batch

    class Three:
        name = "three"
        queue = [Proposal(source=s, origin="test") for s in (TRITON_RELU2, wrong, lost)]

        def propose(self, ctx):
            return self.queue.pop(0) if self.queue else None

        def propose_batch(self, ctx, limit):
            return propose_several(self, ctx, limit)

    events: list[dict] = []
    ctx = Context(problem=relu_problem, reference=Reference(device=ev.device, timed=False), backend="triton",
                  device=ev.device, log=lambda type, **fields: events.append({"type": type, **fields}))
    with ev:
        Search(ctx, ev, Budget(iterations=5), accept=lambda a: None).run([Three()])
    assert mapped.calls == [{"sources": [TRITON_RELU2, wrong, lost], "order_outputs": False, "return_exceptions": True}]
    assert [a.result.status for a in ctx.attempts] == [Status.correct, Status.incorrect, Status.error]
    assert "container lost" in ctx.attempts[2].result.error.message and ctx.attempts[2].result.error.gate == "modal"
    assert [(e["type"], e["cand"]) for e in events if e["type"] in ("proposal", "evaluated")] == [
        ("proposal", "c001"), ("evaluated", "c001"), ("proposal", "c002"), ("evaluated", "c002"),
        ("proposal", "c003"), ("evaluated", "c003")]
    assert all(a.result.device == "modal:H100" and a.result.queue_s is not None for a in ctx.attempts)


@pytest.mark.slow  # a fresh process's imports
def test_the_remote_side_imports_neither_the_client_nor_kernelbench():
    code = ("import sys, okgit.eval.modal.remote\n"
            "print(sorted(m for m in sys.modules if m.startswith(('okgit.kernelbench', 'okgit.eval.modal.image'))"
            " or m == 'okgit.eval.modal.client'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "[]"
