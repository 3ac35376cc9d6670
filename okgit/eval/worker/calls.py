"""What both worker processes (the judge and a candidate's worker) do with an op file's code:
load it at a shape, draw a case's inputs, build a model, call it and record facts about the call.

Inputs are drawn where they are used, by the same code in both processes: the reference's
`get_inputs()` under the case's seed, with the problem's device as torch's default device, so
the judge and the candidate hold the same tensors without either sending them. A candidate that
tampers with its own inputs only computes the op on other values than the judge's.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from okgit.eval.protocol.jobs import MODEL_SEED, PINNED_FLAGS, Case, flatten, tree_spec
from okgit.eval.protocol.keys import MODES_EVAL, MODES_STATE
from okgit.eval.protocol.start import step
from okgit.eval.worker.oom import oom_line
from okgit.eval.worker.tensors import bitwise_equal
from okgit.problem import with_knobs


class CallFailed(Exception):
    """A call raised; carries the gate it was checking."""

    def __init__(self, gate: str, status: str, message: str) -> None:
        super().__init__(message)
        self.gate, self.status, self.message = gate, status, message


def load_op(path: str, name: str, knobs: dict[str, int]) -> ModuleType:
    """The op file executed as module `name` with its shape knobs set where they are assigned."""
    with open(path) as f:
        source = f.read()
    code = compile(with_knobs(source, path, knobs), path, "exec")
    module = ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def draw_inputs(torch: Any, module: ModuleType, case: Case, device: str) -> list[Any]:
    """The case's inputs, drawn on `device` from the reference's get_inputs() under its seed. The
    random state is restored afterwards: calls see one random stream across cases, as they would
    without okgit, so a candidate's own randomness never repeats because of the drawing."""
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if device == "cuda" else []):
        torch.manual_seed(case.seed)
        with torch.device(device):
            raw = list(module.get_inputs())
    if case.signed:  # the second distribution: floating x -> 3x - 1
        raw = [3 * x - 1 if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in raw]
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in raw]
    if case.salt:
        salt_inputs(torch, inputs, case.salt)
    return inputs


SALTED_ELEMENTS = 16  # per floating input: enough that a remembered output is wrong somewhere


def salt_inputs(torch: Any, inputs: list[Any], salt: int) -> None:
    """Move a few elements of each floating input in place: SALTED_ELEMENTS positions, drawn from
    `salt`, take the values of other positions. Every timed call gets its own salt (okgit.eval.worker.timing),
    so no two timed calls see the same contents, while the values stay the input's own (same
    distribution, same signs and ranges). A cache keyed on a few sampled elements, on addresses or
    on call counts returns an output computed for other contents, which differs at the moved
    elements; the judge redraws the same inputs from (seed, salt) to check an output."""
    gen = torch.Generator().manual_seed(salt)
    for x in inputs:
        if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.is_contiguous() and x.numel() >= 2):
            continue
        flat = x.view(-1)
        n = min(SALTED_ELEMENTS, flat.numel())
        to = torch.randint(flat.numel(), (n,), generator=gen).to(x.device)
        source = torch.randint(flat.numel(), (n,), generator=gen).to(x.device)
        flat[to] = flat[source].clone()


def init_args(torch: Any, module: ModuleType, seed: int, device: str) -> list[Any]:
    torch.manual_seed(seed)
    with torch.device(device):
        return list(module.get_init_inputs())


def build(torch: Any, cls: type, init: list[Any], device: str, state: dict[str, Any] | None = None) -> tuple[Any, bool]:
    """Same seed before construction in both processes, parameters made on the device; the
    reference's tensors loaded when keys and shapes match (returns the model, whether they were)."""
    torch.manual_seed(MODEL_SEED)
    with torch.device(device):
        model = cls(*init)
    loaded = False
    if isinstance(model, torch.nn.Module):
        if state is not None:
            own = model.state_dict()
            if own.keys() == state.keys() and all(tuple(own[k].shape) == tuple(v.shape) for k, v in state.items()):
                model.load_state_dict(state)
                loaded = True
        model = model.to(device)
    return model, loaded


