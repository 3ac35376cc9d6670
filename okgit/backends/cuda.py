"""CUDA backend: compile gate and launch counting for extensions built with
`torch.utils.cpp_extension.load_inline` / `load`, inside the worker.

The worker replaces both functions before the candidate is imported. On a GPU the real
build runs; a build failure becomes `CudaCompileError` (status compile_error) and the module
comes back wrapped so that every call of one of its functions counts as a launch of the
backend. On a CPU machine the CUDA sources are compiled to an object file with nvcc (no link:
a CPU build of torch has no CUDA libraries) and `CompiledNotRun` stops the candidate there:
the compile gate is real, the rest needs a GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Callable

from okgit.backends.triton import LaunchCounter

# What load_inline itself puts in front of CUDA sources.
_CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
_GLOBAL_FN = re.compile(r"__global__\s+(?:[\w:<>,\s\*]+?\s+)?(\w+)\s*\(")
_MISSING_HEADER = re.compile(r"fatal error: ([\w/\.]+): No such file or directory")


class CudaCompileError(Exception):
    """The candidate's CUDA/C++ sources do not compile."""


class CompiledNotRun(Exception):
    """CPU machine: the CUDA sources compiled; running them needs a GPU."""


def install_load_hooks(counter: LaunchCounter, kernel_names: set[str], *, run_on_gpu: bool,
                       nvcc_timeout_s: float = 300.0) -> None:
    """Replace cpp_extension.load_inline / load with counting (GPU) or compile-only (CPU) versions."""
    import torch.utils.cpp_extension as ext

    real_inline, real_load = ext.load_inline, ext.load

    def load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
        cuda = _as_list(cuda_sources)
        kernel_names.update(global_functions("\n".join(cuda)))
        if not run_on_gpu:
            compile_only("\n".join(cuda), kwargs.get("extra_cuda_cflags"), timeout_s=nvcc_timeout_s)
            raise CompiledNotRun(f"{name}: CUDA sources compiled with nvcc; running them needs a GPU")
        return _CountingModule(_build(real_inline, name, cpp_sources, cuda_sources, *args, **kwargs), counter)

    def load(name: str, sources: Any, *args: Any, **kwargs: Any) -> Any:
        files = [Path(s) for s in _as_list(sources)]
        cuda = "\n".join(f.read_text() for f in files if f.suffix in (".cu", ".cuh"))
        kernel_names.update(global_functions(cuda))
        if not run_on_gpu:
            if cuda:
                compile_only(cuda, kwargs.get("extra_cuda_cflags"), timeout_s=nvcc_timeout_s, prelude="")
            raise CompiledNotRun(f"{name}: sources compiled with nvcc; running them needs a GPU")
        return _CountingModule(_build(real_load, name, sources, *args, **kwargs), counter)

    ext.load_inline = load_inline
    ext.load = load


def global_functions(cuda_source: str) -> set[str]:
    """Names of `__global__` kernels, to tell the candidate's kernels from library ones in a profile."""
    return set(_GLOBAL_FN.findall(cuda_source))


def compile_only(cuda_source: str, extra_flags: list[str] | None = None, *, timeout_s: float = 300.0,
                 prelude: str = _CUDA_PRELUDE) -> None:
    """nvcc -c against torch's headers. Raises CudaCompileError with nvcc's first errors.

    A header missing from this machine's toolkit (e.g. cusparse.h on a compiler-only install)
    is not the candidate's fault: that case compiles nothing and says so in CompiledNotRun.
    """
    nvcc = shutil.which("nvcc")
    if not cuda_source.strip():
        return
    if nvcc is None:
        raise CompiledNotRun("nvcc not found: CUDA sources not compiled on this machine")
    from torch.utils.cpp_extension import include_paths

    with tempfile.TemporaryDirectory(prefix="okgit-nvcc-") as tmp:
        src = Path(tmp) / "candidate.cu"
        src.write_text(prelude + cuda_source)
        cmd = [nvcc, "-c", "-std=c++17", "-w", "--expt-relaxed-constexpr", "-DTORCH_EXTENSION_NAME=okgit_candidate",
               *(f"-I{p}" for p in include_paths()), f"-I{sysconfig.get_paths()['include']}",
               *(extra_flags or []), str(src), "-o", str(Path(tmp) / "candidate.o")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
    if proc.returncode == 0:
        return
    log = (proc.stderr + proc.stdout).replace(str(src), "candidate.cu")
    missing = _MISSING_HEADER.findall(log)
    if missing and "error:" not in _MISSING_HEADER.sub("", log):
        raise CompiledNotRun(f"CUDA sources not compiled: header {missing[0]} missing on this machine")
    raise CudaCompileError(_first_errors(log))


def _build(real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return real(*args, **kwargs)
    except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
        raise CudaCompileError(_first_errors(str(e))) from None


def _first_errors(log: str, limit: int = 12) -> str:
    lines = [ln for ln in log.splitlines() if "error" in ln.lower()] or log.splitlines()
    return "\n".join(lines[:limit])[:2000]


def _as_list(sources: Any) -> list[str]:
    if sources is None:
        return []
    if isinstance(sources, str):
        return [sources]
    if isinstance(sources, os.PathLike):
        return [os.fspath(sources)]
    return [str(s) for s in sources]


class _CountingModule:
    """The built extension, with each function call counted as a launch of the CUDA backend."""

    def __init__(self, module: Any, counter: LaunchCounter) -> None:
        self._module = module
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if not callable(attr) or name.startswith("__"):
            return attr
        counter = self._counter

        def call(*args: Any, **kwargs: Any) -> Any:
            return counter.launched(name, lambda: attr(*args, **kwargs))

        return call

