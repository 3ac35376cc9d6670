"""`--eval modal`: the local evaluator's own code, run in a Modal function on a cloud GPU.

The GPU function's body (`remote_job`) is a plain function: it rebuilds the problem from
plain data and calls `LocalEvaluator` inside the container, which spawns the same isolated,
time-limited worker processes as on the user's machine. So an EvalResult from Modal is
the local one, produced on the remote GPU. The image carries the CUDA toolkit (nvcc for
the CUDA backend), the user's versions of torch, triton, pydantic and numpy, and okgit's
source as it is on the user's disk. Candidate code is untrusted: the container has no
network and no access to Modal's API, and no secrets are attached.

By default each okgit process runs an ephemeral app (`app.run()`); Modal caches the image,
so only the first run builds it. `modal deploy -m okgit.eval.modal` deploys the same
function under a name that fingerprints okgit's source and the versions, and okgit uses a
deployed function only when its fingerprint matches the local one (never stale code).

`modal` is an optional extra (`pip install 'okgit[modal]'`), imported only when used.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from okgit.errors import OkgitError
from okgit.eval.base import EvaluatorBase
from okgit.eval.types import Comparison, EvalError, EvalResult, Mode, Reference, Status
from okgit.problem import Problem, load_problem

APP_NAME = "okgit-eval"
# What one call may cost, bounded (docs/modal.md, "What it costs"). remote_job returns every failure
# as data, so Modal retries only what never returned: a lost container or a call past TIMEOUT_S.
KIND_TIMEOUT_S = {"reference": 900, "evaluate": 900, "compare": 1500, "baselines": 1500}  # in the container
TIMEOUT_S = max(KIND_TIMEOUT_S.values()) + 60  # Modal's own limit per attempt: the backstop of the above
STARTUP_TIMEOUT_S = 600  # a container's start (image pull, Python, imports), billed apart from TIMEOUT_S
RETRIES = 1  # attempts after the first, for lost containers (preemption, a crashed host) only
SCALEDOWN_S = 60  # an idle container is kept (and billed) this long for the next call
CPU = 4.0  # cores: the evaluator, its pre-started workers and torch.compile's compile workers
MEMORY_MIB = 16384  # each worker holds torch and a CUDA context (~1 GiB); Modal's default is 128 MiB
MAX_CONTAINERS = 8  # one process's (or, divided, one sweep's) widest fan-out: OKGIT_MODAL_MAX_CONTAINERS
MAX_CONTAINERS_ENV = "OKGIT_MODAL_MAX_CONTAINERS"
MIN_PYTHON = (3, 11)  # Modal's current image builder (2026.10) has no Python 3.10
MIN_MODAL = (1, 0)
# A CUDA toolkit image tag on Docker Hub per CUDA major.minor; a minor missing here takes <minor>.0,
# the first release of that minor: never another major's toolkit (torch's extension builder refuses it).
CUDA_TAGS = {"11.8": "11.8.0", "12.1": "12.1.1", "12.4": "12.4.1", "12.6": "12.6.3", "12.8": "12.8.1",
             "12.9": "12.9.1", "13.0": "13.0.1"}
# A CPU-only local torch has no CUDA of its own: the image installs the same version's build for this
# CUDA from the PyTorch index (one that exists for that release), and the toolkit of the same CUDA.
CPU_TORCH_CUDA = {"2.4": "12.4", "2.5": "12.4", "2.6": "12.6", "2.7": "12.8", "2.8": "12.8"}
NEWEST_TORCH_CUDA = "13.0"  # torch 2.9 and later
TORCH_INDEX = "https://download.pytorch.org/whl"
MAX_PROBLEM_FILES_BYTES = 4 << 20  # the op's sibling modules shipped along with it

MISSING_MODAL = "--eval modal needs the modal package: pip install 'okgit[modal]'"
MISSING_AUTH = ("Modal is not authenticated: run `modal setup` (it writes ~/.modal.toml) "
                "or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET")


# --- authentication, where the modal client looks for it -------------------------------------------


def has_credentials(environ: Mapping[str, str] | None = None) -> bool:
    """A token pair or an OAuth login, from MODAL_* variables or the chosen profile of ~/.modal.toml.

    The profile is MODAL_PROFILE, else the one marked `active = true`, else "default": the
    client's own rules, read here without importing modal or touching the network. An OAuth
    login (`modal setup` with OAuth) is a refresh token, a client id and one client secret or
    JWT key.
    """
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    path = Path(env.get("MODAL_CONFIG_PATH") or Path(home) / ".modal.toml")
    try:
        import tomllib

        profiles = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        profiles = {}
    active = [name for name, values in profiles.items() if isinstance(values, dict) and values.get("active") is True]
    profile = profiles.get(env.get("MODAL_PROFILE") or (active[0] if active else "default"), {})
    profile = profile if isinstance(profile, dict) else {}

    def setting(key: str) -> Any:
        return env.get(f"MODAL_{key.upper()}") or profile.get(key)

    if setting("token_id") and setting("token_secret"):
        return True
    oauth_secret = bool(setting("oauth_client_secret")) != bool(setting("oauth_jwt_key"))
    return bool(setting("oauth_refresh_token") and setting("oauth_client_id") and oauth_secret)


def require_modal():
    """The modal module, or one clear OkgitError naming what is missing."""
    if sys.version_info[:2] < MIN_PYTHON:
        raise OkgitError(f"--eval modal needs Python {'.'.join(map(str, MIN_PYTHON))} or newer (this is "
                         f"{sys.version_info.major}.{sys.version_info.minor}): Modal's image builder has no "
                         "older Python, and the container runs the same Python as okgit")
    try:
        import modal
    except ImportError:
        raise OkgitError(MISSING_MODAL) from None
    if _version_tuple(getattr(modal, "__version__", "0")) < MIN_MODAL:
        raise OkgitError(f"--eval modal needs modal 1.0 or newer (this is {modal.__version__}): "
                         "pip install -U 'okgit[modal]'")
    if not has_credentials():
        raise OkgitError(MISSING_AUTH)
    return modal


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:2])


# --- the versions the image installs ---------------------------------------------------------------


@dataclass(frozen=True)
class Stack:
    """What the image installs: Python, a CUDA toolkit, torch (with triton: its own layer) and the rest."""

    python: str
    cuda: str  # major.minor of the toolkit, the CUDA torch is built for
    torch: tuple[str, ...]  # the torch layer: torch, and triton when pinned
    index: str | None  # the PyTorch index serving that torch build
    rest: tuple[str, ...]  # pydantic, numpy: a layer of their own, so a change there keeps torch's


def requirement_version(requires: list[str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, version) of the first `name==version` requirement among `names` (Linux markers or none)."""
    for req in requires:
        spec, _, marker = req.partition(";")
        if "extra ==" in marker or ("platform_system" in marker and "Linux" not in marker):
            continue
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[[^\]]*\])?\s*==\s*([^\s,;]+)\s*$", spec)
        if m and m.group(1).lower().replace("_", "-") in names:
            return m.group(1), m.group(2)
    return None


