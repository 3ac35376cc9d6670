"""The device's lock shared by work that times nothing and held alone for timing
(okgit.locks.held, okgit.eval.parent.devices.DeviceHold), and the ledger of its holds.

Real flock locks on files in a temporary data dir: threads hold them through separate open
files, as separate processes do (one slow test runs two processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from okgit.eval.parent import devices
from okgit.eval.parent.devices import DeviceHold, device_lock, stage
from okgit.eval.parent.memory import CUDA_CONTEXT
from okgit.eval.protocol.ledger import LEDGER_ENV
from okgit.locks import held


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("OKGIT_DATA_DIR", str(tmp_path / "data"))


def _until_one_waits(device: str, within_s: float = 5.0) -> None:
    """Until another holder waits for `device`'s lock (or `within_s` passed)."""
    from okgit.locks import waited_for

    deadline = time.monotonic() + within_s
    while not waited_for(devices.lock_path(device)) and time.monotonic() < deadline:
        time.sleep(0.01)


def _in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_shared_holders_overlap_and_an_exclusive_one_waits_for_them(tmp_path):
    path = tmp_path / "gpu.lock"
    both_in = threading.Barrier(2, timeout=10)  # only passes if two shared holders are in at once
    log: list[tuple[str, float]] = []

    def shared(name: str) -> None:
        with held(path, shared=True):
            both_in.wait()
            time.sleep(0.3)
            log.append((f"{name} out", time.monotonic()))

    readers = [_in_thread(lambda n=n: shared(n)) for n in ("a", "b")]
    time.sleep(0.1)
    with held(path, shared=False) as waited:
        log.append(("alone in", time.monotonic()))
    for t in readers:
        t.join(5)
    times = dict(log)
    assert times["alone in"] >= max(times["a out"], times["b out"])
    assert waited > 0.1


def test_a_waiting_exclusive_holder_keeps_new_shared_ones_out(tmp_path):
    """A timing never starves behind a stream of correctness work: once it waits, a shared
    holder that comes later waits behind it."""
    path = tmp_path / "gpu.lock"
    order: list[str] = []
    first_in = threading.Event()

    def first() -> None:
        with held(path, shared=True):
            first_in.set()
            time.sleep(0.5)
            order.append("first shared out")

    def alone() -> None:
        with held(path, shared=False):
            order.append("alone")

    def late() -> None:
        with held(path, shared=True):
            order.append("late shared")

    threads = [_in_thread(first)]
    first_in.wait(5)
    threads.append(_in_thread(alone))
    time.sleep(0.2)  # the exclusive one is waiting now
    threads.append(_in_thread(late))
    for t in threads:
        t.join(5)
    assert order == ["first shared out", "alone", "late shared"]


def test_regions_take_the_strongest_mode_and_give_it_back(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    hold = DeviceHold("cpu:3", "evaluation")
    assert hold.mode is None
    with hold.region("shared"):
        assert hold.mode == "shared"
        with hold.region("exclusive"):
            assert hold.mode == "exclusive"
            with hold.region("shared"):  # weaker inside stronger: nothing changes
                assert hold.mode == "exclusive"
        assert hold.mode == "shared"
        hold.upgrade()  # a worker's timing: alone until the region ends
        assert hold.mode == "exclusive"
    assert hold.mode is None
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [e["mode"] for e in entries] == ["shared", "exclusive", "shared", "exclusive"]
    assert {e["stage"] for e in entries} == {"evaluation"}
    with stage("final gate"), device_lock("cpu:3", "shared", what="evaluation"):
        pass
    last = json.loads(ledger.read_text().splitlines()[-1])
    assert last["stage"] == "final gate" and last["mode"] == "shared"


def test_an_exclusive_region_of_one_thread_never_waits_for_another_threads_region():
    """Inductor may benchmark from a thread while the main one is in an exclusive region."""
    hold = DeviceHold("cpu:4", "seed")
    entered = threading.Event()

    def benchmark() -> None:
        with hold.region("exclusive"):
            entered.set()

    with hold.region("exclusive"):
        t = _in_thread(benchmark)
        assert entered.wait(2), "a second exclusive region of the same hold waited for the first"
        t.join(2)
    assert hold.mode is None


def test_a_cpu_hold_locks_nothing_and_is_still_accounted(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    hold = DeviceHold(None, "reference")
    with hold.region("shared"):
        time.sleep(0.05)
        with hold.region("exclusive"):
            time.sleep(0.05)
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["stage"], e["mode"]) for e in entries] == [("reference", "shared"), ("reference", "exclusive"),
                                                          ("reference", "shared")]
    assert entries[1]["held_s"] >= 0.04
    assert not (Path(devices.data_dir()) / "locks").exists()  # no lock file was even made


