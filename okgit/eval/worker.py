"""The isolated process that runs reference or candidate code: `python -m okgit.eval.worker`.

Life of a worker: start (import torch and triton, pin the backend flags, initialise CUDA,
install the launch counters, bind the timing functions), print `ready`, wait for one line on
stdin naming a job directory, run that one job, write the result there, exit. Nothing of a
candidate is loaded before the job, so a pre-started idle worker carries no state between
candidates. The parent never imports candidate code; the candidate's process never holds the
expected outputs: it writes what it computed and the parent judges.

A file `phase` in the job directory names the gate in progress, so that a crash (segfault,
CUDA error, kill on timeout) can be attributed without the worker's cooperation.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from okgit.eval.jobs import CASE_GATES, MODEL_SEED, PINNED_FLAGS, Case, Job, flatten, perturb_floats, tree_spec

OUTPUTS_FILE = "outputs.pt"
RESULT_FILE = "result.json"
PHASE_FILE = "phase"
INPUTS_FILE = "inputs.pt"  # in the reference's data dir
EXPECTED_FILE = "expected.pt"


class CallFailed(Exception):
    """A candidate's call raised; carries the gate it was checking."""

    def __init__(self, gate: str, status: str, message: str) -> None:
        super().__init__(message)
        self.gate, self.status, self.message = gate, status, message


