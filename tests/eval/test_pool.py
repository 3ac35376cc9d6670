"""The local device pool, proved with CPU slots: real concurrency, one job per slot at a time,
each job names its slot, and per-device locks that hold across two processes."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import TimedSlot, overlaps

from okgit.eval.parent import device_pool as pool
from okgit.eval.parent.device_pool import DevicePool, Slot
from okgit.eval.parent.devices import device_lock, lock_path, physical_id, physical_name
from okgit.eval.types import EvalResult, Status
from okgit.problem import Problem


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OKGIT_DATA_DIR", str(tmp_path / "data"))


def test_jobs_run_concurrently_one_per_slot_and_name_their_slot():
    p = DevicePool([f"cpu:{i}" for i in range(3)])
    spans: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def job(n: int, slot: Slot) -> str:
        start = time.monotonic()
        time.sleep(0.2)
        with lock:
            spans.append((slot.name, start, time.monotonic()))
        return f"{n}@{slot.name}"

    t0 = time.monotonic()
    out = p.map(job, range(6))
    wall = time.monotonic() - t0
    assert [o.split("@")[0] for o in out] == [str(n) for n in range(6)]  # input order kept
    assert {o.split("@")[1] for o in out} == {"cpu:0", "cpu:1", "cpu:2"}
    assert wall < 0.2 * 6 * 0.75  # really concurrent: well under the serial time
    for name in ("cpu:0", "cpu:1", "cpu:2"):
        mine = sorted((s, e) for n, s, e in spans if n == name)
        assert all(not overlaps(a, b) for a, b in itertools.pairwise(mine))  # one job per slot at a time


def test_more_slots_than_devices_are_dealt_round_robin():
    p = DevicePool(["cuda:0", "cuda:1"], slots=5)
    assert [s.device for s in p.slots] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
    assert DevicePool(["cpu:0"]).slots == [Slot(0, "cpu:0")]
    with pytest.raises(ValueError):
        DevicePool([])


def test_local_pool_without_gpus_is_cpu_slots(monkeypatch):
    monkeypatch.setattr(pool, "visible_gpus", list)
    assert DevicePool.local(3).devices == ["cpu:0", "cpu:1", "cpu:2"]
    monkeypatch.setattr(pool, "visible_gpus", lambda: ["cuda:0", "cuda:1"])
    assert [s.device for s in DevicePool.local(4).slots] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert DevicePool.local(2, device="cpu").devices == ["cpu:0", "cpu:1"]


def test_a_failing_job_stops_new_ones_and_is_raised():
    p = DevicePool(["cpu:0"])
    ran: list[int] = []

    def job(n: int, slot: Slot) -> int:
        ran.append(n)
        if n == 1:
            raise RuntimeError("boom")
        return n

    with pytest.raises(RuntimeError, match="boom"):
        p.map(job, range(5))
    assert ran == [0, 1]


def test_physical_ids_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert physical_id("cuda:2") == "2" and physical_name("cuda") == "cuda:0"
    unpinned = lock_path("cuda:5")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert physical_id("cuda:1") == "5" and physical_name("cuda:0") == "cuda:4"
    assert lock_path("cuda:1") == unpinned  # the same GPU, the same lock, whatever the process sees
    assert Slot(0, "cuda:1").env() == {"CUDA_VISIBLE_DEVICES": "5"}
    assert Slot(0, "cpu:1").env() == {"CUDA_VISIBLE_DEVICES": ""}
    assert physical_id("cpu:3") == "cpu:3"


_COUNTING_GPUS = """
import sys
import okgit.eval.parent.devices as devices
devices._DRIVER_PATHS = tuple(sys.argv[1:])
print(devices.visible_gpus(), "torch" in sys.modules)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the driver's paths are Linux's")
def test_without_a_gpu_driver_no_gpu_is_counted_and_torch_is_not_imported_for_it(tmp_path):
    driver = tmp_path / "nvidiactl"
    driver.touch()

    def counted(*paths: object) -> str:
        args = [sys.executable, "-c", _COUNTING_GPUS, *map(str, paths)]
        return subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout.strip()

    assert counted(tmp_path / "absent") == "[] False"
    found = counted(driver)  # with a driver torch is asked: its answer, whatever this machine has
    assert found.endswith(" True") and found.startswith("[")


_LOCKING_PROCESS = textwrap.dedent("""
    import json, os, sys, time
    from okgit.eval.parent.devices import device_lock
    from okgit.eval.parent.device_pool import DevicePool

    out, go = sys.argv[1], sys.argv[2]
    while not os.path.exists(go):  # both processes start their jobs together
        time.sleep(0.01)

    def job(n, slot):
        with device_lock(slot.device) as waited:  # what a worker does around its timing
            start = time.time()
            time.sleep(0.2)
            end = time.time()
        with open(out, "a") as f:
            f.write(json.dumps([slot.device, start, end, waited]) + "\\n")

    DevicePool(["cpu:0", "cpu:1"]).map(job, range(4))
""")