def test_the_ledger_is_an_account_never_a_failure(tmp_path, monkeypatch):
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "no" / "such" / "dir" / "ledger.jsonl"))
    with device_lock("cpu:5", "shared") as waited:
        assert waited < 1.0
    devices.record_footprint(123)


_HOLDER = textwrap.dedent("""
    import json, sys, time
    from okgit.eval.parent.devices import DeviceHold
    mode, out, go = sys.argv[1], sys.argv[2], sys.argv[3]
    import os
    while not os.path.exists(go):
        time.sleep(0.01)
    hold = DeviceHold("cuda:7", "test")  # only its lock file is used: nothing touches a GPU
    for _ in range(3):
        with hold.region(mode):
            start = time.time()
            time.sleep(0.15)
            end = time.time()
        with open(out, "a") as f:
            f.write(json.dumps([mode, start, end]) + "\\n")
""")


@pytest.mark.slow  # two processes holding the device locks
def test_two_processes_never_time_beside_each_others_work(tmp_path):
    import os

    env = {**os.environ, "OKGIT_DATA_DIR": str(tmp_path / "data")}
    go = tmp_path / "go"
    outs = {m: tmp_path / f"{m}.jsonl" for m in ("shared", "exclusive")}
    procs = [subprocess.Popen([sys.executable, "-c", _HOLDER, m, str(o), str(go)], env=env) for m, o in outs.items()]
    time.sleep(1.0)
    go.write_text("")
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    spans = [json.loads(line) for o in outs.values() for line in o.read_text().splitlines()]
    alone = [(s, e) for m, s, e in spans if m == "exclusive"]
    shared = [(s, e) for m, s, e in spans if m == "shared"]
    assert len(alone) == 3 and len(shared) == 3
    for a in alone:
        assert all(a[1] <= s or e <= a[0] for s, e in shared), "a shared hold overlapped an exclusive one"


