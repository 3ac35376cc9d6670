"""Problems admitted onto a GPU by their memory, so that those sharing it fit together.

Each problem on a device is counted at its footprint: once its reference is prepared, what its
run says it holds (okgit.eval.parent.memory.device_footprint, from the judge's measured peak,
and from each evaluation on, the largest peaks its judge and workers reported, written to the
problem's ledger); before that, an estimate from its op file on the meta device
(inputs, outputs and parameters, no data: `estimate`), deliberately high, since a preparation
holds float64 copies beside the outputs. A problem starts on a device when its estimate fits
beside the footprints of those running there, or when none is running (a problem too large to
share the device runs alone rather than never). Footprints are read again while a problem
waits: a reference prepared meanwhile may make room, or take it.

A whole model (level 3) is a campaign: its ledger's footprints are those of its extracted
modules, while its last phases run the whole model (verified, then timed beside torch.compile
of it). It is estimated with the activations its forward makes (`estimate(path, model=True)`)
and counted at no less than that estimate throughout (`floored`): on an H100 (2026-12-07) three
campaigns admitted at their modules' footprints ran their whole models out of memory together.

A sweep's problems wait in one line (`line_up`, `take`): a device that has room takes the first
problem in line that fits there, not only the first of all, so that a problem too large to run
beside the others does not hold back the small ones behind it (on an H200 the development set's
elementwise problems are estimated at about 98 GiB each: in line order, a slot waited for each
while the GEMMs and convolutions behind them never started). The first in line is never passed
over for long: once it has not fitted for RESERVE_S, no other starts on that device before it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from okgit.eval.parent.memory import CUDA_CONTEXT, GiB

ADMIT_SHARE = 0.9  # of a device's memory, for the problems together: the rest for the driver and fragmentation
ESTIMATE_FACTOR = 8  # before preparation: bytes of one case and the parameters, times this
UNKNOWN_BYTES = 16 * GiB  # an op whose inputs cannot be made on the meta device
ACTIVATION_FACTOR = 2  # a whole model: every tensor its forward makes (none freed), twice (the judge's, the worker's)
CONTEXTS = 5  # CUDA contexts per problem: judge, working worker, idle workers
POLL_S = 2.0
RESERVE_S = 240.0  # the first in line, passed over by smaller problems for this long, is waited for


def estimate(path: Path, model: bool = False) -> int:
    """A problem's device memory before its reference is prepared, from its op file at its own
    sizes on the meta device: (inputs + outputs + parameters) * ESTIMATE_FACTOR, and its
    processes' CUDA contexts; for a whole model (`model`) also every tensor its forward makes,
    none freed (an upper bound of its activations), ACTIVATION_FACTOR times."""
    import torch

    from okgit.eval.protocol.jobs import flatten
    from okgit.eval.worker.calls import load_op, nbytes

    made = 0
    try:
        module = load_op(str(path), f"okgit_admission_{path.stem}", {})
        torch.manual_seed(0)
        with torch.device("meta"), torch.no_grad():
            inputs = list(module.get_inputs())
            net = module.Model(*module.get_init_inputs())
            out, made = _forward_made(net, inputs) if model else (net(*inputs), 0)
        params = sum(t.nbytes for t in net.state_dict().values()) if isinstance(net, torch.nn.Module) else 0
        case = nbytes(inputs) + nbytes(flatten(out)) + params
    except Exception:  # noqa: BLE001 - the op's own code on tensors without data: a guess instead
        case, made = UNKNOWN_BYTES // ESTIMATE_FACTOR, 0
    return ESTIMATE_FACTOR * case + ACTIVATION_FACTOR * made + CONTEXTS * CUDA_CONTEXT


def _forward_made(net: Any, inputs: list[Any]) -> tuple[Any, int]:
    """The forward's output, and the bytes of every tensor its operators returned (on the meta
    device: no data, none freed)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    made = 0

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            nonlocal made
            out = func(*args, **(kwargs or {}))
            made += sum(t.nbytes for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
            return out

    with Count():
        out = net(*inputs)
    return out, made


class Admission:
    """Who runs on which device, at what footprint; `enter` waits for room (or for `stop`)."""

    def __init__(self, capacity: dict[str, int], footprint: Callable[[str], int | None],
                 floored: Collection[str] = ()) -> None:
        """`capacity`: device -> bytes the problems may hold together; `footprint(key)`: what a
        running problem says it holds (None until its reference is prepared); `floored`: the
        problems counted at no less than their estimates whatever their footprints (whole models)."""
        self.capacity = capacity
        self.footprint = footprint
        self.floored = floored
        self.running: dict[str, dict[str, int]] = {d: {} for d in capacity}  # device -> key -> its estimate
        self._changed = threading.Condition()
        self._line: list[tuple[str, int]] = []  # (key, estimate) not yet taken, in the order they run
        self._passed_over: dict[str, float] = {}  # the first in line while smaller ones went ahead: since when
        self._crowded: set[str] = set()  # problems that had another beside them on their device at some time

    def line_up(self, problems: list[tuple[str, int]]) -> None:
        """The problems `take` hands out, (key, estimate) in the order they should start."""
        with self._changed:
            self._line = list(problems)
            self._passed_over.clear()

    def take(self, device: str, stop: threading.Event) -> tuple[str, float] | None:
        """The first problem in line that fits on `device` now (the first of all where none runs
        there), out of the line and counted as running there, with the seconds waited for it;
        None when the line is empty or `stop` came first."""
        started = time.monotonic()
        with self._changed:
            while self._line:
                i = self._first_fitting(device)
                if i is not None:
                    key, need = self._line.pop(i)
                    self._passed_over.pop(key, None)
                    self._join(device, key, need)
                    return key, time.monotonic() - started
                if stop.is_set():
                    return None
                self._changed.wait(POLL_S)
            return None

    def _first_fitting(self, device: str) -> int | None:
        if not self.running.setdefault(device, {}):
            return 0
        room = self.capacity.get(device, 0) - self.used(device)
        head, need = self._line[0]
        if need <= room:
            return 0
        if time.monotonic() - self._passed_over.setdefault(head, time.monotonic()) >= RESERVE_S:
            return None  # room drains for the first in line
        return next((i for i, (_, n) in enumerate(self._line) if n <= room), None)

    def enter(self, key: str, device: str, estimate: int, stop: threading.Event) -> float | None:
        """Wait until `key` fits on `device`; the seconds waited, or None when `stop` came first."""
        started = time.monotonic()
        with self._changed:
            while True:
                running = self.running.setdefault(device, {})
                if not running or self.used(device) + estimate <= self.capacity.get(device, 0):
                    self._join(device, key, estimate)
                    return time.monotonic() - started
                if stop.is_set():
                    return None
                self._changed.wait(POLL_S)

    def _join(self, device: str, key: str, need: int) -> None:
        running = self.running.setdefault(device, {})
        running[key] = need
        if len(running) > 1:
            self._crowded.update(running)

    def had_company(self, key: str) -> bool:
        """Whether another problem ran beside `key` on its device at any time while it ran."""
        with self._changed:
            return key in self._crowded

    def leave(self, key: str, device: str) -> None:
        with self._changed:
            self.running.get(device, {}).pop(key, None)
            self._changed.notify_all()

    def used(self, device: str) -> int:
        return sum(self._counted(k, guess) for k, guess in self.running.get(device, {}).items())

    def _counted(self, key: str, guess: int) -> int:
        said = self.footprint(key)
        return max(said or 0, guess) if key in self.floored else (said or guess)


def device_capacity(devices: list[str]) -> dict[str, int]:
    """What the problems on each GPU may hold together (ADMIT_SHARE of its memory)."""
    import torch

    out = {}
    for d in devices:
        if d.startswith("cuda"):
            out[d] = int(ADMIT_SHARE * torch.cuda.get_device_properties(d).total_memory)
    return out
