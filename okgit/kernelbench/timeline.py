"""Where a sweep problem's time went: each stage's wall time, and its holds on the device.

Two sources, one per kind of figure:
- the wall time of each stage of the problem's run, folded from the run's events as they come
  (`StageClock`, in the problem's own process, okgit.kernelbench.solve): preparing the reference,
  waiting for the Inductor seeds, the rest of the search, the final gate; the winner's check and
  the baselines are timed by whoever runs them;
- the device: every okgit process of the problem (the run, its seed compiles, its baselines)
  appends each hold of the device's lock to the problem's ledger (okgit.eval.parent.devices,
  `OKGIT_DEVICE_LEDGER`): shared (work that times nothing, beside other problems' such work) or
  exclusive (timing and autotuning, the device alone), with the seconds it waited for the lock.

Exclusive seconds are what one GPU's problems cannot share: their sum bounds a sweep from below,
whatever its parallelism. A problem resumed over several calls adds up its calls.

Within the search, each candidate evaluation's wall is split by phase in its `evaluated` event
(okgit.eval.parent.phases); `evaluation_phases` adds them up per problem.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from okgit.journal.events import Event, Note, Preparing, Profiled, ProposalEvent, ReferenceEvent, Resumed, RunFinished
from okgit.kernelbench.scoring import PROFILE, STAGES, StageTime

_LEDGER_STAGES = {"reference": "reference", "seed": "seeds", "evaluation": "search", "final gate": "final gate",
                  "check": "check", "baselines": "baselines", "profile": PROFILE}
SEARCH_ENDED = "search ended"  # the note okgit.run writes between the search and the final gate
WALLS_ENV = "OKGIT_STAGE_WALLS"  # where a sweep problem's process writes its stage walls as they grow


class StageClock:
    """A run's events, as they come, folded into wall seconds per stage: the time up to each event
    goes to the stage it ends (an Inductor seed's proposal ends a wait for its compile). The
    profiling pass's own seconds (`profiled` events) are counted apart, under PROFILE, as well:
    they lie within the stages' walls, and their share of the run is what issue 32 bounds.
    `path`: where the walls so far are written after each change, so that a process killed
    before it could say them (a stop that outlasted its grace) loses none (`read_walls`)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.walls: dict[str, float] = {}
        self.stage: str | None = "reference"  # until the run says otherwise: its evaluator starting, its reference prepared
        self.last = time.monotonic()

    def __call__(self, event: Event) -> None:
        now = time.monotonic()
        if self.stage is not None:
            seed = isinstance(event, ProposalEvent) and event.origin.startswith("inductor")
            self.add("seeds" if seed and self.stage == "search" else self.stage, now - self.last)
        self.last = now
        if isinstance(event, Profiled):
            self.add(PROFILE, event.seconds)
        if isinstance(event, Preparing):
            self.stage = "reference"  # a resumed run prepares its reference again, before `resumed`
        elif isinstance(event, (ReferenceEvent, Resumed)):
            self.stage = "search"
        elif isinstance(event, Note) and event.message.startswith(SEARCH_ENDED):
            self.stage = "final gate"
        elif isinstance(event, RunFinished):
            self.stage = None

    def add(self, stage: str, seconds: float) -> None:
        self.walls[stage] = round(self.walls.get(stage, 0.0) + seconds, 3)
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            try:
                tmp.write_text(json.dumps(self.walls))
                tmp.replace(self.path)
            except OSError:  # only the accounting's spare copy: never the run's failure
                pass


def read_walls(path: Path) -> dict[str, float]:
    """The walls a StageClock last wrote to `path` ({} where it wrote none)."""
    try:
        walls = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in walls.items()} if isinstance(walls, dict) else {}


def ledger_holds(path: Path) -> tuple[dict[str, StageTime], int | None]:
    """The ledger's holds per stage (no wall time), and the last device footprint it gives."""
    stages: dict[str, StageTime] = {}
    footprint = None
    for entry in ledger_entries(path):
        if "footprint_bytes" in entry:
            footprint = int(entry["footprint_bytes"])
            continue
        if "cutoff" in entry:  # choices an autotuning cut short (okgit.inductor.cutoff), filed under its hold's stage
            t = stages.setdefault(_LEDGER_STAGES.get(str(entry.get("what")), str(entry.get("what"))), StageTime())
            t.cut += int(entry.get("cut", 0))
            t.cut_saved_s = round(t.cut_saved_s + float(entry.get("saved_s", 0.0)), 3)
            continue
        if "stage" not in entry:
            continue  # the sweep's own lines (`record_running`): no hold
        stage = _LEDGER_STAGES.get(str(entry["stage"]), str(entry["stage"]))
        t = stages.setdefault(stage, StageTime())
        held = float(entry.get("held_s", 0.0))
        if entry.get("mode") == "exclusive":
            t.exclusive_s = round(t.exclusive_s + held, 3)
            labels = entry.get("for")
            for label, seconds in (labels.items() if isinstance(labels, dict) else ()):
                t.alone_for[str(label)] = round(t.alone_for.get(str(label), 0.0) + float(seconds), 3)
        else:
            t.shared_s = round(t.shared_s + held, 3)
        t.wait_s = round(t.wait_s + float(entry.get("wait_s", 0.0)), 3)
    return stages, footprint


def ledger_entries(path: Path) -> Iterator[dict[str, Any]]:
    """The ledger's lines as objects: none where it is missing, none of a line cut by a kill."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            yield entry


def evaluation_phases(phases: Iterable[dict[str, float]]) -> dict[str, float]:
    """Evaluations' seconds by phase (EvalResult.phase_s), added up; phases that took no time left out."""
    total: dict[str, float] = {}
    for one in phases:
        for name, seconds in one.items():
            total[name] = round(total.get(name, 0.0) + seconds, 3)
    return {name: seconds for name, seconds in total.items() if seconds > 0}


def last_footprint(path: Path) -> int | None:
    return ledger_holds(path)[1]


def record_running(ledger: Path, start: float, end: float) -> None:
    """One stretch of a problem's run in a sweep call (wall clock, from its admission to its end or
    stop), appended to its ledger: the report's count of problems running at once reads them."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with open(ledger, "a") as f:
        f.write(json.dumps({"running": [round(start, 3), round(end, 3)]}) + "\n")


def running_at_once(ledgers: Iterable[Path]) -> list[float]:
    """Seconds with 1, 2, ... problems running at once (index k - 1), over every stretch the
    ledgers record: what admission let onto the devices, call after call."""
    edges: list[tuple[float, int]] = []
    for path in ledgers:
        for entry in ledger_entries(path):
            start, end = entry.get("running") or (0.0, 0.0)  # a hold or a footprint: no stretch
            if end > start:  # a problem stopped as it was admitted ran for no time
                edges += [(float(start), 1), (float(end), -1)]
    seconds: list[float] = []
    running, last = 0, 0.0
    for t, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        if running:
            seconds += [0.0] * (running - len(seconds))
            seconds[running - 1] += t - last
        running, last = running + step, t
    return [round(x, 1) for x in seconds]


def combine(walls: dict[str, float], holds: dict[str, StageTime]) -> dict[str, StageTime]:
    """Every stage's wall seconds beside its device holds (`ledger_holds`), in STAGES order (others after)."""
    names = [s for s in STAGES if s in walls or s in holds] + sorted((set(walls) | set(holds)) - set(STAGES))
    return {s: holds.get(s, StageTime()).model_copy(update={"wall_s": round(walls.get(s, 0.0), 3)}) for s in names}