@pytest.mark.gpu
@pytest.mark.slow  # the real evaluator on a GPU (skipped without one)
def test_on_a_gpu_a_job_checks_sharing_the_device_and_times_alone(tmp_path, monkeypatch):
    """The worker asks for the device alone before it times; the judge times the reference alone."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from okgit.eval.parent.local import LocalEvaluator
    from okgit.problem import load_problem

    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    ops = Path(__file__).parents[1] / "ops"
    problem = load_problem(ops / "relu.py", root=str(ops))
    with LocalEvaluator(device="cuda") as evaluator:
        result = evaluator.evaluate(problem, (ops / "relu_triton.py").read_text())
        assert result.correct and result.timed, result.error
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    modes = {(e["stage"], e["mode"]) for e in entries if "stage" in e}
    assert {("reference", "shared"), ("reference", "exclusive"), ("evaluation", "shared"),
            ("evaluation", "exclusive")} <= modes
    assert any("footprint_bytes" in e for e in entries)
    # the judge's memory by phase: its preparation's cases and its timing, each phase's own peaks
    # (allocated, reserved) at least what it leaves allocated
    (phases,) = [e["judge_phases"] for e in entries if "judge_phases" in e][:1]
    names = [name for name, *_ in phases]
    assert "reference: s0" in names and "reference: timing" in names, names
    assert all(peak >= kept and reserved >= peak and seconds >= 0 for _, peak, kept, reserved, seconds in phases), phases
    assert dict((name, peak) for name, peak, *_ in phases)["reference: s0"] > 0
    # the footprint counts the judge at a check that computes a case again, measured last in its
    # preparation (every expected output of this op is kept: the salted seed case), and the worker,
    # until it reports, at the preparation's largest phase, not at the timing's (the rows from
    # "reference: prepared" on are measure's)
    footprint = next(e["footprint_bytes"] for e in entries if "judge_phases" in e)
    prepared = phases[: names.index("reference: prepared")]
    assert prepared[-1][0] == "reference: s0~1", names
    check, largest = prepared[-1][3], max(reserved for _, _, _, reserved, _ in prepared)
    assert check + largest < footprint <= check + largest + 16 * CUDA_CONTEXT, phases  # and a context per process
    # the worker's first report, with its peak by gate (each gate's own, from a reset peak)
    (worker,) = [e["worker_phases"] for e in entries if "worker_phases" in e][:1]
    assert worker and all(peak > 0 for peak in worker.values()), worker
    # what each held alone for: the judge's timing of the reference, the worker's gate
    alone = {(e["stage"], label) for e in entries if e.get("mode") == "exclusive" for label in e.get("for", {})}
    assert {("reference", "timing"), ("evaluation", "timing")} <= alone, alone


def test_a_shared_holder_sees_an_exclusive_one_waiting_and_makes_way_between_calls(tmp_path):
    """A job's correctness work keeps a timing waiting for one call, not for all of its calls: at
    `make_way` (a worker's message between two calls) the shared hold lets the waiting exclusive
    holder in, then takes the device shared again behind it."""
    from okgit.locks import waited_for

    job = DeviceHold("cuda:7", "evaluation")  # only its lock file is used: nothing touches a GPU
    path = devices.lock_path("cuda:7")
    order: list[str] = []
    with job.region("shared"):
        assert not waited_for(path) and job.make_way() is False  # nobody waits: the hold is kept
        assert job.mode == "shared"

        def timing() -> None:
            with device_lock("cuda:7", "exclusive", "final gate"):
                order.append("timing")
                time.sleep(0.2)

        t = _in_thread(timing)
        _until_one_waits("cuda:7")
        assert waited_for(path) and order == []  # it waits behind this job's shared hold
        assert job.make_way() is True  # lets it in, then waits behind it for the device shared again
        order.append("next call")
        assert job.mode == "shared"
        t.join(5)
    assert order == ["timing", "next call"]


def test_a_hold_upgraded_for_timing_never_makes_way(tmp_path):
    job = DeviceHold("cuda:6", "evaluation")
    got_in: list[float] = []

    def other() -> None:
        with device_lock("cuda:6", "exclusive", "final gate"):
            got_in.append(time.monotonic())

    with job.region("shared"):
        job.upgrade()
        t = _in_thread(other)
        time.sleep(0.2)
        assert job.make_way() is False and job.mode == "exclusive" and got_in == []
        left = time.monotonic()
    t.join(5)
    assert got_in and got_in[0] >= left  # it got the device only when the job's regions closed


def test_waiting_for_the_device_moves_a_jobs_deadline_within_its_own_timeout():
    """The parent's waits for the device on a job's behalf (its upgrade for timing, making way
    between calls) are other jobs' time, not the candidate's; a job that keeps asking gets at
    most its own timeout again."""
    from okgit.eval.parent.sandbox import deadline_moved

    assert deadline_moved({"ok": True, "waited_s": 12.5}, room_s=180.0) == 12.5
    assert deadline_moved({"ok": True, "waited_s": 12.5}, room_s=4.0) == 4.0
    assert deadline_moved({"ok": True, "waited_s": 3.0}, room_s=0.0) == 0.0
    assert deadline_moved({"ok": True}, room_s=180.0) == 0.0  # the judge's answers move nothing
    assert deadline_moved({"ok": True, "waited_s": -1.0}, room_s=180.0) == 0.0


@pytest.mark.gpu
@pytest.mark.slow  # the real evaluator on a GPU (skipped without one)
def test_on_a_gpu_an_evaluation_makes_way_for_a_timing_between_its_calls(tmp_path, monkeypatch):
    """Another process's timing keeps asking for the device alone while a candidate is checked: the
    evaluation lets it in between its calls (more than one shared hold in the ledger) and its
    verdict is unchanged."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from okgit.eval.parent.local import LocalEvaluator
    from okgit.problem import load_problem

    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    ops = Path(__file__).parents[1] / "ops"
    problem = load_problem(ops / "relu.py", root=str(ops))
    stop = threading.Event()
    timings: list[float] = []

    def other_timing() -> None:
        while not stop.is_set():
            with device_lock("cuda:0", "exclusive", "final gate"):
                timings.append(time.monotonic())
                time.sleep(0.02)
            time.sleep(0.01)

    with LocalEvaluator(device="cuda") as evaluator:
        evaluator.reference(problem)
        t = _in_thread(other_timing)
        try:
            result = evaluator.evaluate(problem, (ops / "relu_triton.py").read_text())
        finally:
            stop.set()
            t.join(10)
    assert result.correct and result.timed, result.error
    shared = [e for e in (json.loads(line) for line in ledger.read_text().splitlines())
              if e.get("stage") == "evaluation" and e.get("mode") == "shared"]
    assert len(shared) > 1 and timings


def _count(tick: Path) -> int:
    """A running ticker's count: its file is empty between its truncation and its write (seen once
    in a loaded run of the fast subset, read as no tick), so an empty read is read again."""
    deadline = time.monotonic() + 10
    while not (text := tick.read_text()) and time.monotonic() < deadline:
        time.sleep(0.001)
    return int(text)


def test_a_job_that_makes_way_is_stopped_until_it_holds_the_device_again(tmp_path):
    """While a job has let another job's timing in, its worker is stopped, with every process it
    started, in its group or not: a candidate's own thread, and a process it put in a session of its
    own, get nothing done during the timing, and go on after."""
    from okgit.eval.parent.sandbox import REAPER, paused

    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent(f"""
        import os, sys, threading, time
        def tick(path):
            n = 0
            while True:
                n += 1
                open(path, "w").write(str(n))
                time.sleep(0.005)
        if len(sys.argv) > 1:  # started again, in a session of its own
            tick(sys.argv[1])
        os.posix_spawn(sys.executable, [sys.executable, __file__, {str(tmp_path / "escaped")!r}], dict(os.environ), setsid=True)
        threading.Thread(target=tick, args=({str(tmp_path / "thread")!r},)).start()
    """))
    busy = subprocess.Popen([sys.executable, "-I", str(REAPER), "--", sys.executable, str(worker)], start_new_session=True)
    ticks = [tmp_path / "thread", tmp_path / "escaped"]
    try:
        deadline = time.monotonic() + 10
        while not all(t.exists() for t in ticks) and time.monotonic() < deadline:
            time.sleep(0.01)
        job = DeviceHold("cuda:5", "evaluation")  # only its lock file is used: nothing touches a GPU
        seen: list[list[str]] = []

        def timing() -> None:
            with device_lock("cuda:5", "exclusive", "final gate"):  # stopped mid-write, a ticker's file stays empty
                first = [t.read_text() for t in ticks]
                time.sleep(0.3)
                seen.extend([first, [t.read_text() for t in ticks]])

        with job.region("shared"):
            t = _in_thread(timing)
            _until_one_waits("cuda:5")
            assert job.make_way(away=lambda: paused(busy.pid)) is True
            t.join(5)
        assert len(seen) == 2 and seen[0] == seen[1]  # not one tick, of either, while the other job timed
        before = [_count(t) for t in ticks]
        deadline = time.monotonic() + 10
        while any(a == _count(t) for a, t in zip(before, ticks)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(a < _count(t) for a, t in zip(before, ticks))  # both go on after
    finally:
        from okgit.eval.protocol.reaper import kill_tree

        kill_tree(busy.pid)
        busy.kill()
        busy.wait()


def test_each_hold_says_what_ran_in_it_and_for_how_long(tmp_path, monkeypatch):
    """Labelled regions (an Inductor autotuning, a benchmark nested in it, a worker's timing) are
    written beside the hold they fell in, each with the seconds it was open in that hold: the
    ledger then tells a coarse region's benchmarking from the rest of its time."""
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    hold = DeviceHold("cpu:6", "seed")
    with hold.region("shared", "build"):
        time.sleep(0.05)
        with hold.region("exclusive", "CachingAutotuner.coordinate_descent_tuning"):
            time.sleep(0.1)  # what a compile inside the region would be
            with hold.region("exclusive", "benchmarker.benchmark_gpu"):
                time.sleep(0.05)
        time.sleep(0.02)
    job = DeviceHold("cpu:6", "evaluation")
    with job.region("shared"):
        job.upgrade("timing")  # a worker's gate, to the job's end
        time.sleep(0.05)
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["stage"], e["mode"]) for e in entries] == [("seed", "shared"), ("seed", "exclusive"), ("seed", "shared"),
                                                          ("evaluation", "shared"), ("evaluation", "exclusive")]
    first, alone, after, _, timed = entries
    assert set(first["for"]) == {"build"} and 0.04 <= first["for"]["build"] <= first["held_s"] + 0.001
    coarse, bench = alone["for"]["CachingAutotuner.coordinate_descent_tuning"], alone["for"]["benchmarker.benchmark_gpu"]
    assert 0.14 <= coarse <= alone["held_s"] + 0.001 and 0.04 <= bench < coarse - 0.08
    assert alone["for"]["build"] == pytest.approx(alone["held_s"], abs=0.005)  # the shared region, open throughout
    assert set(after["for"]) == {"build"} and after["for"]["build"] >= 0.015  # counted from the new hold on
    assert set(timed["for"]) == {"timing"} and timed["for"]["timing"] >= 0.04


def test_a_job_whose_timing_is_done_holds_the_device_shared_again_behind_a_waiting_timing(tmp_path):
    """After its timing, what is left of a job (checking the timed outputs, its result, its exit)
    times nothing: the hold goes back to shared, and a timing of another job that waits goes first."""
    job = DeviceHold("cuda:3", "evaluation")
    order: list[str] = []
    with job.region("shared"):
        job.upgrade("timing")
        assert job.mode == "exclusive"

        def timing() -> None:
            with device_lock("cuda:3", "exclusive", "final gate"):
                order.append("other timing")
                time.sleep(0.2)

        t = _in_thread(timing)
        _until_one_waits("cuda:3")
        job.downgrade()
        order.append("the rest of the job")
        assert job.mode == "shared"
        t.join(5)
    assert order == ["other timing", "the rest of the job"]
