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
    process; a Triton without the option is left as it is. The language is patched once a
    kernel's run, not again at each helper call (patch_language_once)."""
    import dataclasses

    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is not None and hasattr(options, "sanitize_overflow"):
        builder.options = dataclasses.replace(options, sanitize_overflow=bool(options.debug))  # type: ignore[union-attr]
    patch_language_once()


def patch_language_once() -> None:
    """Triton's interpreter patches triton.language for a kernel's run, then again at every call
    of a @triton.jit helper inside it (a scan of the language's members each time), and the
    second patch changes nothing where the kernel's run patched the same modules: skipped
    there. Inductor's kernels call helpers per element of a reduction (triton_helpers.maximum,
    promote_to_tensor): a third of a seed's time under the interpreter went to those patches
    (tests/inductor/test_inductor_dynamic.py's seeds, 27 s to 19 s). A helper that sees a
    module the kernel did not is patched as before. For this process, once; a Triton without
    these hooks is left as it is."""
    from triton.runtime import interpreter

    original, grid_call = getattr(interpreter, "_patch_lang", None), getattr(interpreter.GridExecutor, "__call__", None)
    if original is None or grid_call is None or not hasattr(interpreter, "_LangPatchScope") \
            or getattr(original, "okgit_once", False):
        return
    import threading

    import triton.language as tl

    # per thread, per kernel run going on: the language modules its patches cover (None: not yet
    # patched); a thread's helpers skip only what its own kernel's run patched
    local = threading.local()

    def patch_lang(fn: Any) -> Any:
        running: list[set[int] | None] = getattr(local, "running", [])
        langs = {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}
        if langs and running and running[-1] is not None and langs <= running[-1]:
            return interpreter._LangPatchScope()  # patched already, until the kernel's run restores it
        scope = original(fn)
        if running:
            running[-1] = (running[-1] or set()) | langs
        return scope

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not hasattr(local, "running"):
            local.running = []
        local.running.append(None)  # the kernel's own patch comes first, in the call below
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            local.running.pop()

    patch_lang.okgit_once = True  # type: ignore[attr-defined]
    patch_lang.okgit_original = original  # type: ignore[attr-defined]  # Triton's own, for tests to compare
    run.okgit_original = grid_call  # type: ignore[attr-defined]
    interpreter._patch_lang = patch_lang
    interpreter.GridExecutor.__call__ = run


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
