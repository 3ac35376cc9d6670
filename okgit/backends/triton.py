"""Triton backend: counting kernel launches inside the worker, and the interpreter run as kernels compile.

Launches are counted by wrapping `run` on the classes that every `kernel[grid](...)` call goes
through: `JITFunction` (compiled) and `InterpretedFunction` (TRITON_INTERPRET=1).
`KernelInterface.__getitem__` returns `lambda: self.run(grid=..., warmup=False, ...)` and
the autotuner and heuristics wrappers call `fn.run` too, so one class-level wrapper sees every
launch, in triton 3.2 to 3.9 alike. It is installed before the candidate is imported, so the
candidate's kernels are created with the wrapped classes.

A launch counts once it returned: a kernel that fails to compile at its first launch, caught
by the candidate and replaced by a library call, launched nothing. Such a failure is recorded
apart (`failed`), since a call that went on without its kernel computed its outputs some other
way; failures inside Triton's own autotuner (configurations it prunes) are not findings.
"""

from __future__ import annotations

from collections import Counter
from types import FrameType
from typing import Any, Callable


class LaunchCounter:
    """Completed launches, and launches that raised, per kernel name since the last `reset()`."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.dry = False  # count launches without running them (a call on the meta device)

    def reset(self) -> None:
        self.counts.clear()
        self.failed.clear()

    def launched(self, name: str, launch: Callable[[], Any]) -> Any:
        """Run one launch and count it by how it ended (dry: count it, run nothing)."""
        if self.dry:
            self.counts[name] += 1
            return None
        try:
            result = launch()
        except BaseException:
            if not _inside_autotuner():
                self.failed[name] += 1
            raise
        self.counts[name] += 1
        return result

    def total(self) -> int:
        return sum(self.counts.values())


def install_launch_counter() -> LaunchCounter:
    """Wrap Triton's launch path once per process; returns the counter it feeds."""
    from triton.runtime import jit as triton_jit

    counter = LaunchCounter()
    classes: list[Any] = [triton_jit.JITFunction]  # triton's classes: `run` is replaced below
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:  # a triton without the interpreter: compiled launches only
        pass
    for cls in classes:
        cls.run = _counting(cls.run, counter)
    return counter


def interpret_on_cpu() -> None:
    """Triton kernels of this process run on the CPU under the interpreter, as the evaluator's CPU
    workers run them (`interpret_as_compiled`). Call it before Triton is first imported: the
    interpreter is chosen at import."""
    import os

    os.environ["TRITON_INTERPRET"] = "1"
    interpret_as_compiled()


def interpret_as_compiled() -> None:
    """Triton's interpreter (TRITON_INTERPRET=1) without its int32 overflow sanitizer outside
    Triton's debug mode, as a GPU compiles kernels. The interpreter redoes every int32 add,
    subtract and multiply in int64 and compares the result with int32's range, then drops the
    assertion those comparisons feed unless the debug mode is on: about a third of a kernel's
    time under the interpreter for nothing (KernelBench's pooling kernels, 2026-12-06). Compiled
    kernels leave the sanitizer out outside the debug mode (Triton's CUDA backend). For this
    process; a Triton without the option is left as it is."""
    import dataclasses

    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is not None and hasattr(options, "sanitize_overflow"):
        builder.options = dataclasses.replace(options, sanitize_overflow=bool(options.debug))  # type: ignore[union-attr]


def _counting(run: Callable[..., Any], counter: LaunchCounter) -> Callable[..., Any]:
    def run_counted(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if warmup:
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        return counter.launched(_kernel_name(self), lambda: run(self, *args, grid=grid, warmup=warmup, **kwargs))

    return run_counted


def _kernel_name(fn: Any) -> str:
    inner = getattr(fn, "fn", None)
    inner_name = getattr(inner, "__name__", None)
    if inner_name:
        return inner_name
    return getattr(fn, "__name__", "triton_kernel")


def _inside_autotuner() -> bool:
    """Whether Triton's autotuner is benchmarking this launch (it drops configurations that fail)."""
    import sys

    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.replace("\\", "/").endswith("triton/runtime/autotuner.py"):
            return True
        frame = frame.f_back
    return False
