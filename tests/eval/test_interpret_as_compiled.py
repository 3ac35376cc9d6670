"""Triton's interpreter run as a GPU compiles kernels (okgit.backends.triton.interpret_as_compiled):
without the int32 overflow sanitizer, whose checks the interpreter computes and then drops
outside Triton's debug mode; a kernel whose int32 arithmetic wraps on purpose (a linear
congruential hash of each position) gives the same wrapped values either way. The evaluator's CPU
workers run candidates so (okgit.eval.worker.candidate), as do the tests' op runs (tests/oprun.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

KERNEL = textwrap.dedent("""
    import os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    from triton.runtime import interpreter
    if sys.argv[1] == "as-compiled":
        from okgit.backends.triton import interpret_as_compiled
        interpret_as_compiled()

    @triton.jit
    def lcg(y_ptr, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + o, o * 1103515245 + 12345, mask=o < n)

    y = torch.empty(1000, dtype=torch.int32)
    lcg[(8,)](y, 1000, BLOCK=128)
    want = torch.arange(1000, dtype=torch.int32) * 1103515245 + 12345  # torch's int32 wraps
    print(interpreter.interpreter_builder.options.sanitize_overflow, torch.equal(y, want))
""")


def _run(mode: str) -> str:
    proc = subprocess.run([sys.executable, "-c", KERNEL, mode], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def test_the_interpreter_runs_without_the_sanitizer_and_wraps_as_before():
    assert _run("interpreter") == "True True"  # Triton's default: the sanitizer's checks computed
    assert _run("as-compiled") == "False True"
