"""`python -m okgit.eval.worker.zygote --device cpu|cuda`: forks workers and judges with torch and
triton already imported.

A worker's start is mostly its imports: about 1.4 s of CPU for torch and triton on a CPU-only
machine, more with CUDA's build, for every candidate (each runs in a process of its own). This
process imports them once and then only forks: each request (okgit.eval.parent.forks) brings the
worker's stdin, stdout, stderr and a status pipe, its directory, its program (a worker or a judge)
and its own arguments (a timing-only worker's flag). The fork becomes the
worker's reaper (okgit.eval.protocol.reaper: a session of its own, no core dumps, a child
subreaper), writes its pid on the status pipe, forks the worker proper, which runs MODULE as
`python -m MODULE --device ... ARGS` would, and when the worker has exited writes its exit code there
and ends.

What a forked worker starts from is what a spawned one would have after its imports: this process
never initialises CUDA (a CUDA context does not survive a fork; the worker makes its own, under
the device's lock, as a spawned one does), never loads an op or a candidate, and its environment
is the worker's (okgit.eval.parent.sandbox.worker_env: no credential), fixed when it started.
It ends when the parent closes its end of the socket (or dies).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import runpy
import select
import socket
import sys
import traceback
from typing import Any

from okgit.eval.protocol.reaper import become_subreaper, outlive

# What the programs import before they say ready, loaded here once: their own modules pull in
# torch (and the judge's, the worker's op-file code). A worker also gets Inductor's Triton
# runtime, which every Inductor seed imports: about a second of each seed's load in a fresh
# process (0.9-1.3 s on a CPU machine), paid here once instead. The judge counts the reference's
# FLOPs (okgit.eval.judge.prepared.count_cost): FlopCounterMode's module hooks import torch._dynamo
# at the first call, 1.5-3 s of CPU on a CPU machine that every judge paid after its fork. One
# zygote loads both programs' imports and forks either: where the judge's environment is the
# workers' (a CPU), a run's one zygote serves both, and a CPU run's imports took 4.6 s of CPU
# instead of 5.2 and 5.3 in two zygotes (2026-12-07, a 2-core machine).
PROGRAMS = ("okgit.eval.worker", "okgit.eval.judge")
PRELOAD = ("torch", "numpy", "okgit.eval.judge.process", "triton", "okgit.eval.worker.candidate",
           "torch._inductor.runtime.triton_helpers", "torch._dynamo")
# triton_helpers imports triton; torch._dynamo may refuse a Python its torch does not support
OPTIONAL = {"triton", "torch._inductor.runtime.triton_helpers", "torch._dynamo"}
# On a GPU a judge is forked as soon as its own modules are in, the rest of PRELOAD imported after
# it: a run's first judge waited for all of it (torch._dynamo and Inductor's runtime: the judge's
# start came 7-12 s into a run instead of 3 on an H100, KernelBench's sweep on 6ce8fd3 against
# a96f65a), and the first profiling pass's worker, started once the judge is, then held the
# device while the reference's timing waited. That judge imports torch._dynamo at its FLOP count,
# beside the zygote; the judges after it (a sweep's, a campaign's) fork with it preloaded. On a
# CPU the run's one zygote forks judge and workers after all of it: there both would import
# torch._dynamo twice on a machine whose cores are the limit.
EARLY = {"okgit.eval.judge": PRELOAD[:3]}
REQUEST_BYTES = 1 << 16
FDS = 4  # stdin, stdout, stderr, status


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="okgit.eval.worker.zygote")
    parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
    parser.add_argument("--socket", type=int, required=True, help="the parent's socket, an inherited descriptor")
    args = parser.parse_args(argv)
    requests = socket.socket(fileno=args.socket)
    loaded: list[str] = []
    waiting: list[tuple[dict[str, Any], list[int]]] = []  # asked for while importing, not ready yet
    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except (ImportError, RuntimeError):
            if module not in OPTIONAL:  # a CPU-only machine may lack triton; the worker says so itself
                raise
        loaded.append(module)
        _refuse_cuda()
        if args.device == "cuda":
            while select.select([requests], [], [], 0.0)[0]:
                request = _receive(requests)
                if request is None:
                    return
                waiting.append(request)
            for request in [r for r in waiting if _ready(r[0], loaded)]:
                waiting.remove(request)
                _fork(requests, request, args.device)
    for request in waiting:
        _fork(requests, request, args.device)
    while True:
        ready, _, _ = select.select([requests], [], [], 1.0)
        _collect()
        if not ready:
            continue
        request = _receive(requests)
        if request is None:
            return  # the parent closed its end: no more workers
        _fork(requests, request, args.device)


def _refuse_cuda() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # a fork would inherit a context it cannot use
        sys.exit("okgit zygote: CUDA was initialised while importing; workers are spawned instead")


def _ready(request: dict[str, Any], loaded: list[str]) -> bool:
    """Whether what the request's program needs before it starts is imported (EARLY, else all)."""
    return all(m in loaded for m in EARLY.get(str(request.get("program")), PRELOAD))


def _receive(requests: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The parent's next request and its descriptors; None once the parent closed its end."""
    data, fds, _, _ = socket.recv_fds(requests, REQUEST_BYTES, FDS)
    if not data:
        return None
    try:
        return json.loads(data), fds
    except ValueError:
        return {}, fds  # its reaper says on the worker's stderr that it names no program


def _fork(requests: socket.socket, request: tuple[dict[str, Any], list[int]], device: str) -> None:
    """The request's worker forked below a reaper; the request's descriptors closed here."""
    asked, fds = request
    try:
        if len(fds) == FDS and os.fork() == 0:
            _reaper(requests, asked, device, fds)
    except OSError as e:
        if len(fds) > 2:
            os.write(fds[2], f"okgit zygote: could not fork the worker: {e}\n".encode())
    finally:
        for fd in fds:
            os.close(fd)


def _collect() -> None:
    """Reap the reapers that ended (their exit codes reached the parent on their status pipes)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _reaper(requests: socket.socket, request: dict[str, Any], device: str, fds: list[int]) -> None:
    """The fork's life, as the worker's reaper; never returns."""
    code = 1
    try:
        requests.close()
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        stdin, stdout, stderr, status = fds
        for fd, std in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, std)
            os.close(fd)
        program = request.get("program")
        if program not in PROGRAMS:  # said on the worker's stderr, as the except below says
            raise ValueError(f"not a program a zygote forks: {program!r}")
        os.chdir(request["cwd"])
        os.write(status, f"{os.getpid()}\n".encode())
        become_subreaper()
        worker = os.fork()
        if worker == 0:
            os.close(status)
            _worker(program, device, [str(a) for a in request.get("args", [])])
        os.write(status, f"{outlive(worker)}\n".encode())
        code = 0
    except BaseException:  # noqa: BLE001 - said on the worker's stderr; the parent reads no exit code
        traceback.print_exc()
    finally:
        os._exit(code)


def _worker(program: str, device: str, args: list[str]) -> None:
    """The worker proper: MODULE run as `python -m MODULE --device DEVICE ARGS` would; never returns."""
    code: int | str | None = 0
    sys.argv = [program, "--device", device, *args]
    sys.path[0] = os.getcwd()  # as `python -m` puts its directory first
    try:
        runpy.run_module(program, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
    except BaseException:  # noqa: BLE001 - as Python would end: the traceback on stderr, code 1
        traceback.print_exc()
        code = 1
    if isinstance(code, str):
        print(code, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


if __name__ == "__main__":
    main()
