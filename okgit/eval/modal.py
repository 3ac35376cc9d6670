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
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from okgit.errors import OkgitError
from okgit.eval.types import Comparison, EvalError, EvalResult, Mode, Reference, Status
from okgit.problem import Problem

APP_NAME = "okgit-eval"
TIMEOUT_S = 1800  # one call; the worker's own limits (per candidate, per hang) sit well inside it
RETRIES = 2  # container-level failures (preemption, a lost worker); a candidate's own errors are results
MAX_CONTAINERS = 8  # the widest `.map` fan-out, so one sweep cannot scale to an unbounded bill
# torch.version.cuda (major.minor) -> a CUDA toolkit image tag that exists on Docker Hub.
CUDA_TAGS = {"11.8": "11.8.0", "12.1": "12.1.1", "12.4": "12.4.1", "12.6": "12.6.3", "12.8": "12.8.1",
             "12.9": "12.9.1", "13.0": "13.0.1"}
DEFAULT_CUDA = "12.8"  # when the local torch is a CPU build: PyPI's Linux torch wheels target CUDA 12.x
MAX_PROBLEM_FILES_BYTES = 4 << 20  # the op's sibling modules shipped along with it

MISSING_MODAL = "--eval modal needs the modal package: pip install 'okgit[modal]'"
MISSING_AUTH = ("Modal is not authenticated: run `modal setup` (it writes ~/.modal.toml) "
                "or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET")


# --- authentication, where the modal client looks for it -------------------------------------------


def has_credentials(environ: Mapping[str, str] | None = None) -> bool:
    """MODAL_TOKEN_ID/MODAL_TOKEN_SECRET, else the chosen profile of ~/.modal.toml (or MODAL_CONFIG_PATH).

    The profile is MODAL_PROFILE, else the one marked `active = true`, else "default": the
    client's own rules, read here without importing modal or touching the network.
    """
    env = os.environ if environ is None else environ
    if env.get("MODAL_TOKEN_ID") and env.get("MODAL_TOKEN_SECRET"):
        return True
    home = env.get("HOME") or os.path.expanduser("~")
    path = Path(env.get("MODAL_CONFIG_PATH") or Path(home) / ".modal.toml")
    try:
        import tomllib

        profiles = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return False
    active = [name for name, values in profiles.items() if isinstance(values, dict) and values.get("active") is True]
    profile = profiles.get(env.get("MODAL_PROFILE") or (active[0] if active else "default"), {})
    token_id = env.get("MODAL_TOKEN_ID") or profile.get("token_id")
    token_secret = env.get("MODAL_TOKEN_SECRET") or profile.get("token_secret")
    return bool(token_id and token_secret)


def require_modal():
    """The modal module, or one clear OkgitError naming what is missing."""
    try:
        import modal
    except ImportError:
        raise OkgitError(MISSING_MODAL) from None
    if not has_credentials():
        raise OkgitError(MISSING_AUTH)
    return modal


# --- the image and the app -------------------------------------------------------------------------


def cuda_image_tag(cuda: str | None) -> str:
    major_minor = ".".join((cuda or DEFAULT_CUDA).split(".")[:2])
    version = CUDA_TAGS.get(major_minor, CUDA_TAGS[DEFAULT_CUDA])
    return f"nvidia/cuda:{version}-devel-ubuntu22.04"


def pip_packages() -> tuple[list[str], str | None]:
    """Pins matching the user's environment, and the extra index that serves their torch build."""
    import numpy
    import pydantic
    import torch
    import triton

    local = torch.__version__.split("+")
    if torch.version.cuda and len(local) == 2:  # a CUDA build such as 2.6.0+cu124: the same build
        torch_pin, index = f"torch=={torch.__version__}", f"https://download.pytorch.org/whl/{local[1]}"
    else:  # a CPU build (or a plain version): PyPI's Linux wheel of that version carries CUDA
        torch_pin, index = f"torch=={local[0]}", None
    pins = [torch_pin, f"triton=={triton.__version__}", f"pydantic=={pydantic.VERSION}", f"numpy=={numpy.__version__}"]
    return pins, index