@pytest.mark.slow  # two processes holding the device locks
def test_device_locks_hold_across_two_processes(tmp_path):
    import os

    env = {**os.environ, "OKGIT_DATA_DIR": str(tmp_path / "data")}
    outs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _LOCKING_PROCESS, str(o), str(go)], env=env) for o in outs]
    time.sleep(1.0)  # let both start and import
    go.write_text("")
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    records = [json.loads(line) for o in outs for line in o.read_text().splitlines()]
    assert len(records) == 8
    for device in ("cpu:0", "cpu:1"):
        # each process's slots take jobs as they free up: how many land on a device varies
        held = sorted((s, e) for d, s, e, _ in records if d == device)
        assert held
        assert all(not overlaps(a, b) for a, b in itertools.pairwise(held)), f"two processes held {device} at once"
    assert max(w for *_, w in records) > 0.1  # the lock was contended, and waited for
    assert (tmp_path / "data" / "locks" / "cpu-0.lock").exists()


def test_device_lock_reports_its_wait():
    with device_lock("cpu:7") as waited:
        assert waited < 1.0


class SlotEvaluator:
    """Stands in for the local evaluator of one slot; remembers which device built it."""

    built: ClassVar[list[str]] = []

    def __init__(self, device: str) -> None:
        self.device = device
        SlotEvaluator.built.append(device)

    def evaluate(self, problem, source, *, mode="fast", backend="triton") -> EvalResult:
        time.sleep(0.05)
        return EvalResult(status=Status.correct, correct=True, device="cpu", mode=mode)


def test_pool_evaluate_names_each_result_by_its_slot():
    SlotEvaluator.built = []
    problem = Problem(path="op.py", source="")
    results = DevicePool(["cpu:0", "cpu:1"]).evaluator(SlotEvaluator).evaluate_many(problem, ["a", "b", "c", "d"])
    assert all(r.correct for r in results)
    assert {r.device for r in results} == {"cpu:0", "cpu:1"}
    assert sorted(SlotEvaluator.built) == ["cpu:0", "cpu:1"]  # one evaluator per slot, reused


@pytest.mark.slow  # two real evaluators at once
def test_pool_evaluate_with_the_local_evaluator_on_cpu_slots():
    pytest.importorskip("okgit.eval.parent.local")
    fixture = Path(__file__).parents[1] / "kb_fixture"
    candidate = (fixture / "candidates/1_ScaledRelu_triton.py").read_text()
    source = (fixture / "KernelBench/level1/1_ScaledRelu.py").read_text()
    problem = Problem(path="1_ScaledRelu.py", source=source, root=None)
    wrong = candidate.replace("* 2.0", "* 3.0")
    with DevicePool(["cpu:0", "cpu:1"]).evaluator() as evaluator:
        results = evaluator.evaluate_many(problem, [candidate, wrong])
    assert all(r.device in ("cpu:0", "cpu:1") for r in results)
    assert results[0].status is Status.correct, results[0].error
    assert results[1].status is Status.incorrect


@pytest.mark.slow  # a run with real evaluation on two CPU slots
def test_optimize_evaluates_a_batch_on_two_cpu_workers_at_once(git_repo: Path):
    """Two template kernels (real Triton, under the interpreter) proposed together run at the
    same time, each in its own slot's worker; the journal has them in proposal order."""
    from conftest import OP, OP_SOURCE

    from okgit.eval.types import Reference
    from okgit.journal.files import read_jsonl
    from okgit.run import optimize
    from okgit.search.proposers.templates import plan
    from okgit.search.types import Context, Proposal, propose_several

    problem = Problem(path=OP, source=OP_SOURCE)
    kernel = plan(Context(problem=problem, reference=Reference(device="cpu", timed=False), backend="triton",
                          device="cpu"))[0].source
    relu = "tl.maximum(v0, 0.0, propagate_nan=tl.PropagateNan.ALL)"
    assert "@triton.jit" in kernel and relu in kernel
    wrong = kernel.replace(relu, relu.replace("0.0", "0.5"))

    class Together:
        name = "together"

        def __init__(self) -> None:
            self.queue = [Proposal(source=kernel, origin="template:relu"), Proposal(source=wrong, origin="template:off")]

        def propose(self, ctx):
            return self.queue.pop(0) if self.queue else None

        def propose_batch(self, ctx, limit):
            return propose_several(self, ctx, limit)

    TimedSlot.spans = []
    with DevicePool(["cpu:0", "cpu:1"]).evaluator(TimedSlot) as evaluator:
        result = optimize(git_repo / OP, flags={"device": "cpu", "iterations": 4}, cwd=git_repo,
                          evaluator=evaluator, proposers=[Together()])
    assert result.status == "unverified" and result.candidates == 2
    assert len(TimedSlot.spans) == 2 and {s[0] for s in TimedSlot.spans} == {"cpu:0", "cpu:1"}
    (_, start_a, end_a), (_, start_b, end_b) = TimedSlot.spans
    assert overlaps((start_a, end_a), (start_b, end_b)), TimedSlot.spans  # evaluated at the same time
    events = read_jsonl(Path(result.report).parent / "journal.jsonl")[0]
    assert [(e["type"], e["cand"]) for e in events if e["type"] in ("proposal", "evaluated", "accepted")] == [
        ("proposal", "c001"), ("evaluated", "c001"), ("accepted", "c001"), ("proposal", "c002"), ("evaluated", "c002")]
    evaluated = {e["cand"]: e for e in events if e["type"] == "evaluated"}
    assert evaluated["c001"]["status"] == "correct" and evaluated["c002"]["status"] == "incorrect"
    traces = [r for r in read_jsonl(Path(result.report).parent / "traces.jsonl")[0] if r["type"] == "candidate"]
    assert {r["result"]["device"] for r in traces} == {"cpu:0", "cpu:1"}  # each names the slot it ran on
