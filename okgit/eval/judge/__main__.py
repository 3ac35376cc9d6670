"""`python -m okgit.eval.judge --device cpu|cuda`: the judge process. It starts (CUDA up under the
device's lock, okgit.eval.protocol.start), then answers the parent's requests with the Judge of
okgit.eval.judge.process until the parent closes its pipe; a request that fails is answered with
why, in one line, and what it left on the device is handed back."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from okgit.eval.judge.process import Judge
from okgit.eval.protocol.channel import READY, Channel
from okgit.eval.protocol.jobs import Job
from okgit.eval.protocol.start import device_start
from okgit.eval.worker import calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="okgit.eval.judge")
    parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
    args = parser.parse_args(argv)
    channel = Channel()
    with device_start("judge") as let_go:  # the device shared: CUDA's start and the warm-up never beside a timing
        judge = Judge(args.device)
        let_go()
    # torch.profiler's one-time start, so that the reference's profiled call pays nothing: beside
    # the preparation, not before it (4.8-6.3 s of a judge's start on an H100, 2026-12-05, while
    # the reference waited); the preparation's answer waits for it, so the timing never runs beside it
    judge.profiler_session = calls.open_profiler_aside(args.device)
    judge.phase_file = Path.cwd() / "phase"
    channel.send(READY)
    while (message := channel.receive()) is not None:
        try:
            if message.get("op") == "prepare":
                reply = judge.prepare(Job.from_dict(message["job"]))
            elif message.get("op") == "measure":
                reply = judge.measure()
            elif message.get("op") == "check":
                reply = judge.check(message)
            else:
                reply = {"failure": {"status": "error", "gate": "judge", "message": f"unknown request {message!r}"}}
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which says it in one line
            call = e if isinstance(e, calls.CallFailed) else None  # the reference's own call raised
            text = call.message if call else calls.describe(e)
            full = calls.out_of_memory(e) or "out of memory" in text
            if full and args.device == "cuda":  # what the failed request held, back to the device for the next
                import torch

                torch.cuda.empty_cache()
            reply = {"failure": {"status": call.status if call else "error", "gate": call.gate if call else "judge",
                                 "message": calls.clipped(text), "out_of_memory": full, "free": _free_memory(args.device),
                                 "phase": judge.current}}
        from okgit.eval.worker.own_memory import own_memory

        reply["memory"] = own_memory()
        channel.send(reply)
    os._exit(0)


def _free_memory(device: str) -> list[int] | None:
    if device != "cuda":
        return None
    import torch

    free, total = torch.cuda.mem_get_info()
    return [int(free), int(total)]


main()
