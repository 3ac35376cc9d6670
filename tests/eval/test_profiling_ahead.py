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


def test_the_worker_ahead_is_asked_for_before_the_preparation_waits_for_its_judge(monkeypatch, tmp_path):
    """Its start holds the device: asked for after the judge's fork (which waits for the zygote's
    imports), it outlasted the reference's preparation and the reference's timing waited for it
    (1-4 s a problem on an H100, KernelBench's sweep on 6ce8fd3). The judge here is a stand-in
    that stops the preparation: only the order is looked at."""
    from okgit.eval.parent.local import LocalEvaluator
    from okgit.problem import load_problem

    asked: list[str] = []

    class Stop(Exception):
        pass

    def take_judge() -> None:
        asked.append("judge")
        raise Stop

    monkeypatch.setattr(ProfilingPass, "start_ahead", lambda self, tools: asked.append(f"ahead {tools}"))
    op = tmp_path / "op.py"
    op.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                  "def get_inputs():\n    return [torch.ones(4)]\ndef get_init_inputs():\n    return []\n")
    ev = LocalEvaluator(device="cpu", prestart=False, profiler="auto")
    try:
        ev._kind, ev.prestart = "cuda", True  # as on a GPU, where the pass has workers
        monkeypatch.setattr(ev, "_take_judge", take_judge)
        with pytest.raises(Stop):
            ev._prepare(load_problem(op, root=str(tmp_path)))
        assert asked == ["ahead auto", "judge"]
    finally:
        ev.close()
