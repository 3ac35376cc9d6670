"""The gates a candidate's worker decides while it loads the candidate: the file must build, and
run on the problem's device. A failure ends the job there (the worker's `failure`)."""

from __future__ import annotations

from okgit.eval.parent.gates.base import Gate, gate


@gate(10)
class Compile(Gate):
    name = "compile"
    rule = "The file must import and build (Triton JIT, load_inline) without error."
    before_calls = True


@gate(20)
class Device(Gate):
    name = "device"
    rule = "It must run on the device the reference runs on; no device selection of its own."
    before_calls = True
    shown_passed = False  # it fails only where CUDA code is compiled and cannot run (a CPU machine)
