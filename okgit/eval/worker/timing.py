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
(timed outputs must still be right). Where no judge checks them (`keep_checked=False`: the final
gate's rounds, the search's screen, the reference's own timing), each clone serves the stream check
below and is dropped at once: the timing then holds the input sets, one output and that clone.

Every stream's work (docs/evaluation.md, "Streams"). The events sit on the caller's stream, so
work a call leaves on another stream (a Python side stream, a stream a CUDA source creates, a
non-blocking stream, a graph replayed elsewhere) is outside them. Three checks close that:
- The caller's stream is made current before each call and before each clone, so a candidate that
  switched streams cannot have the evaluator's own reads ordered after its hidden work.
- Escaped outputs: each checked sample's outputs are cloned on the caller's stream right after
  its end event, then compared bit for bit with the same outputs once the whole device is idle.
  Outputs still being written after the call's own stream finished differ: the call returned
  before its work was done, which in a user's program is a race (gate `streams`). The checked
  samples are picked at random, so a call cannot escape on most samples and not on those.
- Fenced samples: FENCED_SAMPLES more calls with the device idle before the start event and a
  device-wide synchronize before the last event, so nothing the call causes, on any stream, can
  fall outside them (less the synchronize's own wake-up, measured on empty calls). Work run on
  another stream while the caller's stream is held (the spin) would make these much slower than
  the samples: the parent then times the call by them (okgit.eval.parent.streams).
Afterwards one back-to-back batch measures host time against event time and how long a
device-wide synchronize still takes once the timed stream is done.
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
    main, set_stream, tensor = torch.cuda.current_stream(), torch._C._cuda_setStream, torch._C.TensorBase
    _bound.update(
        new_event=lambda: event.__new__(event, enable_timing=True),
        record=event.record,
        elapsed=event.elapsed_time,
        event_synchronize=event.synchronize,
        stream=main,  # events always on the main stream, whatever the candidate selects
        use_main=lambda: set_stream(stream_id=main.stream_id, device_index=main.device_index,
                                    device_type=main.device_type),
        synchronize=torch._C._cuda_synchronize,
        perf_counter=time.perf_counter,
        zero_=tensor.zero_,
        copy_=tensor.copy_,
        clone=tensor.clone,
        equal=tensor.equal,
        view=tensor.view,
        spin=torch._C._cuda_sleep,
    )


HOLD_CYCLES = 400_000  # ~200 us at an H100/H200's ~2 GHz: longer than a loaded host takes to launch a call
FENCED_SAMPLES = 5  # calls timed with the whole device idle before and synchronized after


@dataclass
class Timed:
    samples_us: list[float]
    median_us: float
    batch_event_us: float  # back-to-back batch, per call, by events
    batch_host_us: float  # the same batch, per call, host clock around launch + event sync
    residual_sync_us: float  # device-wide synchronize after the timed stream finished
    batch_calls: int
    host_us: list[float] = field(default_factory=list)  # per timed sample: how long the call took the host
    escaped: list[str] = field(default_factory=list)  # checked calls whose outputs changed after their end event
    fenced: list[Fenced] = field(default_factory=list)
    wake_us: list[float] = field(default_factory=list)  # a fenced empty call: the synchronize's own wake-up
    spot: list[Spot] = field(default_factory=list)  # the checked samples' outputs (cloned), where kept


@dataclass
class Fenced:
    """One call timed with the device idle before its start event and a device-wide synchronize
    before `done`: `all_us` spans every stream's work (plus the synchronize's wake-up)."""

    event_us: float  # start to end, on the caller's stream
    all_us: float  # start to done
    host_us: float


@dataclass
class Spot:
    content: int  # index of the input set
    salt: int  # the salt its inputs had
    out: Any


SPOT_CHECKS = 2  # timed samples whose outputs the judge checks, at the least


def checked_count(sets: int, samples: int) -> int:
    """How many samples have their outputs cloned: as many as there are input sets (the clones the
    last sample of each held before), at least SPOT_CHECKS, at most the samples. The judge sizes a
    candidate's checked timing by it (okgit.eval.worker.measure.checked_timing_bytes)."""
    return min(max(SPOT_CHECKS, sets), samples)


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
               flush: Any, checks: bool = True, keep_checked: bool = True) -> Timed:
    """Median event time per call over `samples` samples, after `warmup` identical ones.
    `checks=False`: the samples alone, for code no gate judges from this timing (the sweep's
    baselines: eager, torch.compile, a winner the evaluator judged): no checked sample, no
    fenced calls, no back-to-back batch, whose calls cost as much device time as the samples and
    inform only the gates; the samples and their median are the same protocol's.
    `keep_checked=False`: the checked samples' clones are compared for escaped work and dropped,
    none kept for a judge (`Timed.spot` empty); the same calls, clones and synchronizes. Kept, they
    are as many outputs as there are input sets until the timing ends: an H100's final-gate round
    of KernelBench L1/63 (1 GiB inputs, four sets; 7.97 GiB outputs) ran out of memory holding
    three beside the one in flight, outputs no judge was going to read."""
    b = _bound
    new_event, record, elapsed, stream = b["new_event"], b["record"], b["elapsed"], b["stream"]
    synchronize, perf, event_synchronize = b["synchronize"], b["perf_counter"], b["event_synchronize"]
    zero_, copy_, clone, spin, use_main = b["zero_"], b["copy_"], b["clone"], b["spin"], b["use_main"]
    k = len(input_sets)
    slots = [[clone(x) if _is_tensor(x) else x for x in s] for s in input_sets]
    total = warmup + samples
    events = [(new_event(), new_event()) for _ in range(total)]
    salt0, pick = new_salt()
    checked = set(pick.sample(range(warmup, total), checked_count(k, samples))) if checks else set()
    spot: list[Spot] = []
    host: list[float] = []
    escaped: list[str] = []
    for s in range(total):
        c, slot = prepare_sample(s, slots, input_sets, salt0, copy_)
        zero_(flush)
        spin(HOLD_CYCLES)
        start, end = events[s]
        use_main()
        record(start, stream)
        h0 = perf()
        out = fn(*slots[slot])
        host.append((perf() - h0) * 1e6)
        record(end, stream)
        if s in checked:
            use_main()
            snapshot = _clone_tree(out, clone)
            synchronize()
            if not same_bits(snapshot, out):
                escaped.append(f"sample {s - warmup}")
            if keep_checked:
                spot.append(Spot(c, salt0 + s, snapshot))
            del snapshot
        del out
    synchronize()
    times = [elapsed(start, end) * 1000.0 for start, end in events[warmup:]]
    if not checks:
        return Timed(samples_us=times, median_us=median(times), batch_event_us=0.0, batch_host_us=0.0,
                     residual_sync_us=0.0, batch_calls=0, host_us=host[warmup:])
    fenced, wake = _fenced_calls(fn, slots, input_sets, salt0, flush, first=total)

    n = max(k, min(50, samples))
    synchronize()
    start, end = new_event(), new_event()
    use_main()
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
        host_us=host[warmup:],
        escaped=escaped,
        fenced=fenced,
        wake_us=wake,
        spot=spot,
    )


