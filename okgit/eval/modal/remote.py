"""What runs in the Modal container: `remote_job`, the GPU function's body, and its handlers.

Plain data in, plain data out: the problem travels as `problem_payload` (with the op's sibling
files) and each job kind's handler runs the local evaluator's own code on the container's GPU
and returns plain data. The function is pickled by reference to this module, so the container
imports this module and okgit.eval.parent.local, never the client (okgit.eval.modal.client) nor
okgit.kernelbench: the sweep's baselines come back as okgit.eval.types.BaselineTimes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from okgit.errors import OkgitError
from okgit.eval.types import BaselineTimes
from okgit.problem import Problem, load_problem

# What one job may run in the container before it is given up (the client's TIMEOUT_S, Modal's own
# limit per attempt, is the backstop of these).
KIND_TIMEOUT_S = {"reference": 900, "evaluate": 900, "compare": 1500, "baselines": 1500}
MAX_PROBLEM_FILES_BYTES = 4 << 20  # the op's sibling modules shipped along with it


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
    from okgit.eval.parent.local import LocalEvaluator

    _make_importable()  # before any worker starts, pre-started ones included
    if device not in _EVALUATORS:
        _EVALUATORS[device] = LocalEvaluator(device=device)
    return _EVALUATORS[device]


def _make_importable() -> None:
    """Workers start in a temporary directory with a scrubbed environment that keeps PYTHONPATH:
    put okgit's directory (/root in the image) on it, or they could not import okgit."""
    root = str(Path(__file__).resolve().parents[3])
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
        handler = HANDLERS.get(kind)
        if handler is None:
            raise OkgitError(f"unknown job kind {kind!r}")
        return {"result": handler(payload)}
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


# --- the handlers: one per job kind, a payload in, the result as plain data out --------------------


def _device(payload: dict[str, Any]) -> str:
    return payload.get("device", "cuda")


def _problem(payload: dict[str, Any]) -> Problem:
    return _problem_from(payload["problem"], _problem_dir(payload["problem"]))


def _reference(payload: dict[str, Any]) -> dict[str, Any]:
    problem = _problem(payload)
    return _evaluator(_device(payload)).reference(problem).model_dump(mode="json")


def _evaluate(payload: dict[str, Any]) -> dict[str, Any]:
    problem = _problem(payload)
    result = _evaluator(_device(payload)).evaluate(problem, payload["source"], mode=payload["mode"],
                                                   backend=payload["backend"])
    return result.model_dump(mode="json")


def _compare(payload: dict[str, Any]) -> dict[str, Any]:
    problem = _problem(payload)
    result = _evaluator(_device(payload)).compare(problem, payload["source"], rounds=payload["rounds"],
                                                  backend=payload["backend"])
    return result.model_dump(mode="json")


def _baselines(payload: dict[str, Any]) -> dict[str, Any]:
    return remote_baselines(payload["ref_source"], payload.get("source"), _device(payload),
                            backend=payload.get("backend") or "triton").model_dump(mode="json")


Handler = Callable[[dict[str, Any]], dict[str, Any]]
HANDLERS: dict[str, Handler] = {"reference": _reference, "evaluate": _evaluate, "compare": _compare,
                                "baselines": _baselines}


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
                     backend: str = "triton") -> BaselineTimes:
    """Eager, torch.compile and the winner timed as candidates are: each arm in the evaluator's
    sandboxed worker (scrubbed environment, its own process, time-limited), never in this
    process. The winner is checked again by the evaluator first. A failure is an arm's missing
    time (`errors`), as `okgit.kernelbench.baselines` reports it locally."""
    root = _problem_dir({"baselines": ref_source})
    (root / "reference.py").write_text(ref_source)
    evaluator = _evaluator(device)
    result = BaselineTimes(device=evaluator.device, timed=False)
    try:
        problem = load_problem("reference.py", source=ref_source, root=str(root))
        prep = evaluator.prepared(problem)
    except OkgitError as e:
        result.errors["all"] = str(e)
        return result
    arms = {"eager": (ref_source, "torch"), "compile": (ref_source + COMPILE_ARM, "torch")}
    if winner_source is not None:
        from okgit.eval.parent.one_shot import check_winner

        result.disagreement, error = check_winner(evaluator, problem, winner_source, backend)
        if error:
            result.errors["okgit"] = error
        arms["okgit"] = (winner_source, backend)
    if device == "cpu":
        result.errors["all"] = "no GPU: timing is not claimed"
        return result
    from okgit.eval.protocol.jobs import PINNED_FLAGS

    result.timed, result.flags = True, dict(PINNED_FLAGS)
    samples: dict[str, list[float]] = {arm: [] for arm in arms if arm not in result.errors}
    evaluator.prestart_for(BASELINE_ROUNDS * len(samples))  # each round's worker, started together
    for _ in range(BASELINE_ROUNDS):
        for arm in list(samples):
            source, arm_backend = arms[arm]
            try:
                samples[arm].append(evaluator.time_once(problem, prep, source, arm_backend, root=str(root)))
            except OkgitError as e:  # that baseline is missing, not zero
                result.errors[arm] = _first_line(e)[:300]
                del samples[arm]
    evaluator.end_rounds()  # a missing arm's: this warm container keeps no context for them
    import statistics

    times = {arm: statistics.median(ts) for arm, ts in samples.items() if ts}
    result.eager_us, result.compile_us, result.okgit_us = times.get("eager"), times.get("compile"), times.get("okgit")
    return result


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "no message"
