"""`--eval modal`: the local evaluator's own code, run in a Modal function on a cloud GPU.

The GPU function's body (`remote_job`) is a plain function: it rebuilds the problem from
plain data and calls `LocalEvaluator` inside the container, which spawns the same isolated,
time-limited worker processes as on the user's machine. So an EvalResult from Modal is
the local one, produced on the remote GPU. The image carries the CUDA toolkit (nvcc for
the CUDA backend), the user's versions of torch, triton, pydantic and numpy, and okgit's
source as it is on the user's disk. Candidate code is untrusted: the container has no
network and no access to Modal's API, and no secrets are attached.

By default each okgit process runs an ephemeral app (`app.run()`); Modal caches the image,
so only the first run builds it. `modal deploy -m okgit.eval.modal.client` deploys the same
function under a name that fingerprints okgit's source and the versions, and okgit uses a
deployed function only when its fingerprint matches the local one (never stale code).

This module is the client: ModalEvaluator, the function's settings and the app. The image and
the versions it installs are okgit.eval.modal.image; what runs in the container (remote_job
and its handlers) is okgit.eval.modal.remote, which imports neither of the other two.

`modal` is an optional extra (`pip install 'okgit[modal]'`), imported only when used.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from okgit.errors import OkgitError
from okgit.eval.base import EvaluatorBase
from okgit.eval.modal.image import (
    MIN_MODAL,
    MIN_PYTHON,
    MISSING_AUTH,
    MISSING_MODAL,
    Stack,
    build_image,
    cuda_image_tag,
    fingerprint,
    function_name,
    has_credentials,
    image_stack,
    local_stack,
    require_modal,
    requirement_version,
    torch_cuda,
)
from okgit.eval.modal.remote import (
    KIND_TIMEOUT_S,
    _first_line,
    problem_payload,
    remote_baselines,
    remote_job,
)
from okgit.eval.types import BaselineTimes, Comparison, EvalError, EvalResult, Mode, Reference, Status
from okgit.problem import Problem

# Names other modules, the tests and the docs reach through okgit.eval.modal.client, wherever they live.
__all__ = [
    "APP_NAME", "CPU", "KIND_TIMEOUT_S", "MAX_CONTAINERS", "MAX_CONTAINERS_ENV", "MEMORY_MIB", "MIN_MODAL",
    "MIN_PYTHON", "MISSING_AUTH", "MISSING_MODAL", "RETRIES", "SCALEDOWN_S", "STARTUP_TIMEOUT_S", "TIMEOUT_S",
    "ModalEvaluator", "Stack", "build_app", "build_image", "cuda_image_tag", "fingerprint",
    "function_name", "function_options", "has_credentials", "image_stack", "local_stack", "max_containers_setting",
    "problem_payload", "remote_baselines", "remote_job", "require_modal", "requirement_version", "torch_cuda",
    "worst_case_call_s",
]

APP_NAME = "okgit-eval"
# What one call may cost, bounded (docs/modal.md, "What it costs"). remote_job returns every failure
# as data, so Modal retries only what never returned: a lost container or a call past TIMEOUT_S.
# The in-container limit of each job kind is modal_remote.KIND_TIMEOUT_S.
TIMEOUT_S = max(KIND_TIMEOUT_S.values()) + 60  # Modal's own limit per attempt: the backstop of those
STARTUP_TIMEOUT_S = 600  # a container's start (image pull, Python, imports), billed apart from TIMEOUT_S
RETRIES = 1  # attempts after the first, for lost containers (preemption, a crashed host) only
SERVICE_RETRIES = 2  # a call refused by a transient service error (connection, Modal's own failure) is retried
SERVICE_BACKOFF_S = 1.0  # then 2 s: a blip, not an outage, is what these cover
# $ per GPU-second, from the figures of docs/modal.md "What it costs" (leads, not quotes); a GPU
# not listed is priced only by `modal_usd_per_s` in okgit.toml, else its seconds count $0.
GPU_USD_PER_S = {"B200": 6.25 / 3600, "H100": 3.95 / 3600, "A100-80GB": 2.50 / 3600, "L40S": 1.95 / 3600,
                 "L4": 0.80 / 3600, "T4": 0.59 / 3600}
SCALEDOWN_S = 60  # an idle container is kept (and billed) this long for the next call
CPU = 4.0  # cores: the evaluator, its pre-started workers and torch.compile's compile workers
MEMORY_MIB = 16384  # each worker holds torch and a CUDA context (~1 GiB); Modal's default is 128 MiB
MAX_CONTAINERS = 8  # one process's (or, divided, one sweep's) widest fan-out: OKGIT_MODAL_MAX_CONTAINERS
MAX_CONTAINERS_ENV = "OKGIT_MODAL_MAX_CONTAINERS"


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


# --- the app ---------------------------------------------------------------------------------------


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
    """`modal deploy -m okgit.eval.modal.client` finds `app` here (GPU from okgit's settings, e.g. OKGIT_MODAL_GPU)."""
    if name == "app":
        from okgit.config import load_config

        return build_app(load_config(None).modal_gpu)[0]
    raise AttributeError(name)


# --- the evaluator ---------------------------------------------------------------------------------


class ModalEvaluator(EvaluatorBase):
    """The Evaluator protocol on a Modal GPU; a batch's candidates fan out with `.map` in
    `evaluate_many`, up to `width` (the container limit) at once."""

    def __init__(self, gpu: str = "H100", *, cuda_image: str | None = None, timeout_s: int = TIMEOUT_S,
                 retries: int = RETRIES, max_containers: int | None = None) -> None:
        require_modal()  # fail before any run starts, in one line
        self.gpu = gpu
        self.device = f"modal:{gpu}"  # every result's device, failed ones included
        self.usd_per_s = GPU_USD_PER_S.get(gpu.split(":")[0].upper())  # the search counts GPU-seconds at this price
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
        for attempt in range(SERVICE_RETRIES + 1):
            try:
                for out in fn.map(payloads, return_exceptions=True, order_outputs=False):
                    elapsed = time.monotonic() - submitted
                    if isinstance(out, dict) and isinstance(out.get("index"), int) and 0 <= out["index"] < len(payloads):
                        answered[out["index"]] = (out, elapsed)
                    else:
                        lost.append((out if isinstance(out, BaseException) else RuntimeError(f"no index in {out!r:.80}"),
                                     elapsed))
                break
            except Exception as e:  # noqa: BLE001 - raised, not returned: the service failed (auth, connection), not a candidate
                # Retried only before any output came back: a map half answered is not re-run.
                if answered or lost or attempt == SERVICE_RETRIES or not _transient(e):
                    raise OkgitError(f"Modal: {type(e).__name__}: {_first_line(e)}") from None
                time.sleep(SERVICE_BACKOFF_S * 2**attempt)
        unanswered = iter(lost)
        missing = (RuntimeError("no output came back"), time.monotonic() - submitted)
        results = []
        for i in range(len(payloads)):
            out, elapsed = answered.get(i) or next(unanswered, missing)
            results.append(self._eval_result(out, mode, elapsed))
        return results

    def time_baselines(self, ref_source: str, winner_source: str | None, *, backend: str = "triton") -> BaselineTimes:
        """Eager, torch.compile and the winner (if any) timed in one container (for `okgit bench
        kernelbench`), each arm in a sandboxed worker there. Any failure, Modal's included, leaves
        the times out with the reason (the sweep's `untimed_reason`), never the problem's result.
        """
        payload = {"kind": "baselines", "ref_source": ref_source, "source": winner_source, "backend": backend}
        try:
            out = self._call(payload)
            times = BaselineTimes(**self._result(out, "baselines"))
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
        if self.on_note:  # the CLI's progress says it: minutes may pass before the first result
            self.on_note(f"starting a Modal app on {self.gpu}"
                         + (" (the first run builds the image, shown below: minutes)" if first else ""))
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
        for attempt in range(SERVICE_RETRIES + 1):
            try:
                out = self._function().remote(payload)
                break
            except OkgitError:
                raise
            except Exception as e:  # noqa: BLE001 - after Modal's retries: the service, not the op, failed
                if attempt == SERVICE_RETRIES or not _transient(e):
                    raise OkgitError(f"Modal: {type(e).__name__}: {_first_line(e)}") from None
                time.sleep(SERVICE_BACKOFF_S * 2**attempt)
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


def _transient(e: BaseException) -> bool:
    """A service error worth another try: a dropped connection, a timeout, Modal's own failure."""
    kinds: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
    try:
        import modal.exception as me

        kinds += (me.ConnectionError, me.InternalFailure, me.ServiceError, me.TimeoutError)
    except ImportError:
        pass
    return isinstance(e, kinds)


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

