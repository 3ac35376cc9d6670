"""The model's side of `okgit profile` and of a model campaign: `python -m okgit.campaign.probe`.

Run in its own process (the model is the user's code, and CUDA is started there, not in the
okgit process). It builds the model as the evaluator does (seeded, get_init_inputs), calls it
REPEATS times under torch.profiler with a named range around every call and every leaf module,
and writes one JSON file: each leaf's time in every repeat, its kernels, the inputs of its first
call (shape, dtype, integer range), its FLOPs and bytes, and the constructor arguments that
rebuild it, or why it cannot be rebuilt; the model's own time in every repeat; and the chains
of neighbouring leaves a kernel could fuse (okgit.campaign.chains). Time outside every leaf is
attributed to the model file's lines that called it (call sites).

A leaf is rebuilt from its constructor's signature: each parameter read back from the module's
attribute of that name (a Parameter or None standing for a bool, e.g. `bias`), else its default.
The rebuilt module must then load the original's state dict strictly and give bit-identical
outputs on the captured inputs; anything else is refused, with the reason, and not extracted.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from okgit.campaign import chains

RANGE = "okgit.module::"
CALL = "okgit.call::"  # the range around one profiled model call: its index follows
REPEATS = 10  # model calls profiled, one after another: each row's time in each is one sample
LITERALS = (int, float, bool, str, type(None))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m okgit.campaign.probe")
    parser.add_argument("model")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    Path(args.out).write_text(json.dumps(probe(Path(args.model), args.device), indent=1))
    return 0


def probe(model_path: Path, device: str) -> dict[str, Any]:
    import torch

    from okgit.eval.worker.calls import pin_flags

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    pin_flags(torch)  # the evaluator's library flags (TF32 off, ...): the times it will compare against
    if device == "cpu":
        # a model patched with okgit's kernels runs them on a CPU under Triton's interpreter only,
        # as the evaluator's CPU workers do; set before Triton is first imported (the model's import)
        from okgit.backends.triton import interpret_on_cpu

        interpret_on_cpu()
        # One thread: on a shared CPU a pool of threads waits at every op for the one whose core
        # is taken (a small MLP at load 4 on 2 cores: 64 ms a call with the pool, 0.56 ms on one
        # thread), and the ranking would be the scheduler's, not the model's.
        torch.set_num_threads(1)
    module = _load(model_path)
    torch.manual_seed(0)
    with torch.device(device):
        init = list(module.get_init_inputs())
    torch.manual_seed(1)  # okgit.eval.worker.calls.MODEL_SEED's role: the same model every time
    with torch.device(device):
        model = module.Model(*init)
    model = model.to(device)
    torch.manual_seed(2)
    with torch.device(device):
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    leaves = {name: m for name, m in model.named_modules() if name and not list(m.children())}
    captured: dict[str, dict[str, Any]] = {}
    trace: dict[str, Any] = {"order": None, "last": None}  # one call's leaf calls, while "order" is a list
    handles = []
    for name, leaf in leaves.items():
        handles.append(leaf.register_forward_pre_hook(_enter(name), with_kwargs=True))
        handles.append(leaf.register_forward_hook(_leave(name, captured, trace), with_kwargs=True))
    with torch.no_grad():
        trace["order"] = []
        model(*inputs)  # also warms: lazy initialisation, caches
        order, trace["order"], trace["last"] = trace["order"], None, None
        model(*inputs)  # the profiler's own start
        # One call with Python frames, for the lines that call ops outside the leaves: the
        # frames' tracer slows everything, so the timed calls go without it.
        sites = _call_sites(torch, model, inputs, device, model_path.name)
        start = time.perf_counter()
        events = _profile(torch, model, inputs, device, calls=REPEATS, with_stack=False)
        wall_us = (time.perf_counter() - start) * 1e6 / REPEATS
    for h in handles:
        h.remove()
    rows = _attribute(events, device, sites)
    info = {name: _leaf_info(torch, name, leaves[name], captured.get(name), device) for name in leaves}
    for row in rows:
        if row["kind"] == "module":
            row.update({k: info[row["name"]][k] for k in ("type", "flops", "min_bytes", "inputs")})
    kinds = {name: type(m).__name__ for name, m in leaves.items() if getattr(torch.nn, type(m).__name__, None) is type(m)}
    found_chains = chains.check(torch, model, inputs, chains.find(order, kinds), info, model_path.name)
    totals = _totals(events, device)
    return {"model": str(model_path), "device": device, "repeats": REPEATS, "total_us": statistics.median(totals),
            "total_samples_us": totals, "wall_us": wall_us, "rows": rows, "leaves": info, "chains": found_chains,
            "peaks": _peaks(torch) if device == "cuda" else None}


def _peaks(torch: Any) -> dict[str, Any]:
    """The device's measured peaks (okgit.eval.roofline), measured here once if not cached."""
    from okgit.eval.roofline import load_peaks, measure_peaks, peaks_path

    path = peaks_path(torch.cuda.get_device_name())
    peaks = load_peaks(path)
    if peaks is None:
        peaks = measure_peaks(torch.device("cuda"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(peaks))
    return peaks


def _load(path: Path) -> Any:
    from types import ModuleType

    sys.path.insert(0, str(path.parent))
    module = ModuleType(path.stem)
    module.__file__ = str(path)
    sys.modules[path.stem] = module
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


def _enter(name: str) -> Any:
    def hook(mod: Any, args: Any, kwargs: Any) -> None:
        import torch

        mod._okgit_range = torch.autograd.profiler.record_function(RANGE + name)
        mod._okgit_range.__enter__()

    return hook


def _leave(name: str, captured: dict[str, dict[str, Any]], trace: dict[str, Any]) -> Any:
    def hook(mod: Any, args: Any, kwargs: Any, out: Any) -> None:
        mod._okgit_range.__exit__(None, None, None)
        del mod._okgit_range  # the model is copied later (okgit.campaign.chains): a live range cannot be
        if name not in captured:  # the first call's inputs are the ones extracted
            captured[name] = {"args": [_clone(a) for a in args], "kwargs": sorted(kwargs), "out": _clone(out)}
        if trace["order"] is not None:  # is its one argument the previous leaf's output, that very tensor?
            trace["order"].append((name, len(args) == 1 and not kwargs and args[0] is trace["last"]))
            trace["last"] = out

    return hook


def _clone(x: Any) -> Any:
    import torch

    return x.detach().clone() if isinstance(x, torch.Tensor) else x


def _profile(torch: Any, model: Any, inputs: list[Any], device: str, calls: int, with_stack: bool,
             tree: bool = False) -> list[Any]:
    """The events of `calls` model calls: torch's list of them, or (`tree`) the roots of the
    profiler's own tree of them (torch._C._profiler._ProfilerEvent, read lazily)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities, with_stack=with_stack) as prof:
        for i in range(calls):
            with record_function(f"{CALL}{i}"):
                model(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
    return prof.profiler.kineto_results.experimental_event_tree() if tree else list(prof.events())


def _call_sites(torch: Any, model: Any, inputs: list[Any], device: str, file_name: str) -> list[str | None]:
    """The model file's line of each op one call makes outside every leaf, in order. torch's
    profiler at times reads a Python frame's name as bytes that are not UTF-8 (torch 2.13 on a
    CPU: 2 runs in 6 for a forward that writes a file): such a call is profiled again, and after
    three failures the call sites are named by their ops alone (`aten::softmax`).

    Read from the profiler's own tree of events, not torch's list of them (prof.events()): that
    list is built in Python, an object an event, every Python frame one, and a forward that runs
    much Python took 25 s to build it for one call (the small model of tests/campaign patched with
    okgit's kernels, under Triton's interpreter on a CPU: 546,000 frames, the call itself 3 s);
    the tree holds the same events, and a leaf's frames are passed over by its range, not read
    (2 ms there). The sites are the same either way."""
    for _ in range(3):
        try:
            roots = _profile(torch, model, inputs, device, calls=1, with_stack=True, tree=True)
            return [_site(e, file_name) for e in _outside_tree(roots)]
        except UnicodeDecodeError:
            continue
    return []


def _outside_tree(roots: list[Any]) -> list[Any]:
    """_outside's ops in the profiler's tree (`roots`): the outermost aten ops that no leaf's range
    holds, in order. The tree nests a leaf's range under the hook that opened it (the hook's
    frame ends first), not around the leaf's forward, so a range is a span of time here: what
    starts within one is inside that leaf (torch's list nests by time alone, the same thing)."""
    found: list[Any] = []
    ends: list[int] = []  # the ends of the leaves' ranges open at this event's start, outermost first
    stack = list(reversed(roots))
    while stack:
        e = stack.pop()  # depth first, children in order: by start time
        while ends and ends[-1] < e.start_time_ns:
            ends.pop()
        if e.name.startswith(RANGE):
            ends.append(e.end_time_ns)
        elif not ends:
            if e.name.startswith("aten::"):
                found.append(e)  # not what it calls
                continue
            stack.extend(reversed(e.children))
        elif e.end_time_ns > ends[0]:  # the hook that closes a range: what runs there after it is outside
            stack.extend(reversed(e.children))
    return found


def _time(e: Any, device: str) -> float:
    """An event's time: its kernels' device time (GPU), its CPU time (CPU)."""
    return float(e.device_time_total if device == "cuda" else e.cpu_time_total)


def _totals(events: list[Any], device: str) -> list[float]:
    """The model's time in each repeat: every kernel it launched (GPU), its CPU time (CPU)."""
    calls = sorted((e for e in events if str(e.device_type).endswith("CPU") and e.name.startswith(CALL)),
                   key=lambda e: int(e.name[len(CALL):]))
    return [_time(e, device) for e in calls]


def _outside(events: list[Any]) -> list[Any]:
    """The outermost ops that no leaf module's range holds: the model's own calls, in order."""
    return [e for e in events if str(e.device_type).endswith("CPU") and e.name.startswith("aten::")
            and not _inside(e, lambda p: p.name.startswith((RANGE, "aten::")))]


def _attribute(events: list[Any], device: str, sites: list[str | None]) -> list[dict[str, Any]]:
    """Time per leaf module (its range) and per call site (the model file's line that called an
    op outside every leaf; `sites`: those lines for one call's ops, in order) in each repeat,
    with the names of their kernels or top ops; time_us is the median over the repeats."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}

    def add(kind: str, name: str, e: Any) -> None:
        row = rows.setdefault((kind, name), {"kind": kind, "name": name, "samples_us": [0.0] * REPEATS, "count": 0,
                                             "kernels": {}})
        row["samples_us"][_repeat(e)] += _time(e, device)
        row["count"] += 1
        for k, t in _kernels(e, device).items():
            row["kernels"][k] = row["kernels"].get(k, 0.0) + t / REPEATS

    for e in events:
        if str(e.device_type).endswith("CPU") and e.name.startswith(RANGE):
            add("module", e.name[len(RANGE):], e)
    outside = _outside(events)
    aligned = len(outside) == len(sites) * REPEATS  # the same ops each call: line i is op i's
    for i, e in enumerate(outside):
        site = sites[i % len(sites)] if aligned and sites else None
        add("call site", site or e.name, e)
    for r in rows.values():
        # The median over the repeats: one call stalled by a busy machine does not move it.
        r["calls"] = max(1, round(r.pop("count") / REPEATS))
        r["time_us"] = statistics.median(r["samples_us"])
    total = sum(r["time_us"] for r in rows.values()) or 1.0
    out = []
    for r in sorted(rows.values(), key=lambda r: -r["time_us"]):
        kernels = sorted(r["kernels"].items(), key=lambda kv: -kv[1])[:3]
        out.append({**r, "share": r["time_us"] / total, "kernels": [{"name": k, "time_us": t} for k, t in kernels]})
    return out


def _repeat(e: Any) -> int:
    """The index of the profiled model call an event belongs to."""
    p = e.cpu_parent
    while p is not None and not p.name.startswith(CALL):
        p = p.cpu_parent
    return int(p.name[len(CALL):]) if p is not None else 0


def _inside(e: Any, test: Any) -> bool:
    p = e.cpu_parent
    while p is not None:
        if test(p):
            return True
        p = p.cpu_parent
    return False


def _site(e: Any, model_file: str) -> str | None:
    """`model.py:42 aten::matmul`: the nearest frame of the model file above the op (an event
    of the profiler's tree)."""
    p = e.parent
    while p is not None:
        name = str(p.name)
        if model_file in name and "(" in name:
            path, _, rest = name.partition("(")
            return f"{Path(path).name}:{rest.split(')')[0]} {e.name}"
        p = p.parent
    return None


def _kernels(e: Any, device: str) -> dict[str, float]:
    """The kernels (GPU) or the outermost ops (CPU) under an event, with their times."""
    found: dict[str, float] = {}
    stack = [e]
    while stack:
        x = stack.pop()
        if device == "cuda":
            for k in getattr(x, "kernels", []) or []:
                found[k.name] = found.get(k.name, 0.0) + float(k.duration)
        elif x is not e and x.name.startswith("aten::"):  # the outermost ops, not what they call
            found[x.name] = found.get(x.name, 0.0) + float(x.cpu_time_total)
            continue
        stack.extend(x.cpu_children)
    return found


def _leaf_info(torch: Any, name: str, leaf: Any, call: dict[str, Any] | None, device: str) -> dict[str, Any]:
    cls = type(leaf)
    info: dict[str, Any] = {"path": name, "type": f"{cls.__module__}.{cls.__qualname__}", "class": cls.__name__,
                            "ctor": None, "ctor_names": None, "ctor_keywords": [], "param_dtype": None, "inputs": None,
                            "shapes": {}, "flops": None, "min_bytes": None, "refused": None}
    if call is None:
        info["refused"] = "never called in a forward pass"
        return info
    try:
        info["inputs"] = [_input_spec(torch, a) for a in call["args"]]
    except ValueError as e:
        info["refused"] = str(e)
    if call["kwargs"]:
        info["refused"] = f"called with keyword arguments ({', '.join(call['kwargs'])})"
    state = leaf.state_dict()
    info["shapes"] = {k: list(v.shape) for k, v in state.items()}  # what swap_in checks before swapping
    info["param_dtype"] = str(next(iter(state.values())).dtype).replace("torch.", "") if state else None
    info["flops"], info["min_bytes"] = _cost(torch, leaf, call)
    if info["refused"] is None:
        try:
            info["ctor_names"], info["ctor"], info["ctor_keywords"] = _rebuild(torch, leaf, call, device)
        except ValueError as e:
            info["refused"] = str(e)
    return info


def _input_spec(torch: Any, x: Any) -> dict[str, Any]:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"called with a {type(x).__name__} argument, not only tensors")
    spec: dict[str, Any] = {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
    if not x.is_floating_point() and x.dtype != torch.bool and x.numel():
        spec["low"], spec["high"] = int(x.min()), int(x.max())
    return spec


def _cost(torch: Any, leaf: Any, call: dict[str, Any]) -> tuple[float | None, float | None]:
    from torch.utils.flop_counter import FlopCounterMode

    def nbytes(v: Any) -> int:
        if isinstance(v, torch.Tensor):
            return v.nbytes
        if isinstance(v, (list, tuple)):
            return sum(nbytes(x) for x in v)
        return 0

    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            leaf(*call["args"])
    except Exception:  # noqa: BLE001 - a module the counter cannot follow has no FLOP count; its time still counts
        return None, None
    state = sum(t.nbytes for t in leaf.state_dict().values())
    return float(counter.get_total_flops()), float(nbytes(call["args"]) + state + nbytes(call["out"]))


def _rebuild(torch: Any, leaf: Any, call: dict[str, Any], device: str) -> tuple[list[str], list[Any], list[str]]:
    """The constructor's (names, values, the names it takes by keyword only) that rebuild `leaf`."""
    cls = type(leaf)
    if not cls.__module__.startswith("torch.nn"):
        raise ValueError(f"{cls.__name__} is the model's own class, not a torch.nn module: okgit rebuilds only "
                         "torch.nn leaves (their constructor arguments are known)")
    if getattr(torch.nn, cls.__name__, None) is not cls:
        raise ValueError(f"{cls.__module__}.{cls.__name__} is not torch.nn.{cls.__name__}")
    if "Dropout" in cls.__name__:
        raise ValueError(f"{cls.__name__} draws random numbers: nothing to check a kernel against")
    names, values, keywords = [], [], []
    for pname, p in list(inspect.signature(cls.__init__).parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or pname in ("device", "dtype"):
            continue
        if hasattr(leaf, pname):
            value = getattr(leaf, pname)
            if isinstance(value, torch.Tensor) or (value is None and isinstance(p.default, bool)):
                value = value is not None  # `bias`: a Parameter when True, None when False
        elif p.default is not p.empty:
            value = p.default
        else:
            raise ValueError(f"{cls.__name__} takes {pname}, which the module does not keep")
        if not _literal(value):
            raise ValueError(f"{cls.__name__}'s {pname} is a {type(value).__name__}, not a plain value")
        names.append(pname)
        values.append(list(value) if isinstance(value, tuple) else value)
        if p.kind == p.KEYWORD_ONLY:
            keywords.append(pname)
    given = [tuple(v) if isinstance(v, list) else v for v in values]
    with torch.device(device):
        twin = cls(*[v for n, v in zip(names, given) if n not in keywords],
                   **{n: v for n, v in zip(names, given) if n in keywords})
    try:
        twin.load_state_dict(leaf.state_dict(), strict=True)
    except RuntimeError as e:
        raise ValueError(f"{cls.__name__} rebuilt from its attributes does not hold the same parameters: "
                         f"{str(e).splitlines()[0]}") from None
    twin = twin.to(device=device, dtype=next(iter(leaf.state_dict().values())).dtype) if leaf.state_dict() else twin
    twin.train(leaf.training)
    with torch.no_grad():
        again = twin(*call["args"])
        # As strict as the module itself: bit for bit, unless the original does not repeat its
        # own outputs bit for bit (some GPU kernels), then within float32 rounding.
        same = chains.same(torch, again, call["out"]) or (
            not chains.same(torch, leaf(*call["args"]), call["out"]) and chains.close(torch, again, call["out"]))
    if not same:
        raise ValueError(f"{cls.__name__} rebuilt from its attributes gives other outputs")
    return names, values, keywords


def _literal(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return all(_literal(x) for x in v)
    return isinstance(v, LITERALS)


if __name__ == "__main__":
    sys.exit(main())