def torch_cuda(torch_version: str, built_cuda: str | None, requires: list[str]) -> str:
    """The CUDA major.minor of the torch the image installs.

    A CUDA build: its CUDA requirement (nvidia-cuda-runtime-cuXX / cuda-toolkit ==X.Y.Z), else the
    CUDA it was built with. A CPU build: the CUDA whose build of that version the image installs.
    """
    if built_cuda:
        found = requirement_version(requires, ("cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu11",
                                               "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13"))
        version = found[1] if found and found[1].split(".")[0] == built_cuda.split(".")[0] else built_cuda
        return ".".join(version.split(".")[:2])
    minor = ".".join(torch_version.split("+")[0].split(".")[:2])
    return CPU_TORCH_CUDA.get(minor, NEWEST_TORCH_CUDA)


def image_stack(torch_version: str, built_cuda: str | None, requires: list[str], local_triton: str | None,
                others: Mapping[str, str], python: str) -> Stack:
    """The pins for a user's environment (pure: tests give it CUDA 12, CUDA 13 and CPU torches).

    triton follows torch's own requirement: the installed metadata of a CUDA build; for a CPU build
    (whose metadata pins no triton, and whose local triton is only what pip picked for it) triton is
    left to pip, which takes it from the metadata of the CUDA build installed in the image.
    """
    cuda = torch_cuda(torch_version, built_cuda, requires)
    base, _, local = torch_version.partition("+")
    variant = "cu" + cuda.replace(".", "")
    if built_cuda:
        triton = requirement_version(requires, ("triton", "pytorch-triton"))
        pins = [f"torch=={torch_version}"] + ([f"{triton[0]}=={triton[1]}"] if triton
                                              else [f"triton=={local_triton}"] if local_triton else [])
        index = f"{TORCH_INDEX}/{local}" if local else None  # a plain version: PyPI's wheel is that build
    else:
        pins, index = [f"torch=={base}+{variant}"], f"{TORCH_INDEX}/{variant}"
    return Stack(python=python, cuda=cuda, torch=tuple(pins), index=index,
                 rest=tuple(f"{name}=={version}" for name, version in sorted(others.items())))