def _fenced_calls(fn: Callable[..., Any], slots: list[list[Any]], input_sets: list[list[Any]], salt0: int,
                  flush: Any, *, first: int) -> tuple[list[Fenced], list[float]]:
    """FENCED_SAMPLES calls with the device idle before their start event and synchronized before
    their last event, then as many empty ones, whose start-to-done is the synchronize's own wake-up.
    A call escapes nothing here (all its work is inside), so its outputs need no check."""
    b = _bound
    new_event, record, elapsed, stream = b["new_event"], b["record"], b["elapsed"], b["stream"]
    synchronize, perf, use_main = b["synchronize"], b["perf_counter"], b["use_main"]
    fenced: list[Fenced] = []
    for j in range(FENCED_SAMPLES):
        synchronize()
        _, slot = prepare_sample(first + j, slots, input_sets, salt0, b["copy_"])
        b["zero_"](flush)
        synchronize()
        start, end, done = new_event(), new_event(), new_event()
        use_main()
        record(start, stream)
        h0 = perf()
        out = fn(*slots[slot])
        host_us = (perf() - h0) * 1e6
        record(end, stream)
        synchronize()  # nothing of the evaluator's own runs before `done`: it would be counted as the call's
        record(done, stream)
        synchronize()
        fenced.append(Fenced(elapsed(start, end) * 1000.0, elapsed(start, done) * 1000.0, host_us))
        del out
    wake: list[float] = []
    for _ in range(FENCED_SAMPLES):
        synchronize()
        start, done = new_event(), new_event()
        record(start, stream)
        synchronize()
        record(done, stream)
        synchronize()
        wake.append(elapsed(start, done) * 1000.0)
    return fenced, wake


def same_bits(a: Any, b: Any) -> bool:
    """Whether two output trees hold the same bits (NaN equal to NaN), by the bound C methods."""
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(same_bits(x, y) for x, y in zip(a, b, strict=True)))
    if not (_is_tensor(a) and _is_tensor(b)):
        return True  # non-tensor leaves are judged elsewhere
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    as_bits = _BITS.get(str(a.dtype).removeprefix("torch."))
    view, equal = _bound["view"], _bound["equal"]
    if as_bits is None:
        return bool(equal(a, b))
    import torch

    return bool(equal(view(a, getattr(torch, as_bits)), view(b, getattr(torch, as_bits))))


# floating dtypes compared as integers of their width, so that NaN equals NaN bit for bit
_BITS = {"float32": "int32", "float64": "int64", "float16": "int16", "bfloat16": "int16"}


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