class Worker:
    def __init__(self, device: str) -> None:
        import torch

        from okgit.backends import cuda as cuda_backend
        from okgit.backends import triton as triton_backend
        from okgit.eval import timing

        self.torch = torch
        self.device = device
        _pin_flags(torch)
        if device == "cuda":
            torch.cuda.init()
            torch.empty(1, device="cuda")
        self.triton_launches = triton_backend.install_launch_counter()
        self.cuda_launches = triton_backend.LaunchCounter()
        self.cuda_kernel_names: set[str] = set()
        cuda_backend.install_load_hooks(self.cuda_launches, self.cuda_kernel_names, run_on_gpu=device == "cuda")
        if device == "cuda":
            timing.bind()
        _warm_up(torch, device)
        self.job_dir = Path(".")
        self.result: dict[str, Any] = {"calls": {}}
        self.outputs: dict[str, list[Any]] = {}
        self.kept_on_device: dict[str, list[Any]] = {}  # first-pass outputs, to spot identical repeats
        self.current, self.since = "load", time.monotonic()

    # ---- plumbing -------------------------------------------------------------------------
    def phase(self, gate: str) -> None:
        """Name the gate in progress (for crash reports) and account the time of the last one."""
        now = time.monotonic()
        times = self.result.setdefault("phase_s", {})
        times[self.current] = times.get(self.current, 0.0) + now - self.since
        self.current, self.since = gate.split(":")[0], now
        (self.job_dir / PHASE_FILE).write_text(gate)

    def finish(self) -> None:
        self.torch.save(self.outputs, self.job_dir / OUTPUTS_FILE)
        (self.job_dir / RESULT_FILE).write_text(json.dumps(self.result, default=str))

    def fail(self, status: str, gate: str, message: str) -> None:
        self.result["failure"] = {"status": status, "gate": gate, "message": message[-4000:]}

    def run(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self.since = time.monotonic()
        job = Job.load(job_dir / "job.json")
        if job.root and job.root not in sys.path:
            sys.path.insert(0, job.root)
        try:
            if job.role == "reference":
                self.run_reference(job)
            else:
                self.run_candidate(job)
        except CallFailed as e:
            self.fail(e.status, e.gate, e.message)
        except BaseException as e:  # noqa: BLE001 - everything a candidate throws is a finding
            if type(e).__name__ == "CompiledNotRun":  # CUDA on a CPU machine: compiled, not run
                self.result["compiled_not_run"] = str(e)
                self.fail("error", "device", str(e))
                self.phase("write")
                self.finish()
                return
            gate = (job_dir / PHASE_FILE).read_text() if (job_dir / PHASE_FILE).exists() else "worker"
            self.fail(_status_of(e, gate), gate, _describe(e))
        self.phase("write")
        self.finish()

    # ---- shared steps ------------------------------------------------------------------------
    def import_module(self, path: str, name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def build(self, module: ModuleType, cls: type, knobs: dict[str, int], init: list[Any],
              state: dict[str, Any] | None) -> tuple[Any, bool]:
        """Same seed before construction in both arms; the reference's tensors when keys and shapes match."""
        torch = self.torch
        _set_knobs(module, knobs)
        torch.manual_seed(MODEL_SEED)
        model = cls(*init)
        loaded = False
        if state is not None and isinstance(model, torch.nn.Module):
            own = model.state_dict()
            if own.keys() == state.keys() and all(tuple(own[k].shape) == tuple(v.shape) for k, v in state.items()):
                model.load_state_dict(state)
                loaded = True
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
        return model, loaded

    def to_device(self, inputs: list[Any]) -> list[Any]:
        torch = self.torch
        return [x.to(self.device, copy=True) if isinstance(x, torch.Tensor) else x for x in inputs]

    def call(self, key: str, model: Any, module: ModuleType, knobs: dict[str, int], inputs: list[Any],
             gate: str, *, keep: bool = True, check_inputs: bool = True, same_as: str | None = None) -> Any:
        """One call, with facts about its outputs recorded under `key` (and the outputs kept).

        With `same_as`, outputs bitwise equal to that earlier call's are not sent back again (the
        parent judged those already); only different ones travel, to be judged on their own."""
        torch = self.torch
        _set_knobs(module, knobs)
        pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs] if check_inputs else None
        self.phase(gate)
        for counter in (self.triton_launches, self.cuda_launches):
            counter.reset()
        try:
            with torch.no_grad():
                out = model(*inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            status = _status_of(e, gate)
            # a kernel that fails to compile at its first launch fails the compile gate
            raise CallFailed("compile" if status == "compile_error" else gate, status, f"{key}: {_describe(e)}") from None
        leaves = flatten(out)
        facts: dict[str, Any] = {
            "spec": tree_spec(out),
            "leaves": [_leaf_facts(t, inputs) for t in leaves],
            "launches": {"triton": self.triton_launches.total(), "cuda": self.cuda_launches.total()},
            "kernels": sorted(set(self.triton_launches.counts) | set(self.cuda_launches.counts)),
        }
        if pristine is not None:
            facts["inputs_changed"] = [i for i, (a, b) in enumerate(zip(inputs, pristine))
                                       if isinstance(a, torch.Tensor) and not _same(a, b)]
        self.result["calls"][key] = facts
        if same_as is not None and self.matches(same_as, leaves):
            facts["same_as"] = same_as
        elif keep:
            self.outputs[key] = [_plain_cpu(t) for t in leaves]
            if same_as is None:
                self.kept_on_device[key] = [t.detach().clone() if type(t) is torch.Tensor else None for t in leaves]
        return out

    def matches(self, key: str, leaves: list[Any]) -> bool:
        first = self.kept_on_device.get(key)
        return first is not None and len(first) == len(leaves) and all(
            a is not None and type(b) is self.torch.Tensor and _same(a, b) for a, b in zip(first, leaves))

    # ---- reference ----------------------------------------------------------------------------
    def run_reference(self, job: Job) -> None:
        torch = self.torch
        self.phase("reference: import")
        module = self.import_module(job.source_path, "okgit_reference")
        cls = module.Model
        main = dict(job.knobs)
        if job.device == "cpu":
            self.phase("reference: scale shapes for the CPU")
            main = self.scale_for_cpu(module, main, job.cpu_input_limit)
        shapes = [main]
        candidates = [({**main, **s}) for s in job.extra_shapes] if job.extra_shapes is not None else _variants(main)
        seeds = job.seeds
        data: dict[str, Any] = {"inputs": {}, "init": {}, "state": {}}
        expected: dict[str, Any] = {}
        cases: list[Case] = []

        def run_shape(idx: int | str, knobs: dict[str, int], shape_cases: list[Case],
                      init: list[Any] | None = None) -> None:
            """The cases of one model: a shape's (init from get_init_inputs()), or the init_inputs
            case's (`init` given, stored under the case's id)."""
            if init is None:
                _set_knobs(module, knobs)
                torch.manual_seed(seeds[0])
                init = list(module.get_init_inputs())
            model, _ = self.build(module, cls, knobs, init, None)
            state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()} if isinstance(
                model, torch.nn.Module) else None
            double = self.double_model(module, cls, knobs, init)
            for case in shape_cases:
                _set_knobs(module, knobs)
                torch.manual_seed(case.seed)
                raw = list(module.get_inputs())
                if case.signed:
                    raw = [3 * x - 1 if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in raw]
                inputs = self.to_device(raw)
                native = self.call(case.id, model, module, knobs, inputs, f"reference: {case.id}", keep=False)
                f64 = self.call_double(double, module, knobs, raw)
                expected[case.id] = {"native": [_plain_cpu(t) for t in flatten(native)],
                                     "f64": None if f64 is None else [_plain_cpu(t) for t in flatten(f64)]}
                data["inputs"][case.id] = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in raw]
            data["init"][idx] = init
            data["state"][idx] = state

        main_cases = [Case(id=f"s{i}", kind="seed", shape=0, seed=s) for i, s in enumerate(seeds)]
        main_cases.append(Case(id="signed", kind="distribution", shape=0, seed=seeds[0], signed=True))
        with _poisoned(torch):
            run_shape(0, main, main_cases)
            cases += main_cases
            # determinism of the reference itself: a second call on seed 0
            _set_knobs(module, main)
            torch.manual_seed(seeds[0])
            model, _ = self.build(module, cls, main, data["init"][0], None)
            again = self.call("s0#again", model, module, main, self.to_device(data["inputs"]["s0"]),
                              "reference: determinism", keep=False)
            expected["s0#again"] = {"native": [_plain_cpu(t) for t in flatten(again)], "f64": None}
            dropped: list[str] = []
            # constructor arguments baked into a kernel: the same model from perturbed floats, one seed
            perturbed, changes = perturb_floats(list(data["init"][0]), _init_names(cls))
            if not changes:
                dropped.append("init_inputs: no float constructor argument to perturb")
            else:
                case = Case(id="i0", kind="init_inputs", shape=0, seed=seeds[0],
                            note="built with constructor arguments " + ", ".join(changes))
                try:
                    run_shape(case.id, main, [case], init=perturbed)
                    cases.append(case)
                except Exception as e:  # noqa: BLE001 - the reference cannot run them: dropped
                    dropped.append(f"init_inputs: the reference raises with {', '.join(changes)}: "
                                   f"{_describe(e).splitlines()[-1]}")
                    self.result["calls"].pop(case.id, None)
                    expected.pop(case.id, None)
            for knobs in candidates:
                if len(shapes) > 2 or knobs in shapes:
                    continue
                idx = len(shapes)
                extra = [Case(id=f"x{idx}", kind="extra_shape", shape=idx, seed=seeds[1 % len(seeds)])]
                try:
                    run_shape(idx, knobs, extra)
                except Exception as e:  # noqa: BLE001 - a variant the reference cannot run is dropped
                    dropped.append(f"{knobs}: {_describe(e).splitlines()[-1]}")
                    self.result["calls"].pop(extra[0].id, None)
                    continue
                shapes.append(knobs)
                cases += extra
        self.result.update(shapes=shapes, cases=[vars(c) for c in cases], dropped_shapes=dropped)

        self.phase("reference: flops")
        self.result["cost"] = self.count_cost(module, cls, main, data)
        self.phase("reference: save")
        data_dir = Path(job.data_dir)
        torch.save(data, data_dir / INPUTS_FILE)
        torch.save(expected, data_dir / EXPECTED_FILE)
        if job.device == "cuda":
            if job.peaks_path and not Path(job.peaks_path).exists():
                self.phase("reference: device peaks")
                from okgit.eval.roofline import measure_peaks

                Path(job.peaks_path).parent.mkdir(parents=True, exist_ok=True)
                Path(job.peaks_path).write_text(json.dumps(measure_peaks(self.device)))
            # the time to beat is the implementation's: ModelNew where the op file has one
            self.time_and_profile(job, module, getattr(module, "ModelNew", None) or cls, shapes, cases, data)

    def scale_for_cpu(self, module: ModuleType, knobs: dict[str, int], limit: int) -> dict[str, int]:
        """Halve every knob >= 16 until the inputs hold <= limit elements (the interpreter is slow)."""
        torch = self.torch
        current = dict(knobs)
        while True:
            _set_knobs(module, current)
            torch.manual_seed(0)
            inputs = list(module.get_inputs())
            n = sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))
            del inputs
            smaller = {k: v // 2 for k, v in current.items() if v >= 16}
            if n <= limit or not smaller:
                return current
            current.update(smaller)

    def double_model(self, module: ModuleType, cls: type, knobs: dict[str, int], init: list[Any]) -> Any:
        try:
            model, _ = self.build(module, cls, knobs, init, None)
            return model.double() if isinstance(model, self.torch.nn.Module) else model
        except Exception:  # noqa: BLE001 - no float64 version: compare against the native output
            return None

    def call_double(self, model: Any, module: ModuleType, knobs: dict[str, int], raw: list[Any]) -> Any:
        torch = self.torch
        if model is None:
            return None
        inputs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in raw]
        try:
            _set_knobs(module, knobs)
            with torch.no_grad():
                return model(*self.to_device(inputs))
        except Exception:  # noqa: BLE001 - the op has no float64 path
            return None

    def count_cost(self, module: ModuleType, cls: type, knobs: dict[str, int], data: dict[str, Any]) -> dict[str, Any]:
        """FLOPs of one call and its minimum bytes: inputs and parameters read once, outputs written once."""
        torch = self.torch
        from torch.utils.flop_counter import FlopCounterMode

        model, _ = self.build(module, cls, knobs, data["init"][0], None)
        inputs = self.to_device(data["inputs"]["s0"])
        _set_knobs(module, knobs)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            out = model(*inputs)
        params = sum(t.nbytes for t in model.state_dict().values()) if isinstance(model, torch.nn.Module) else 0
        read = sum(x.nbytes for x in inputs if isinstance(x, torch.Tensor)) + params
        written = sum(t.nbytes for t in flatten(out))
        dtypes = sorted({str(t.dtype).replace("torch.", "") for t in flatten(out) + [x for x in inputs if isinstance(x, torch.Tensor)]})
        return {"flops": float(counter.get_total_flops()), "min_bytes": float(read + written), "dtypes": dtypes}

    # ---- candidate ----------------------------------------------------------------------------
    def run_candidate(self, job: Job) -> None:
        torch = self.torch
        data = torch.load(Path(job.data_dir) / INPUTS_FILE, weights_only=True, mmap=True)
        self.phase("compile")
        module = self.import_module(job.source_path, "okgit_candidate")
        cls = getattr(module, "ModelNew", None) or getattr(module, "Model", None)
        if cls is None:
            raise CallFailed("compile", "compile_error", "the candidate defines neither ModelNew nor Model")
        models: dict[int | str, Any] = {}
        loaded: dict[str, bool] = {}
        for case in job.cases:  # one model per shape, and one per init_inputs case
            key = case.model
            if key in models:
                continue
            self.phase("construct")
            try:
                models[key], loaded[str(key)] = self.build(module, cls, job.shapes[case.shape],
                                                           list(data["init"][key]), data["state"][key])
            except Exception as e:  # noqa: BLE001 - refusing other constructor arguments is a wrong answer
                if case.kind != "init_inputs":
                    raise
                raise CallFailed("init_inputs", _status_of(e, "init_inputs"),
                                 f"{case.id} ({case.note}): the constructor raised: {_describe(e)}") from None
        self.result["state_dict_loaded"] = loaded
        cases = {c.id: c for c in job.cases}
        seeds = [c for c in job.cases if c.kind == "seed"]

        def run_case(case: Case, key: str, gate: str, same_as: str | None = None) -> Any:
            knobs = job.shapes[case.shape]
            return self.call(key, models[case.model], module, knobs, self.to_device(data["inputs"][case.id]), gate,
                             same_as=same_as)

        if job.check:
            with _poisoned(torch):
                for case in job.cases:
                    run_case(case, case.id, CASE_GATES[case.kind])
                for case in seeds:  # more calls than the trials, each still right, and identical
                    run_case(case, f"{case.id}#repeat", "repeat", same_as=case.id)
                if len(seeds) >= 2:
                    self.fresh_inputs(models[0], module, job.shapes[0], data, seeds[0], seeds[1])
        self.result["backend_launches"] = {"triton": self.triton_launches_seen, "cuda": self.cuda_launches_seen}
        if job.device == "cuda" and (job.timing or job.profile):
            keep = {c.id for c in seeds}  # timed outputs are checked against these
            self.kept_on_device = {k: v for k, v in self.kept_on_device.items() if k in keep}
            self.time_and_profile(job, module, cls, job.shapes, list(cases.values()), data, models[0])
        self.result["cuda_kernel_names"] = sorted(self.cuda_kernel_names)

    def fresh_inputs(self, model: Any, module: ModuleType, knobs: dict[str, int], data: dict[str, Any],
                     first: Case, second: Case) -> None:
        """The same input buffers, refilled in place with new values, must give the new answer."""
        torch = self.torch
        buffers = self.to_device(data["inputs"][first.id])
        self.call("fresh#1", model, module, knobs, buffers, "fresh_inputs", keep=False)
        for buf, new in zip(buffers, self.to_device(data["inputs"][second.id])):
            if isinstance(buf, torch.Tensor):
                buf.copy_(new)
        self.call("fresh", model, module, knobs, buffers, "fresh_inputs")

    @property
    def triton_launches_seen(self) -> int:
        return sum(f["launches"]["triton"] for f in self.result["calls"].values())

    @property
    def cuda_launches_seen(self) -> int:
        return sum(f["launches"]["cuda"] for f in self.result["calls"].values())

    # ---- timing (GPU) -------------------------------------------------------------------------
    def time_and_profile(self, job: Job, module: ModuleType, cls: type, shapes: list[dict[str, int]],
                         cases: list[Case], data: dict[str, Any], model: Any = None) -> None:
        from okgit.eval import timing
        from okgit.eval.profile import profile_calls

        torch = self.torch
        knobs = shapes[0]
        if model is None:
            model, _ = self.build(module, cls, knobs, list(data["init"][0]), data["state"][0])
        _set_knobs(module, knobs)
        seed_cases = [c for c in cases if c.kind == "seed"]
        sets = [self.to_device(data["inputs"][c.id]) for c in seed_cases]
        set_bytes = sum(x.nbytes for x in sets[0] if isinstance(x, torch.Tensor)) or 1
        sets = sets[: max(1, min(len(sets), int(8 * 2**30 // (2 * set_bytes))))]

        def fn(*inputs: Any) -> Any:
            with torch.no_grad():
                return model(*inputs)

        if job.timing:
            self.phase("timing")
            flush = timing.l2_flush_buffer(self.device)
            timed = timing.time_calls(fn, sets, warmup=job.timing.warmup, samples=job.timing.samples, flush=flush)
            del flush
            self.result["timing"] = {
                "samples_us": timed.samples_us, "median_us": timed.median_us,
                "batch_event_us": timed.batch_event_us, "batch_host_us": timed.batch_host_us,
                "residual_sync_us": timed.residual_sync_us, "batch_calls": timed.batch_calls,
                "spot": {str(c): seed_cases[c].id for c in timed.spot},
            }
            same = {}
            for c, out in timed.spot.items():
                case_id = seed_cases[c].id
                same[case_id] = self.matches(case_id, flatten(out))
                if not same[case_id]:
                    self.outputs[f"timed:{case_id}"] = [_plain_cpu(t) for t in flatten(out)]
            self.result["timing"]["spot_same"] = same
        if job.profile:
            self.phase("profile")
            self.result["profile"] = profile_calls(lambda: fn(*sets[0]))


# ---- helpers ------------------------------------------------------------------------------------
def _pin_flags(torch: Any) -> None:
    for dotted, value in PINNED_FLAGS.items():
        owner_path, attr = dotted.rsplit(".", 1)
        owner: Any = torch
        for part in owner_path.split(".")[1:]:
            owner = getattr(owner, part)
        setattr(owner, attr, value)


def _warm_up(torch: Any, device: str) -> None:
    """Pay one-time costs before the job, while the worker idles: the first switch to
    deterministic algorithms (about a second: lazy imports), a Triton launch (driver utilities),
    and on a GPU a profiler session and events."""
    from okgit.eval.warm import fill_kernel

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.use_deterministic_algorithms(False)
    buf = torch.empty(16, device=device)
    fill_kernel[(1,)](buf, 16, BLOCK=16)
    if device == "cuda":
        from okgit.eval.profile import profile_calls

        profile_calls(lambda: buf.add_(1.0), calls=1)
        torch.cuda.synchronize()


def _set_knobs(module: ModuleType, knobs: dict[str, int]) -> None:
    for name, value in knobs.items():
        if hasattr(module, name):
            setattr(module, name, value)


def _init_names(cls: type) -> list[str]:
    """The constructor's positional parameter names, to name perturbed arguments in messages."""
    import inspect

    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return []
    names: list[str] = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            names += [f"{p.name}[{j}]" for j in range(32)]
            break
        else:
            break
    return names


def _variants(main: dict[str, int]) -> list[dict[str, int]]:
    """Odd and smaller shapes from the knobs >= 8: all together first, then one knob at a time."""
    big = {k: v for k, v in main.items() if v >= 8}
    if not big:
        return []
    odd = {k: v - 1 if v % 2 == 0 else v - 2 for k, v in big.items()}
    half = {k: max(3, v // 2 - 1) for k, v in big.items()}
    out = [{**main, **odd}, {**main, **half}]
    out += [{**main, k: odd[k]} for k in big]
    return out


class _poisoned:
    """Uninitialised memory (torch.empty and friends) filled with NaN / the largest integer while
    correctness is checked, so that output elements a kernel never writes show up."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def __enter__(self) -> None:
        import torch.utils.deterministic as det

        warnings.filterwarnings("ignore", message=".*does not have a deterministic implementation.*")
        self.torch.use_deterministic_algorithms(True, warn_only=True)
        det.fill_uninitialized_memory = True

    def __exit__(self, *exc: Any) -> None:
        self.torch.use_deterministic_algorithms(False)


def _leaf_facts(t: Any, inputs: list[Any]) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "type": f"{type(t).__module__}.{type(t).__qualname__}",
        "exact": type(t) is torch.Tensor,
        "shape": list(t.shape),
        "dtype": str(t.dtype),
        "device": t.device.type,
        "alias": None,
    }
    lo, hi = _span(t)
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.device == t.device:
            xlo, xhi = _span(x)
            if lo < xhi and xlo < hi:
                facts["alias"] = i
                break
    return facts


def _span(t: Any) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + max(1, storage.nbytes())


def _plain_cpu(t: Any) -> Any:
    """A plain CPU tensor copy of an exact tensor; None for anything else (never deserialize a
    candidate's subclass in the parent)."""
    import torch

    if type(t) is not torch.Tensor:
        return None
    return t.detach().to("cpu", copy=True)


def _same(a: Any, b: Any) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool((a == b).all())


def _describe(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    # the candidate's frames matter; the worker's own are noise
    lines = [ln for ln in tb if "okgit/eval/worker.py" not in ln]
    return "".join(lines[-8:]).strip()


def _status_of(e: BaseException, gate: str) -> str:
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, (MemoryError, SystemExit, KeyboardInterrupt, RecursionError)):
        return "error"
    if any(s in text for s in ("CUDA error", "out of memory", "illegal memory access", "CUBLAS_STATUS", "cuDNN error")):
        return "error"
    if type(e).__name__ in ("CompilationError", "CudaCompileError") or "triton.compiler" in type(e).__module__:
        return "compile_error"
    if type(e).__name__ == "InterpreterError" and str(e).startswith(("AttributeError", "NameError", "TypeError",
                                                                      "SyntaxError", "CompilationError")):
        return "compile_error"  # what the compiler would have refused on a GPU
    if gate == "compile":
        return "compile_error"
    if gate in ("construct", "worker") or gate.startswith("reference"):
        return "error"
    return "incorrect"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="okgit.eval.worker")
    parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
    args = parser.parse_args(argv)
    worker = Worker(args.device)
    print("ready", flush=True)
    line = sys.stdin.readline().strip()
    if not line:
        return  # the parent closed the pipe: an idle worker no longer needed
    # From here on the candidate may print: keep it off the pipe the parent reads.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    worker.run(Path(line))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: atexit hooks and finalizers of candidate code


if __name__ == "__main__":
    main()