def local_stack() -> Stack:
    """image_stack() of this environment."""
    from importlib import metadata

    import numpy
    import pydantic
    import torch

    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        requires = []
    try:
        import triton

        local_triton = triton.__version__
    except ImportError:
        local_triton = None
    return image_stack(torch.__version__, torch.version.cuda, requires, local_triton,
                       {"numpy": numpy.__version__, "pydantic": pydantic.VERSION},
                       f"{sys.version_info.major}.{sys.version_info.minor}")


def cuda_image_tag(cuda: str) -> str:
    major_minor = ".".join(cuda.split(".")[:2])
    return f"nvidia/cuda:{CUDA_TAGS.get(major_minor, major_minor + '.0')}-devel-ubuntu22.04"


# --- the image and the app -------------------------------------------------------------------------


def build_image(cuda_image: str | None = None, stack: Stack | None = None):
    modal = require_modal()
    stack = stack or local_stack()
    # the same Python (a serialized function needs it); nvcc of torch's CUDA for the CUDA backend
    image = modal.Image.from_registry(cuda_image or cuda_image_tag(stack.cuda), add_python=stack.python)
    image = image.pip_install(*stack.torch, extra_index_url=stack.index)  # the big layer, cached on its own
    image = image.pip_install(*stack.rest)
    image = image.env({"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    # okgit's package data (prompts, templates, data) travels too, not only its .py files.
    return image.add_local_python_source("okgit", ignore=["**/__pycache__/**", "**/*.pyc"])


def fingerprint(cuda_image: str | None = None, stack: Stack | None = None) -> str:
    """What the remote code depends on: okgit's source, the pinned versions, Python, the CUDA image."""
    stack = stack or local_stack()
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(repr((stack, cuda_image or cuda_image_tag(stack.cuda))).encode())
    return h.hexdigest()[:12]


def function_name(cuda_image: str | None = None, stack: Stack | None = None) -> str:
    return f"evaluate-{fingerprint(cuda_image, stack)}"


def max_containers_setting(environ: Mapping[str, str] | None = None) -> int:
    """OKGIT_MODAL_MAX_CONTAINERS (a sweep sets it to its share of the limit), else MAX_CONTAINERS."""
    value = (os.environ if environ is None else environ).get(MAX_CONTAINERS_ENV, "")
    if not value:
        return MAX_CONTAINERS
    if not value.strip().isdigit() or int(value) < 1:
        raise OkgitError(f"{MAX_CONTAINERS_ENV}={value!r}: expected a whole number of containers, at least 1")
    return int(value)


def worst_case_call_s(timeout_s: int = TIMEOUT_S, retries: int = RETRIES) -> int:
    """The most container seconds one call can bill: every attempt starting as slowly as allowed and
    running to Modal's limit, then idling SCALEDOWN_S (docs/modal.md, "What it costs")."""
    return (STARTUP_TIMEOUT_S + timeout_s) * (1 + retries) + SCALEDOWN_S


def function_options(gpu: str, *, timeout_s: int = TIMEOUT_S, retries: int = RETRIES,
                     max_containers: int | None = None) -> dict[str, Any]:
    """The GPU function's settings, apart from its image (kept apart so tests can read them)."""
    modal = require_modal()
    return {
        "gpu": gpu,
        "timeout": timeout_s,
        "startup_timeout": STARTUP_TIMEOUT_S,
        "retries": modal.Retries(max_retries=retries, initial_delay=2.0, backoff_coefficient=2.0),
        "max_containers": max_containers or max_containers_setting(),
        "scaledown_window": SCALEDOWN_S,
        "cpu": CPU,
        "memory": MEMORY_MIB,
        "block_network": True,  # candidate code is untrusted
        "restrict_modal_access": True,  # ... and must not reach Modal's API from inside
        "serialized": True,  # defined at run time (GPU chosen by the user); pickled by reference to okgit
    }


def build_app(gpu: str, *, cuda_image: str | None = None, timeout_s: int = TIMEOUT_S, retries: int = RETRIES,
              max_containers: int | None = None, stack: Stack | None = None):
    """The app and its one GPU function (remote_job). Builds definitions only: no network."""
    modal = require_modal()
    stack = stack or local_stack()
    app = modal.App(APP_NAME, include_source=False)  # okgit's source is in the image already
    options = function_options(gpu, timeout_s=timeout_s, retries=retries, max_containers=max_containers)
    fn = app.function(image=build_image(cuda_image, stack), name=function_name(cuda_image, stack), **options)(remote_job)
    return app, fn


def __getattr__(name: str):
    """`modal deploy -m okgit.eval.modal` finds `app` here (GPU from okgit's settings, e.g. OKGIT_MODAL_GPU)."""
    if name == "app":
        from okgit.config import load_config

        return build_app(load_config(None).modal_gpu)[0]
    raise AttributeError(name)


# --- the GPU function's body: plain data in, plain data out ----------------------------------------


def problem_payload(problem: Problem) -> dict[str, Any]:
    """The problem as plain data, with the op's sibling .py files (its own imports) beside it."""
    files: dict[str, str] = {}
    total = 0
    if problem.root and Path(problem.root).is_dir():
        for path in sorted(Path(problem.root).glob("*.py")):
            size = path.stat().st_size
            if total + size > MAX_PROBLEM_FILES_BYTES:
                break
            files[path.name] = path.read_text(errors="replace")
            total += size
    return {
        "path": problem.path, "source": problem.source, "knobs": dict(problem.knobs),
        "atol": problem.atol, "rtol": problem.rtol,
        "extra_shapes": [list(map(list, shape)) for shape in problem.extra_shapes] if problem.extra_shapes else None,
        "files": files,
    }


def _problem_from(data: dict[str, Any], root: Path) -> Problem:
    for name, text in data.get("files", {}).items():
        (root / Path(name).name).write_text(text)
    shapes = data.get("extra_shapes")
    return Problem(
        path=data["path"], source=data["source"], root=str(root), knobs=dict(data.get("knobs") or {}),
        atol=data.get("atol"), rtol=data.get("rtol"),
        extra_shapes=tuple(tuple((k, int(v)) for k, v in shape) for shape in shapes) if shapes else None,
    )


_EVALUATORS: dict[str, Any] = {}  # per device, kept while the container stays warm
_JOBS_RUN = 0  # in this container: the first job is the one that started it
_STUCK = False  # a job ran past its kind's limit here: this container takes no more


def _evaluator(device: str):
    """One LocalEvaluator per container and device: a warm container keeps its prepared
    references, so a problem's reference runs once rather than once per candidate. Candidates
    still each get a fresh worker process, as locally."""
    from okgit.eval.local import LocalEvaluator

    _make_importable()  # before any worker starts, pre-started ones included
    if device not in _EVALUATORS:
        _EVALUATORS[device] = LocalEvaluator(device=device)
    return _EVALUATORS[device]


def _make_importable() -> None:
    """Workers start in a temporary directory with a scrubbed environment that keeps PYTHONPATH:
    put okgit's directory (/root in the image) on it, or they could not import okgit."""
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def remote_job(payload: dict[str, Any]) -> dict[str, Any]:
    """One evaluator call on this machine's GPU; never raises, so Modal never retries a job's failure.

    Returns {"result": ...}, {"okgit_error": message} (the user's error, e.g. a reference that does
    not run) or {"failed": message} (anything else, a job past its kind's limit included), with
    "job_s" (its seconds here) and "cold_start" (whether it was this container's first job).
    Runs in the Modal container; tests call it in-process (with payload["device"] = "cpu").
    """
    global _JOBS_RUN, _STUCK
    started = time.monotonic()
    cold, _JOBS_RUN = _JOBS_RUN == 0, _JOBS_RUN + 1
    kind = payload.get("kind")
    limit = float(payload.get("limit_s") or KIND_TIMEOUT_S.get(str(kind), min(KIND_TIMEOUT_S.values())))
    out: dict[str, Any] = {}
    if _STUCK:
        out = {"failed": "this container's evaluator is stuck on an earlier job"}
    else:
        thread = threading.Thread(target=lambda: out.update(_job(payload)), daemon=True)
        thread.start()
        thread.join(limit)
        if thread.is_alive():  # the evaluator hangs beyond its own worker limits: give the GPU back
            _STUCK = True
            _stop_container()
            out = {"failed": f"the {kind} job ran past its {limit:.0f} s limit"}
    return {**out, "job_s": round(time.monotonic() - started, 3), "cold_start": cold,
            **({"index": payload["index"]} if "index" in payload else {})}  # where a batch's output goes


def _job(payload: dict[str, Any]) -> dict[str, Any]:
    try:
        kind = payload["kind"]
        device = payload.get("device", "cuda")
        if kind == "baselines":
            return {"result": remote_baselines(payload["ref_source"], payload.get("source"), device,
                                               backend=payload.get("backend") or "triton").model_dump(mode="json")}
        problem = _problem_from(payload["problem"], _problem_dir(payload["problem"]))
        evaluator = _evaluator(device)
        if kind == "reference":
            result: Any = evaluator.reference(problem)
        elif kind == "evaluate":
            result = evaluator.evaluate(problem, payload["source"], mode=payload["mode"], backend=payload["backend"])
        elif kind == "compare":
            result = evaluator.compare(problem, payload["source"], rounds=payload["rounds"], backend=payload["backend"])
        else:
            raise OkgitError(f"unknown job kind {kind!r}")
        return {"result": result.model_dump(mode="json")}
    except OkgitError as e:  # e.g. the reference itself does not run: the user's error, said once
        return {"okgit_error": str(e)}
    except BaseException as e:  # noqa: BLE001 - returned, not raised: Modal must not retry it
        return {"failed": f"{type(e).__name__}: {_first_line(e)}"}


def _problem_dir(data: dict[str, Any]) -> Path:
    """One directory per problem, named by its content, kept while the container lives: the
    local evaluator's prepared reference is keyed by (source, root, ...) and is reused."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"okgit-modal-{digest}"
    root.mkdir(exist_ok=True)
    return root


def _stop_container() -> None:
    """Ask Modal for no more inputs in this container (it exits after this one); nothing locally."""
    try:
        import modal

        if not modal.is_local():
            modal.experimental.stop_fetching_inputs()
    except Exception:  # noqa: BLE001 - the per-call TIMEOUT_S still ends it
        pass


# --- the sweep's baselines, through the sandboxed worker -------------------------------------------

COMPILE_ARM = '''

# okgit bench: the torch.compile baseline, the reference compiled in place
class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.compile()
'''
BASELINE_ROUNDS = 3  # interleaved, each arm in a fresh worker per round


def remote_baselines(ref_source: str, winner_source: str | None, device: str = "cuda", *,
                     backend: str = "triton"):
    """Eager, torch.compile and the winner timed as candidates are: each arm in the evaluator's
    sandboxed worker (scrubbed environment, its own process, time-limited), never in this
    process. The winner is checked again by the evaluator first. A failure is an arm's missing
    time (`errors`), as `okgit.kernelbench.baselines` reports it locally."""
    from okgit.kernelbench.baselines import BaselineTimes

    root = _problem_dir({"baselines": ref_source})
    (root / "reference.py").write_text(ref_source)
    evaluator = _evaluator(device)
    result = BaselineTimes(device=evaluator.device, timed=False)
    try:
        problem = load_problem("reference.py", source=ref_source, root=str(root))
        prep = evaluator.prepared(problem, "fast")
    except OkgitError as e:
        result.errors["all"] = str(e)
        return result
    arms = {"eager": (ref_source, "torch"), "compile": (ref_source + COMPILE_ARM, "torch")}
    if winner_source is not None:
        check = evaluator.evaluate(problem, winner_source, mode="fast", backend=backend)
        why = f"{check.error.gate}: {_one_line(check.error.message)}" if check.error else check.status.value
        if check.status is Status.incorrect:  # a wrong answer here: never scored as a correct kernel
            result.disagreement = why[:300]
        elif check.status is not Status.correct:  # rejected, or the worker died: no figure for it
            result.errors["okgit"] = f"the winner's check here ended {check.status.value}: {why}"[:300]
        arms["okgit"] = (winner_source, backend)
    if device == "cpu":
        result.errors["all"] = "no GPU: timing is not claimed"
        return result
    from okgit.eval.jobs import PINNED_FLAGS

    result.timed, result.flags = True, dict(PINNED_FLAGS)
    samples: dict[str, list[float]] = {arm: [] for arm in arms if arm not in result.errors}
    for _ in range(BASELINE_ROUNDS):
        for arm in list(samples):
            source, arm_backend = arms[arm]
            try:
                samples[arm].append(evaluator.time_once(problem, prep, source, arm_backend, root=str(root)))
            except OkgitError as e:  # that baseline is missing, not zero
                result.errors[arm] = _first_line(e)[:300]
                del samples[arm]
    import statistics

    times = {arm: statistics.median(ts) for arm, ts in samples.items() if ts}
    result.eager_us, result.compile_us, result.okgit_us = times.get("eager"), times.get("compile"), times.get("okgit")
    return result


# --- the evaluator ---------------------------------------------------------------------------------


class ModalEvaluator(EvaluatorBase):
    """The Evaluator protocol on a Modal GPU; a batch's candidates fan out with `.map` in
    `evaluate_many`, up to `width` (the container limit) at once."""

    def __init__(self, gpu: str = "H100", *, cuda_image: str | None = None, timeout_s: int = TIMEOUT_S,
                 retries: int = RETRIES, max_containers: int | None = None) -> None:
        require_modal()  # fail before any run starts, in one line
        self.gpu = gpu
        self.device = f"modal:{gpu}"  # every result's device, failed ones included
        self.width = max_containers or max_containers_setting()
        self._options = {"cuda_image": cuda_image, "timeout_s": timeout_s, "retries": retries,
                         "max_containers": self.width}
        self._lock = threading.Lock()
        self._fn = None
        self._running = None  # the ephemeral app's context, when no deployed function matches

    # The Evaluator protocol.

    def reference(self, problem: Problem) -> Reference:
        out = self._result(self._call({"kind": "reference", "problem": problem_payload(problem)}), "reference")
        return Reference.model_validate({**out, "device": self.device})

    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        return self.evaluate_many(problem, [source], mode=mode, backend=backend)[0]

    def compare(self, problem: Problem, source: str, *, rounds: int = 5, backend: str = "triton") -> Comparison:
        payload = {"kind": "compare", "problem": problem_payload(problem), "source": source, "rounds": rounds,
                   "backend": backend}
        return Comparison.model_validate(self._result(self._call(payload), "compare"))

    # Beyond the protocol.

    def evaluate_many(self, problem: Problem, sources: list[str], *, mode: Mode = "fast",
                      backend: str = "triton") -> list[EvalResult]:
        """Every candidate in its own call of one `.map`, at most `width` containers at once (the
        function's `max_containers`; Modal queues the rest); results in the order of `sources`.

        Outputs are read as they arrive (`order_outputs=False`), so each candidate's `queue_s`
        is its own wait, not the wait for the candidates before it; the echoed `index` puts
        each back in place. A call that never returned (its container lost after the retry)
        comes back as an exception without an index: it is the error of an input left
        unanswered, in input order.
        """
        data = problem_payload(problem)
        payloads = [{"kind": "evaluate", "problem": data, "source": s, "mode": mode, "backend": backend, "index": i}
                    for i, s in enumerate(sources)]
        if not payloads:
            return []
        fn = self._function()
        submitted = time.monotonic()
        answered: dict[int, tuple[dict[str, Any], float]] = {}
        lost: list[tuple[BaseException, float]] = []
        try:
            for out in fn.map(payloads, return_exceptions=True, order_outputs=False):
                elapsed = time.monotonic() - submitted
                if isinstance(out, dict) and isinstance(out.get("index"), int) and 0 <= out["index"] < len(payloads):
                    answered[out["index"]] = (out, elapsed)
                else:
                    lost.append((out if isinstance(out, BaseException) else RuntimeError(f"no index in {out!r:.80}"),
                                 elapsed))
        except Exception as e:  # noqa: BLE001 - raised, not returned: the service failed (auth, connection), not a candidate
            raise OkgitError(f"Modal: {type(e).__name__}: {_first_line(e)}") from None
        unanswered = iter(lost)
        missing = (RuntimeError("no output came back"), time.monotonic() - submitted)
        results = []
        for i in range(len(payloads)):
            out, elapsed = answered.get(i) or next(unanswered, missing)
            results.append(self._eval_result(out, mode, elapsed))
        return results

    def time_baselines(self, ref_source: str, winner_source: str | None, *, backend: str = "triton"):
        """Eager, torch.compile and the winner (if any) timed in one container (for `okgit bench
        kernelbench`), each arm in a sandboxed worker there. Any failure, Modal's included, leaves
        the times out with the reason (the sweep's `untimed_reason`), never the problem's result."""
        from okgit.kernelbench.baselines import BaselineTimes

        payload = {"kind": "baselines", "ref_source": ref_source, "source": winner_source, "backend": backend}
        try:
            out = self._call(payload)
            times = BaselineTimes.model_validate(self._result(out, "baselines"))
        except OkgitError as e:
            return BaselineTimes(device=self.device, timed=False, errors={"all": str(e)})
        return times.model_copy(update={"device": self.device})

    def close(self) -> None:
        with self._lock:
            if self._running is not None:
                try:
                    self._running.__exit__(None, None, None)
                except Exception:  # noqa: BLE001 - at exit, the app stops with the process anyway
                    pass
                self._running = None
            self._fn = None

    # Plumbing.

    def _function(self):
        with self._lock:
            if self._fn is None:
                self._fn = self._deployed() or self._ephemeral()
            return self._fn

    def _deployed(self):
        modal = require_modal()
        try:
            fn = modal.Function.from_name(APP_NAME, function_name(self._options["cuda_image"]))
            fn.hydrate()
        except modal.exception.NotFoundError:
            return None
        except Exception as e:  # noqa: BLE001 - any failure of Modal's client is said in one line
            raise OkgitError(f"Modal: {type(e).__name__}: {_first_line(e)}") from None
        return fn.with_options(gpu=self.gpu)

    def _ephemeral(self):
        modal = require_modal()
        try:
            stack = local_stack()
            app, fn = build_app(self.gpu, stack=stack, **self._options)
            stamp = _build_stamp(function_name(self._options["cuda_image"], stack))
        except OkgitError:
            raise
        except Exception as e:  # noqa: BLE001 - e.g. no triton or torch to read versions from: one line, not a traceback
            raise OkgitError(f"Modal: could not define the app: {type(e).__name__}: {_first_line(e)}") from None
        first = not stamp.exists()
        print(f"okgit: starting a Modal app on {self.gpu}"
              + (" (the first run builds the image, shown below: minutes)" if first else ""), file=sys.stderr)
        running = app.run()
        try:
            if first:  # the build's progress and log, so a failure is never silent
                with modal.enable_output():
                    running.__enter__()
            else:
                running.__enter__()
        except Exception as e:  # noqa: BLE001 - any failure of Modal's client is said in one line
            raise OkgitError(_start_error(e)) from None
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
        self._running = running
        atexit.register(self.close)
        return fn

    def _call(self, payload: dict[str, Any]) -> dict[str, Any]:
        submitted = time.monotonic()
        try:
            out = self._function().remote(payload)
        except OkgitError:
            raise
        except Exception as e:  # noqa: BLE001 - after Modal's retries: the service, not the op, failed
            raise OkgitError(f"Modal: {type(e).__name__}: {_first_line(e)}") from None
        return {**out, "round_trip_s": time.monotonic() - submitted}

    def _result(self, out: dict[str, Any], what: str | None = None) -> dict[str, Any]:
        if "okgit_error" in out:
            raise OkgitError(out["okgit_error"])
        if "failed" in out:
            raise OkgitError(f"Modal: the {what or 'remote'} job failed in the container: {out['failed']}")
        return out["result"]

    def _eval_result(self, out: Any, mode: Mode, elapsed: float) -> EvalResult:
        if isinstance(out, BaseException) or "failed" in out:
            # The container died on this candidate after retries, or the job failed there (the
            # reference ran fine): the candidate is marked `error` and the search goes on, as with
            # a local worker crash.
            why = f"{type(out).__name__}: {_first_line(out)}" if isinstance(out, BaseException) else out["failed"]
            return EvalResult(status=Status.error, mode=mode, device=self.device, queue_s=round(elapsed, 3),
                              error=EvalError(gate="modal", message=f"the Modal call failed: {why}"))
        if "okgit_error" in out:
            raise OkgitError(out["okgit_error"])
        result = EvalResult.model_validate(out["result"])
        queue = max(0.0, elapsed - float(out.get("job_s") or 0.0))
        return result.model_copy(update={"device": self.device, "queue_s": round(queue, 3),
                                         "cold_start": out.get("cold_start")})


def _build_stamp(name: str) -> Path:
    """Marks an image this machine has seen built (its first build is shown in full)."""
    from okgit.paths import data_dir

    return data_dir() / "modal" / f"{name}.built"


def _start_error(e: BaseException) -> str:
    """One line for a failed start; an image build's whole error is kept in a file it names."""
    text = str(e).strip() or type(e).__name__
    if type(e).__name__ != "ImageBuildError":
        return f"Modal: could not start the app: {type(e).__name__}: {_first_line(e)}"
    from okgit.paths import data_dir

    log = data_dir() / "modal" / "image-build-error.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text + "\n")
    image = re.search(r"\bim-[A-Za-z0-9]+", text)
    hint = f"`modal image logs {image.group(0)}`" if image else "`modal image logs <image id>`"
    return f"Modal: the image build failed: {_first_line(e)} (whole error in {log}; build log: {hint})"


def _one_line(text: str) -> str:
    """A message on one line: its first line, and its last (a traceback's exception) when they differ."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ... ".join(dict.fromkeys([lines[0], lines[-1]])) if lines else "no message"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "no message"
