"""GPU timing inside a worker: CUDA events, L2 flushed before every sample, rotated inputs.

`bind()` captures the timing functions before the candidate is imported, at the level where
nothing written in Python can be swapped under them: the methods of torch's C event type
(`torch._C._CudaEventBase`, an immutable extension type), the C functions behind
torch.cuda.synchronize and torch.cuda._sleep, the C tensor methods, the stream of the worker's
main thread. A candidate that replaces torch.cuda.Event.elapsed_time (through names built at
run time, which the static scan cannot see) changes nothing here; okgit.eval.worker.entrypoints
then names what it replaced, and the median is taken by the parent from the raw samples.

Protocol, per sample s (warm-up samples are the same loop, discarded):
  content c = s mod K, slot b = (s + s div K) mod K: copy input set c into slot b's buffers
  (so a cache keyed on buffer addresses sees new values in old buffers), salt them with
  salt0 + s (okgit.eval.worker.calls.salt_inputs: a few elements moved, so no two samples' contents
  are the same and a cache keyed on contents, addresses or call counts returns an output
  computed for other inputs; salt0 is drawn when the timing starts), zero an L2-sized
  scratch buffer (>= 2x L2), hold the stream with a spin kernel of about 200 us, record start,
  call, record end. The spin lets the host queue the call before its start event fires: the
  events measure the device's time for the call, not how long a loaded host took to launch
  it (in an H200 sweep with 4 problems at once, kernels that time 69-79 us alone timed
  105-163 us without it, and torch.compile of an elementwise op 116 us against 68.8 us in a
  quieter sweep). A call whose launches take longer than the spin still pays for them: its
  time can only grow that way, never shrink.
The outputs of K samples (at least SPOT_CHECKS), picked at random when the timing starts, are cloned with
their content and salt for the judge to check against the reference on the same salted inputs
(timed outputs must still be right). Afterwards one back-to-back batch measures host time against event time and how long a
device-wide synchronize still takes once the timed stream is done: work left running on another
stream shows there.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

_bound: dict[str, Any] = {}


def bind() -> None:
    import torch

    event = torch._C._CudaEventBase
    _bound.update(
        new_event=lambda: event.__new__(event, enable_timing=True),
        record=event.record,
        elapsed=event.elapsed_time,
        event_synchronize=event.synchronize,
        stream=torch.cuda.current_stream(),  # events always on the main stream, whatever the candidate selects
        synchronize=torch._C._cuda_synchronize,
        perf_counter=time.perf_counter,
        zero_=torch._C.TensorBase.zero_,
        copy_=torch._C.TensorBase.copy_,
        clone=torch._C.TensorBase.clone,
        spin=torch._C._cuda_sleep,
    )


HOLD_CYCLES = 400_000  # ~200 us at an H100/H200's ~2 GHz: longer than a loaded host takes to launch a call


@dataclass
class Timed:
    samples_us: list[float]
    median_us: float
    batch_event_us: float  # back-to-back batch, per call, by events
    batch_host_us: float  # the same batch, per call, host clock around launch + event sync
    residual_sync_us: float  # device-wide synchronize after the timed stream finished
    batch_calls: int
    spot: list[Spot] = field(default_factory=list)  # the checked samples' outputs (cloned)


@dataclass
class Spot:
    content: int  # index of the input set
    salt: int  # the salt its inputs had
    out: Any


SPOT_CHECKS = 2  # timed samples whose outputs the judge checks, at the least


def new_salt() -> tuple[int, random.Random]:
    """A salt base no candidate can know before the timing starts, and the generator that picks
    the checked samples from it."""
    salt0 = int.from_bytes(os.urandom(6), "little") + 1
    return salt0, random.Random(salt0)


def prepare_sample(s: int, slots: list[list[Any]], input_sets: list[list[Any]], salt0: int,
                   copy_: Callable[..., Any]) -> tuple[int, int]:
    """Sample s's inputs in their slot: input set s mod K, copied, then salted. (content, slot)."""
    import torch

    from okgit.eval.worker.calls import salt_inputs

    k = len(input_sets)
    c, slot = s % k, (s + s // k) % k
    for dst, src in zip(slots[slot], input_sets[c], strict=True):
        if _is_tensor(dst):
            copy_(dst, src)
    salt_inputs(torch, slots[slot], salt0 + s)
    return c, slot


def l2_flush_buffer(device: Any) -> Any:
    import torch

    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
    return torch.empty(2 * l2 // 4 + 1, dtype=torch.int32, device=device)


def time_calls(fn: Callable[..., Any], input_sets: list[list[Any]], *, warmup: int, samples: int,
               flush: Any) -> Timed:
    """Median event time per call over `samples` samples, after `warmup` identical ones."""
    b = _bound
    new_event, record, elapsed, stream = b["new_event"], b["record"], b["elapsed"], b["stream"]
    synchronize, perf, event_synchronize = b["synchronize"], b["perf_counter"], b["event_synchronize"]
    zero_, copy_, clone, spin = b["zero_"], b["copy_"], b["clone"], b["spin"]
    k = len(input_sets)
    slots = [[clone(x) if _is_tensor(x) else x for x in s] for s in input_sets]
    total = warmup + samples
    events = [(new_event(), new_event()) for _ in range(total)]
    salt0, pick = new_salt()
    # as many as there are input sets (the clones the last sample of each held before), at least SPOT_CHECKS
    checked = set(pick.sample(range(warmup, total), min(max(SPOT_CHECKS, k), samples)))
    spot: list[Spot] = []
    for s in range(total):
        c, slot = prepare_sample(s, slots, input_sets, salt0, copy_)
        zero_(flush)
        spin(HOLD_CYCLES)
        start, end = events[s]
        record(start, stream)
        out = fn(*slots[slot])
        record(end, stream)
        if s in checked:
            spot.append(Spot(c, salt0 + s, _clone_tree(out, clone)))
    synchronize()
    times = [elapsed(start, end) * 1000.0 for start, end in events[warmup:]]

    n = max(k, min(50, samples))
    synchronize()
    start, end = new_event(), new_event()
    h0 = perf()
    record(start, stream)
    for i in range(n):
        fn(*slots[i % k])
    record(end, stream)
    event_synchronize(end)
    h1 = perf()
    synchronize()
    h2 = perf()
    return Timed(
        samples_us=times,
        median_us=median(times),
        batch_event_us=elapsed(start, end) * 1000.0 / n,
        batch_host_us=(h1 - h0) * 1e6 / n,
        residual_sync_us=(h2 - h1) * 1e6,
        batch_calls=n,
        spot=spot,
    )


def median(values: list[float]) -> float:
    """The parent takes the median of the raw samples itself (a worker's figure is not trusted)."""
    return statistics.median(values)


def _clone_tree(out: Any, clone: Callable[[Any], Any]) -> Any:
    if isinstance(out, (tuple, list)):
        return [_clone_tree(o, clone) for o in out]
    return clone(out) if _is_tensor(out) else out


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)