def layout_twin(torch: Any, model: Any) -> Any:
    """The reference model in channels_last memory format, where it holds a 4-D or 5-D floating
    tensor (a convolution's weight), else None.

    The layout is not the op's semantics, and it is the layout torch.compile runs convolutions
    in; under PyTorch's default flags (cuDNN may use TF32) cuDNN can take TF32 kernels in one
    layout and not in the other, so the reference's own error is measured in both."""
    import copy

    if not isinstance(model, torch.nn.Module):
        return None
    tensors = list(model.parameters()) + list(model.buffers())
    if not any(t.is_floating_point() and t.dim() in (4, 5) for t in tensors):
        return None
    twin = copy.deepcopy(model)
    for t in list(twin.parameters()) + list(twin.buffers()):
        if t.dim() in (4, 5):
            fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
            t.data = t.data.contiguous(memory_format=fmt)
    return twin


def channels_last_inputs(torch: Any, inputs: list[Any]) -> list[Any]:
    """The inputs with every 4-D and 5-D tensor in channels_last (copies; the originals stay)."""
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.dim() in (4, 5):
            x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
        out.append(x)
    return out


def nbytes(values: list[Any]) -> int:
    """The bytes of the tensors' elements (what an op reads or writes at the least)."""
    import torch

    return sum(x.nbytes for x in values if isinstance(x, torch.Tensor))


def held_bytes(values: list[Any]) -> int:
    """The memory the tensors keep alive: each distinct storage once, whole. Not their elements'
    bytes: torch's mse_loss and smooth_l1_loss return a 0-dim loss that keeps the full-size
    storage its reduction ran in (KernelBench L1/96: 4 bytes of output holding 4 GiB)."""
    import torch

    storages = {}
    for x in values:
        if isinstance(x, torch.Tensor):
            storage = x.untyped_storage()
            storages[(x.device, storage.data_ptr())] = storage.nbytes()
    return sum(storages.values())


def compact(values: list[Any]) -> list[Any]:
    """The values with each tensor that keeps more storage than its elements take copied alone,
    for what is kept beyond a call (a judge's expected outputs: L1/96's judge ran out of an
    H100's and an H200's memory keeping 12 GiB for each case's 0-dim losses)."""
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) and x.untyped_storage().nbytes() > x.nbytes else x
            for x in values]


@dataclass
class Called:
    out: Any
    leaves: list[Any]
    facts: dict[str, Any]
    kept_s: float = 0.0  # the inputs' copy before the call and their comparison after it


