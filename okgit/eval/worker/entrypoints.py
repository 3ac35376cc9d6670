"""The entry points a worker relies on, checked after the candidate ran.

The timer binds C-level functions (okgit.eval.worker.timing) and the launch counters wrap Triton's and
torch's extension loaders; a candidate can still rebind the public names around them (with
getattr/setattr on strings, which the static scan cannot read). Such a rebinding changes nothing
the worker measures, but it is an attempt on the evaluation: `Snapshot` records what each name
is bound to before the candidate is imported, and `changed()` lists those that differ after it
ran, with any torch function or dispatch mode it left active.
"""

from __future__ import annotations

from typing import Any

# (module path, attribute path): what the worker's timing, comparisons and counters go through
WATCHED = [
    ("torch.cuda", "Event"), ("torch.cuda", "Event.record"), ("torch.cuda", "Event.elapsed_time"),
    ("torch.cuda", "Event.synchronize"), ("torch.cuda", "synchronize"), ("torch.cuda", "_sleep"),
    ("torch.cuda", "current_stream"), ("torch.Tensor", "zero_"), ("torch.Tensor", "copy_"),
    ("torch.Tensor", "clone"), ("torch.Tensor", "__eq__"), ("torch", "equal"), ("torch", "isnan"),
    ("torch", "allclose"), ("time", "perf_counter"), ("statistics", "median"),
    ("torch.utils.cpp_extension", "load_inline"), ("torch.utils.cpp_extension", "load"),
    ("triton.runtime.jit", "JITFunction.run"), ("triton.runtime.interpreter", "InterpretedFunction.run"),
]


class Snapshot:
    def __init__(self) -> None:
        self.bound = {(m, a): _resolve(m, a) for m, a in WATCHED}

    def changed(self) -> list[str]:
        import torch

        names = [f"{m}.{a}" for (m, a), obj in self.bound.items() if _resolve(m, a) is not obj]
        if torch._C._len_torch_function_stack() > 0:
            names.append("a torch function mode left active")
        if torch._C._len_torch_dispatch_stack() > 0:
            names.append("a torch dispatch mode left active")
        return names


def _resolve(module: str, attr: str) -> Any:
    import importlib

    try:
        obj: Any = importlib.import_module(module)
    except ImportError:
        return None
    for part in attr.split("."):
        # class attributes as stored (a function, not a bound method), so identity holds
        obj = obj.__dict__.get(part, getattr(obj, part, None)) if isinstance(obj, type) else getattr(obj, part, None)
    return obj
