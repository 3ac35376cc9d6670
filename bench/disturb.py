"""What disturbs a timing on a shared GPU (GPU): the final gate's rounds on the H200's sweep had
one baseline round far off the others in 3 of 24 problems (L1/66: 15514 us once, 4881-4890 us in
four rounds), although the device's lock held every other process's kernels off the GPU (the
ledgers' holds never overlapped). Work that holds no lock is what is left: a process freeing
device memory (the caching allocator's empty_cache, or a worker's exit with tens of GB) or
creating a context. This times one memory-bound call in rounds (CUDA events, median of each
round's samples) while a second process does, in turn:

- `idle`: nothing;
- `free`: allocates and frees 16 GiB (empty_cache) in a loop;
- `exit`: starts processes that each touch 16 GiB of device memory and exit;
- `context`: starts processes that only create a CUDA context and exit;
- `profiler`: starts processes that only open and close a profiler session (CUDA activities, no
  kernel) and exit: whether a start's profiler session, 3.6-4.2 s of each start on the H200,
  need hold the device's lock (bench/starts.py asks whether it may come first);
- `session`: starts processes that bring CUDA up, then open and close an empty profiler session
  and exit: a start's order today, with the session (3.4-4.5 s of a 5-6 s start on the H200's
  sweep on 9d7c409, where timings waited behind starts for 198 of their 359 s of waiting) left
  outside the lock; against `context`, whether the session itself disturbs a timing, which
  decides whether a start may give the lock back before it (starts.py: opened first, the session
  brings CUDA up itself, so it cannot come before the hold);
- `start`: starts processes that do exactly what an okgit worker's start does under the device's
  lock (okgit.eval.worker.calls.start and warm_up: CUDA up, a first allocation, the flags'
  switch, a Triton launch) and exit: whether that hold (26 of the a96f65a sweep's 107 device
  minutes had a start holding the device, timings waiting behind them) protects any timing;
- `busy`: a process running kernels of its own without pause (the control: work that should show).

During each mode's rounds it also asks NVML (the driver's management library, through ctypes)
which other processes it saw using the GPU's SMs (nvmlDeviceGetProcessUtilization): whether the
evaluator could tell, during a timing, that a process outside the device's lock ran work beside it.

    python bench/disturb.py [--rounds 8] [--gib 16] [--modes idle,start,context,idle]

Prints each mode's round medians, their spread and each round's slowest sample, and the other
processes NVML saw busy; writes disturb.json under $OUT (default /tmp/out).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

DISTURBER = r'''
import sys, time, torch
mode, gib = sys.argv[1], float(sys.argv[2])
n = int(gib * (1 << 30) // 4)
def running():  # the GPU work has begun: the timing rounds may start
    print("running", flush=True)
if mode == "free":
    while True:
        x = torch.empty(n, device="cuda"); x.fill_(1.0); torch.cuda.synchronize(); running(); del x
        torch.cuda.empty_cache(); time.sleep(0.05)
elif mode == "exit":
    x = torch.empty(n, device="cuda"); x.fill_(1.0); torch.cuda.synchronize(); running()
elif mode == "context":
    torch.cuda.init(); torch.empty(1, device="cuda"); running()
elif mode == "profiler":  # a start's profiler session, opened first, with no kernel of its own
    from torch.profiler import ProfilerActivity, profile
    running()
    with profile(activities=[ProfilerActivity.CUDA]):
        pass
elif mode == "session":  # CUDA up first, then an empty profiler session: the start's step left outside its hold
    from torch.profiler import ProfilerActivity, profile
    torch.empty(1, device="cuda"); torch.cuda.synchronize(); running()
    with profile(activities=[ProfilerActivity.CUDA]):
        pass
elif mode == "start":  # an okgit worker's start, as it runs under the device's lock
    from okgit.eval.worker import calls
    calls.start(torch, "cuda"); calls.warm_up(torch, "cuda"); torch.cuda.synchronize(); running()
elif mode == "busy":
    x = torch.randn(4096, 4096, device="cuda")
    while True:
        x = (x @ x).clamp_(-1, 1); torch.cuda.synchronize(); running()
'''


class _Sample(ctypes.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Nvml:
    """Per-process SM utilization samples of GPU 0 since a time stamp; `error` says why not, if not."""

    def __init__(self) -> None:
        self.error = ""
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
            self.handle = ctypes.c_void_p()
            self._check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
            self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)), "nvmlDeviceGetHandleByIndex_v2")
        except (OSError, RuntimeError) as e:
            self.error = str(e)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")

    def busy_since(self, stamp_us: int) -> dict[int, int]:
        """pid -> its highest SM utilization (%) in the samples since `stamp_us` (NVML's microseconds)."""
        if self.error:
            return {}
        count = ctypes.c_uint(0)
        rc = self.lib.nvmlDeviceGetProcessUtilization(self.handle, None, ctypes.byref(count), ctypes.c_ulonglong(stamp_us))
        if rc == 6 or count.value == 0:  # NVML_ERROR_NOT_FOUND: no sample since then
            return {}
        samples = (_Sample * count.value)()
        rc = self.lib.nvmlDeviceGetProcessUtilization(self.handle, samples, ctypes.byref(count), ctypes.c_ulonglong(stamp_us))
        if rc != 0:
            self.error = f"nvmlDeviceGetProcessUtilization returned {rc}"
            return {}
        busy: dict[int, int] = {}
        for s in samples[: count.value]:
            busy[s.pid] = max(busy.get(s.pid, 0), s.smUtil)
        return busy


ROUND_GAP_S = 1.5  # the rounds span about as long as an `exit` or `context` process's start, so that one falls in them


def _rounds(torch, rounds: int, samples: int = 20) -> tuple[list[float], list[float]]:
    """Each round's median and slowest sample (us): a disturbance shorter than half a round's
    samples leaves the median alone (as it would okgit's timer) but shows in the slowest."""
    x = torch.randn(1 << 28, device="cuda")  # 1 GiB: about 0.6 ms a pass on an H200
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    medians, slowest = [], []
    for _ in range(rounds):
        times = []
        for _ in range(samples):
            start.record()
            x.mul_(1.0000001)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        medians.append(round(statistics.median(times), 1))
        slowest.append(round(max(times), 1))
        time.sleep(ROUND_GAP_S)
    return medians, slowest


def _disturber(mode: str, gib: float, stop: threading.Event, under_way: threading.Event) -> None:
    """Runs `mode` in other processes until `stop` is set (`exit`, `context`, `session` and `profiler`: one process after
    another); `under_way` once the first has done its GPU work (a process takes seconds to import
    torch: on 2026-12-05 the rounds, 2 s in all, ended before the disturber began, NVML saw no
    other process during the `busy` control, and its rounds were as fast as idle ones)."""
    command = [sys.executable, "-c", DISTURBER, mode, str(gib)]
    if mode in ("free", "busy"):
        p = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        if p.stdout.readline().strip() == "running":
            under_way.set()
        stop.wait()
        p.kill()
        p.wait()
        return
    while not stop.is_set():
        if subprocess.run(command, check=False, capture_output=True, text=True).stdout.startswith("running"):
            under_way.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--gib", type=float, default=16.0)
    parser.add_argument("--modes", default="idle,free,exit,context,start,session,profiler,busy,idle",
                        help="comma-separated, in order (default: every mode, idle first and last)")
    args = parser.parse_args()
    import torch

    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    _rounds(torch, 1)  # warm
    nvml = Nvml()
    print(f"NVML: {nvml.error or 'per-process utilization read'}", flush=True)
    result: dict = {"nvml_error": nvml.error}
    for mode in args.modes.split(","):
        stop = threading.Event()
        thread = None
        if mode != "idle":
            under_way = threading.Event()
            thread = threading.Thread(target=_disturber, args=(mode, args.gib, stop, under_way), daemon=True)
            thread.start()
            if not under_way.wait(120):
                print(f"{mode:8s} its process never began its GPU work: not timed", flush=True)
                stop.set()
                continue
        stamp_us = int(time.time() * 1e6)
        medians, slowest = _rounds(torch, args.rounds)
        others = {pid: sm for pid, sm in nvml.busy_since(stamp_us).items() if pid != os.getpid()}
        stop.set()
        result.setdefault(mode, []).append(medians)
        result.setdefault(f"{mode}_slowest", []).append(slowest)
        result.setdefault(f"{mode}_others_busy", []).append(others)
        spread = (max(medians) - min(medians)) / statistics.median(medians)
        print(f"{mode:8s} round medians us {medians}  spread {spread:.1%}  slowest samples us {slowest}  "
              f"other processes on the SMs (pid: max %) {others}", flush=True)
        (out / "disturb.json").write_text(json.dumps(result, indent=1))
        if thread is not None:
            thread.join(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
