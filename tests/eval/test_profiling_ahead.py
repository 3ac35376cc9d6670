"""The profiling pass's first worker started ahead (okgit.eval.parent.profiling.ProfilingPass.start_ahead):
a LocalEvaluator that knows its run will profile starts the first tool's worker beside the
reference's preparation, since the reference's pass follows at once (under ncu that worker took
6-7 s to start on an H100, after the preparation). Workers are recorded here, not started."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from okgit.eval.parent import ncu
from okgit.eval.parent.profiling import ProfilingPass


def pass_on(kind: str, monkeypatch, ncu_path: str | None = "/usr/local/cuda/bin/ncu") -> tuple[ProfilingPass, list[str]]:
    monkeypatch.setattr(ncu, "find", lambda: ncu_path)
    started: list[str] = []
    profiling = ProfilingPass(SimpleNamespace(_kind=kind, prestart=True))  # type: ignore[arg-type]
    monkeypatch.setattr(profiling, "_start", lambda tool: (started.append(tool) or tool, None))
    return profiling, started


@pytest.mark.parametrize(("tools", "first"), [("auto", "ncu"), ("all", "ncu"), ("ncu", "ncu"), ("proton", "proton")])
def test_the_first_tool_asked_for_gets_one_worker_ahead(tools, first, monkeypatch):
    profiling, started = pass_on("cuda", monkeypatch)
    profiling.start_ahead(tools)
    profiling.start_ahead(tools)  # one waits already: no second
    assert started == [first] and list(profiling.spare) == [first]


def test_a_refused_tool_is_passed_over_and_off_or_a_cpu_starts_nothing(monkeypatch):
    profiling, started = pass_on("cuda", monkeypatch, ncu_path=None)  # no ncu on this machine
    profiling.start_ahead("auto")
    profiling.start_ahead("ncu")
    assert started == ["proton"]
    profiling, started = pass_on("cuda", monkeypatch)
    profiling.start_ahead("off")
    assert started == []
    profiling, started = pass_on("cpu", monkeypatch)
    profiling.start_ahead("auto")
    assert started == []


def test_the_pass_takes_the_worker_started_ahead(monkeypatch):
    profiling, started = pass_on("cuda", monkeypatch)
    profiling.start_ahead("auto")
    alive = SimpleNamespace(alive=lambda: True)
    profiling.spare["ncu"] = (alive, None)  # type: ignore[assignment]
    worker, _ = profiling._take("ncu")
    assert worker is alive and started == ["ncu", "ncu"]  # the one ahead, then the next pass's
    profiling.spare["ncu"] = (alive, None)  # type: ignore[assignment]
    worker, _ = profiling._take("ncu", ahead=False)  # the last pass: nothing started for a next one
    assert worker is alive and started == ["ncu", "ncu"] and "ncu" not in profiling.spare