def call(torch: Any, model: Any, inputs: list[Any], device: str, *, label: str, gate: str,
         counters: tuple[Any, ...] = (), check_inputs: bool = True) -> Called:
    """One call under no_grad, synchronized; its facts: output structure, per-leaf type, shape,
    dtype, device and aliasing, which inputs it changed, and the kernel launches it made."""
    t0 = time.monotonic()
    pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs] if check_inputs else None
    if device == "cuda":
        torch.cuda.synchronize()  # the copy's time apart from the call's
    kept_s = time.monotonic() - t0
    for counter in counters:
        counter.reset()
    try:
        with torch.no_grad():
            out = model(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - everything a call throws is a finding
        status = status_of(e, gate)
        # a kernel that fails to compile at its first launch fails the compile gate
        raise CallFailed("compile" if status == "compile_error" else gate, status, f"{label}: {describe(e)}") from None
    leaves = flatten(out)
    facts: dict[str, Any] = {"spec": tree_spec(out), "leaves": [leaf_facts(t, inputs) for t in leaves]}
    if counters:
        triton_counter, cuda_counter = counters
        facts["launches"] = {"triton": triton_counter.total(), "cuda": cuda_counter.total()}
        facts["failed_launches"] = {"triton": sum(triton_counter.failed.values()),
                                    "cuda": sum(cuda_counter.failed.values())}
        facts["kernels"] = sorted(set(triton_counter.counts) | set(cuda_counter.counts))
    if pristine is not None:
        t0 = time.monotonic()
        facts["inputs_changed"] = [i for i, (a, b) in enumerate(zip(inputs, pristine, strict=True))
                                   if isinstance(a, torch.Tensor) and not bitwise_equal(a, b)]
        kept_s += time.monotonic() - t0
    return Called(out, leaves, facts, kept_s)


def mode_dependent(torch: Any, model: Any, source: str) -> bool:
    """Whether a reference's behaviour or state can depend on its mode: it holds buffers (running
    statistics), has a batch/instance norm or a dropout, or reads `.training` in its own code."""
    if not isinstance(model, torch.nn.Module):
        return False
    from torch.nn.modules.batchnorm import _NormBase
    from torch.nn.modules.dropout import _DropoutNd

    return (any(True for _ in model.buffers()) or ".training" in source
            or any(isinstance(m, (_NormBase, _DropoutNd)) for m in model.modules()))


def mode_sequence(torch: Any, model: Any, module: ModuleType, case: Case, device: str, *, label: str,
                  buffers: list[str], gates: dict[str, str], counters: tuple[Any, ...] = (),
                  convert: Any = None) -> Called:
    """The modes case, the same in the judge and a candidate's worker (docs/design.md,
    "Module modes and state"): a fresh model called in training mode on the case's inputs, its buffers
    afterwards (the reference's, by name: running statistics, num_batches_tracked), then a call
    in eval mode on the next seed's inputs. One output list: training outputs, buffers, eval
    outputs; `facts["parts"]` names the gate (the job's `gates`) and the mode of each. The training
    call runs under the case's own seed, so that dropout draws the same mask in both processes."""
    from dataclasses import replace

    train_gate, state_gate, eval_gate = gates["modes"], gates[MODES_STATE], gates[MODES_EVAL]

    def inputs_of(c: Case) -> list[Any]:
        drawn = draw_inputs(torch, module, c, device)
        return convert(drawn) if convert else drawn

    first = inputs_of(case)
    model.train()
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if device == "cuda" else []):
        torch.manual_seed(case.seed)
        trained = call(torch, model, first, device, label=f"{label} (training mode)", gate=train_gate, counters=counters)
    own = dict(model.named_buffers())
    missing = [name for name in buffers if name not in own]
    if missing:
        raise CallFailed(state_gate, "incorrect", f"{label}: the candidate has no buffer {', '.join(missing[:3])} of the "
                         "reference's, so its state cannot follow the reference's across training and eval mode")
    state = [own[name].detach().clone() for name in buffers]
    second = inputs_of(replace(case, seed=case.seed + 1))
    model.eval()
    try:
        evaluated = call(torch, model, second, device, label=f"{label} (eval mode)", gate=eval_gate, counters=counters)
    finally:
        model.train()
    parts = ([[train_gate, f"training-mode output {j}"] for j in range(len(trained.leaves))]
             + [[state_gate, f"buffer {name} after the training-mode call"] for name in buffers]
             + [[eval_gate, f"eval-mode output {j}"] for j in range(len(evaluated.leaves))])
    facts: dict[str, Any] = {
        "spec": [trained.facts["spec"], list(buffers), evaluated.facts["spec"]],
        "leaves": trained.facts["leaves"] + [leaf_facts(t, []) for t in state] + evaluated.facts["leaves"],
        "parts": parts,
        "inputs_changed": sorted(set(trained.facts.get("inputs_changed", [])) | set(evaluated.facts.get("inputs_changed", []))),
    }
    if counters:
        for key in ("launches", "failed_launches"):
            facts[key] = {k: trained.facts[key][k] + evaluated.facts[key][k] for k in trained.facts[key]}
        facts["kernels"] = sorted(set(trained.facts["kernels"]) | set(evaluated.facts["kernels"]))
    return Called([trained.out, state, evaluated.out], trained.leaves + state + evaluated.leaves, facts)


def leaf_facts(t: Any, inputs: list[Any]) -> dict[str, Any]:
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


def start(torch: Any, device: str) -> None:
    """What both worker processes do first: the library flags pinned, CUDA up on a GPU, and on a
    CPU one thread for torch's operators. A CPU's shapes are scaled to about 64K elements, where
    threads gain nothing, and on a host loaded by other work (the judge, workers, a test suite)
    their spinning cost the most: an evaluation of a 32 x 2048 softmax took 17.4 s with two
    threads on a loaded 2-core host, 3.6 s with one (the judge's comparisons 11 s against 0.2 s)."""
    pin_flags(torch)
    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
        step("cuda")
    else:
        torch.set_num_threads(1)