def build_image(cuda_image: str | None = None):
    modal = require_modal()
    import torch

    python = f"{sys.version_info.major}.{sys.version_info.minor}"  # serialized functions need the same Python
    pins, index = pip_packages()
    image = modal.Image.from_registry(cuda_image or cuda_image_tag(torch.version.cuda), add_python=python)
    image = image.pip_install(*pins, extra_index_url=index) if index else image.pip_install(*pins)
    image = image.env({"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    # okgit's package data (prompts, templates, data) travels too, not only its .py files.
    return image.add_local_python_source("okgit", ignore=["**/__pycache__/**", "**/*.pyc"])


def fingerprint(cuda_image: str | None = None) -> str:
    """What the remote code depends on: okgit's source, the pinned versions, Python, the CUDA image."""
    import torch

    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    pins, index = pip_packages()
    h.update(repr((pins, index, sys.version_info[:2], cuda_image or cuda_image_tag(torch.version.cuda))).encode())
    return h.hexdigest()[:12]


def function_name(cuda_image: str | None = None) -> str:
    return f"evaluate-{fingerprint(cuda_image)}"


def function_options(gpu: str, *, timeout_s: int = TIMEOUT_S, retries: int = RETRIES,
                     max_containers: int = MAX_CONTAINERS) -> dict[str, Any]:
    """The GPU function's settings, apart from its image (kept apart so tests can read them)."""
    modal = require_modal()
    return {
        "gpu": gpu,
        "timeout": timeout_s,
        "retries": modal.Retries(max_retries=retries, initial_delay=2.0, backoff_coefficient=2.0),
        "max_containers": max_containers,
        "block_network": True,  # candidate code is untrusted
        "restrict_modal_access": True,  # ... and must not reach Modal's API from inside
        "serialized": True,  # defined at run time (GPU chosen by the user); pickled by reference to okgit
    }


def build_app(gpu: str, *, cuda_image: str | None = None, timeout_s: int = TIMEOUT_S, retries: int = RETRIES,
              max_containers: int = MAX_CONTAINERS):
    """The app and its one GPU function (remote_job). Builds definitions only: no network."""
    modal = require_modal()
    app = modal.App(APP_NAME, include_source=False)  # okgit's source is in the image already
    options = function_options(gpu, timeout_s=timeout_s, retries=retries, max_containers=max_containers)
    fn = app.function(image=build_image(cuda_image), name=function_name(cuda_image), **options)(remote_job)
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


def _evaluator(device: str):
    """One LocalEvaluator per container and device: a warm container keeps its prepared
    references, so a problem's reference runs once rather than once per candidate. Candidates
    still each get a fresh worker process, as locally."""
    from okgit.eval.local import LocalEvaluator

    if device not in _EVALUATORS:
        _EVALUATORS[device] = LocalEvaluator(device=device)
    return _EVALUATORS[device]


def remote_job(payload: dict[str, Any]) -> dict[str, Any]:
    """One evaluator call on this machine's GPU. Returns {"result": ...} or {"okgit_error": message}.

    Runs in the Modal container; tests call it in-process (with payload["device"] = "cpu").
    """
    kind = payload["kind"]
    device = payload.get("device", "cuda")
    try:
        if kind == "baselines":
            from okgit.kernelbench.baselines import measure

            result: Any = measure(payload["ref_source"], payload.get("source"), device="cuda:0" if device == "cuda" else device)
            return {"result": result.model_dump(mode="json")}
        # One directory per problem, named by its content, kept while the container lives: the
        # local evaluator's prepared reference is keyed by (source, root, ...) and is reused.
        digest = hashlib.sha256(json.dumps(payload["problem"], sort_keys=True).encode()).hexdigest()[:16]
        root = Path(tempfile.gettempdir()) / f"okgit-modal-{digest}"
        root.mkdir(exist_ok=True)
        problem = _problem_from(payload["problem"], root)
        evaluator = _evaluator(device)
        if kind == "reference":
            result = evaluator.reference(problem)
        elif kind == "evaluate":
            result = evaluator.evaluate(problem, payload["source"], mode=payload["mode"], backend=payload["backend"])
        elif kind == "compare":
            result = evaluator.compare(problem, payload["source"], rounds=payload["rounds"], backend=payload["backend"])
        else:
            raise OkgitError(f"unknown job kind {kind!r}")
        return {"result": result.model_dump(mode="json")}
    except OkgitError as e:  # e.g. the reference itself does not run: the user's error, said once
        return {"okgit_error": str(e)}


# --- the evaluator ---------------------------------------------------------------------------------


class ModalEvaluator:
    """The Evaluator protocol on a Modal GPU; candidates fan out with `.map` in `evaluate_many`."""

    def __init__(self, gpu: str = "H100", *, cuda_image: str | None = None, timeout_s: int = TIMEOUT_S,
                 retries: int = RETRIES, max_containers: int = MAX_CONTAINERS) -> None:
        require_modal()  # fail before any run starts, in one line
        self.gpu = gpu
        self.device = f"modal:{gpu}"
        self._options = {"cuda_image": cuda_image, "timeout_s": timeout_s, "retries": retries,
                         "max_containers": max_containers}
        self._lock = threading.Lock()
        self._fn = None
        self._running = None  # the ephemeral app's context, when no deployed function matches

    # The Evaluator protocol.

    def reference(self, problem: Problem) -> Reference:
        return Reference.model_validate(self._call({"kind": "reference", "problem": problem_payload(problem)}))

    def evaluate(self, problem: Problem, source: str, *, mode: Mode = "fast", backend: str = "triton") -> EvalResult:
        return self.evaluate_many(problem, [source], mode=mode, backend=backend)[0]

    def compare(self, problem: Problem, source: str, *, rounds: int = 5, backend: str = "triton") -> Comparison:
        payload = {"kind": "compare", "problem": problem_payload(problem), "source": source, "rounds": rounds,
                   "backend": backend}
        return Comparison.model_validate(self._call(payload))

    # Beyond the protocol.

    def evaluate_many(self, problem: Problem, sources: list[str], *, mode: Mode = "fast",
                      backend: str = "triton") -> list[EvalResult]:
        """Every candidate in its own container call, concurrently; results in input order."""
        data = problem_payload(problem)
        payloads = [{"kind": "evaluate", "problem": data, "source": s, "mode": mode, "backend": backend} for s in sources]
        fn = self._function()
        try:
            outs = list(fn.map(payloads, return_exceptions=True, order_outputs=True))
        except Exception as e:  # raised, not returned: the service failed (auth, connection), not a candidate
            raise OkgitError(f"Modal: {type(e).__name__}: {_first_line(e)}") from None
        return [self._eval_result(out, mode) for out in outs]

    def time_baselines(self, ref_source: str, winner_source: str | None):
        """Eager, torch.compile and the winner (if any) timed in one container (for `okgit bench kernelbench`)."""
        from okgit.kernelbench.baselines import BaselineTimes

        return BaselineTimes.model_validate(self._call({"kind": "baselines", "ref_source": ref_source,
                                                        "source": winner_source}))

    def close(self) -> None:
        with self._lock:
            if self._running is not None:
                self._running.__exit__(None, None, None)
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
        except Exception as e:
            raise OkgitError(f"Modal: {type(e).__name__}: {_first_line(e)}") from None
        return fn.with_options(gpu=self.gpu)

    def _ephemeral(self):
        print(f"okgit: starting a Modal app on {self.gpu} (the first run builds the image: minutes)", file=sys.stderr)
        app, fn = build_app(self.gpu, **self._options)
        running = app.run()
        try:
            running.__enter__()
        except Exception as e:
            raise OkgitError(f"Modal: could not start the app: {type(e).__name__}: {_first_line(e)}") from None
        self._running = running
        atexit.register(self.close)
        return fn

    def _call(self, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            out = self._function().remote(payload)
        except OkgitError:
            raise
        except Exception as e:  # after Modal's retries: the service, not the op, failed
            raise OkgitError(f"Modal: {type(e).__name__}: {_first_line(e)}") from None
        if "okgit_error" in out:
            raise OkgitError(out["okgit_error"])
        return out["result"]

    def _eval_result(self, out: Any, mode: Mode) -> EvalResult:
        if isinstance(out, BaseException):
            # The container died on this candidate after retries (the reference ran there fine):
            # the candidate is marked `error` and the search goes on, as with a local worker crash.
            message = f"the Modal call failed: {type(out).__name__}: {_first_line(out)}"
            return EvalResult(status=Status.error, mode=mode, device=self.device,
                              error=EvalError(gate="modal", message=message))
        if "okgit_error" in out:
            raise OkgitError(out["okgit_error"])
        return EvalResult.model_validate(out["result"])


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "no message"