def pin_flags(torch: Any) -> None:
    for dotted, value in PINNED_FLAGS.items():
        owner_path, attr = dotted.rsplit(".", 1)
        owner: Any = torch
        for part in owner_path.split(".")[1:]:
            owner = getattr(owner, part)
        setattr(owner, attr, value)


def warm_up(torch: Any, device: str) -> None:
    """Pay one-time costs before the job, while the worker idles: the first switch to
    deterministic algorithms and a Triton launch (driver utilities)."""
    from okgit.eval.worker.warm import fill_kernel

    deterministic(torch, True)
    deterministic(torch, False)
    buf = torch.empty(16, device=device)
    fill_kernel[(1,)](buf, 16, BLOCK=16)
    step("warm-up")


def open_profiler(device: str) -> None:
    """torch.profiler's one-time start (CUPTI and Kineto loaded and set up: 3.3-4.5 s on the
    H200), paid by an empty session before the job, so that a profiled call made with the device
    held alone pays nothing. No kernel runs in it: it holds no lock (okgit.eval.protocol.start).
    Not in a profiling pass's worker (its tool takes CUPTI alone) nor a timing-only one."""
    if device != "cuda":
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]):
        pass
    step("profiler")


def open_profiler_aside(device: str) -> threading.Thread | None:
    """open_profiler in a thread of its own, for a process that has other work meanwhile (the
    judge's preparation): torch.profiler's state is the session's thread's own, so the other
    threads' operators are not recorded; their kernels may be, and are dropped with the empty
    session. Join it before anything is timed. None on a CPU."""
    if device != "cuda":
        return None

    def session() -> None:
        try:
            open_profiler(device)
        except Exception:  # noqa: BLE001 - only a cost paid ahead: the profiled call says what is wrong
            pass

    thread = threading.Thread(target=session, name="okgit-profiler-start", daemon=True)
    thread.start()
    return thread


class poisoned:
    """Uninitialised memory (torch.empty and friends) filled with NaN / the largest integer while
    correctness is checked, so that output elements a kernel never writes show up."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def __enter__(self) -> None:
        import torch.utils.deterministic as det

        warnings.filterwarnings("ignore", message=".*does not have a deterministic implementation.*")
        deterministic(self.torch, True)
        # a property of torch's module subclass (_Deterministic), which the module's type does not show
        det.fill_uninitialized_memory = True  # type: ignore[attr-defined]

    def __exit__(self, *exc: Any) -> None:
        deterministic(self.torch, False)


def deterministic(torch: Any, mode: bool) -> None:
    """torch.use_deterministic_algorithms(mode, warn_only=mode) less its import of Inductor, which
    it makes to set Inductor's own flag: a second of every worker's and judge's start, as long as
    the rest of it on a CPU. Where Inductor is not loaded, the default of its flag (an environment
    variable) says the same, for a candidate that loads it later."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode, warn_only=mode)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=mode)
        os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1" if mode else "0"


def init_names(cls: type) -> list[str]:
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


def describe(e: BaseException) -> str:
    """The exception on the first line (what a one-line view shows: for an out-of-memory error,
    okgit.eval.worker.oom's line), then the traceback's last frames."""
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    # the op's frames matter; okgit's own are noise
    lines = [ln for ln in tb if "okgit/eval/" not in ln]
    said = (str(e).strip().splitlines() or [""])[0]
    first = oom_line(e) or f"{type(e).__name__}{': ' + said if said else ''}"
    return f"{first}\n" + "".join(lines[-8:]).strip()


def clipped(message: str, limit: int = 4000) -> str:
    """A failure's message within `limit` characters: its first line (describe's, what one-line
    views show) and as much of its end as fits. torch's out-of-memory paragraph names every process
    on the device, so its traceback can pass the limit; clipped from the front alone, the line lost."""
    if len(message) <= limit:
        return message
    first, _, rest = message.partition("\n")
    first = first[: limit // 4]
    return f"{first}\n...{rest[len(first) + 4 - limit:]}"


def out_of_memory(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or "out of memory" in str(e) or type(e).__name__ == "OutOfMemoryError"


def status_of(e: BaseException, gate: str) -> str:
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
