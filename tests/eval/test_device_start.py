"""A worker's and a judge's start on the GPU hold the device's lock shared
(okgit.eval.protocol.start), and so do their exits when an evaluator closes: never beside a
timing, which holds it alone. Real flock locks, real worker and judge processes (on the CPU, with
a lock named in their environment as the parent names it for a GPU; an evaluator's holds on a CPU
lock nothing and go to the ledger all the same)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time

import pytest

from okgit.eval.parent import devices
from okgit.eval.parent.sandbox import worker_env
from okgit.eval.protocol.ledger import LEDGER_ENV
from okgit.eval.protocol.start import DEVICE_LOCK_ENV, device_start, step
from okgit.locks import held


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("OKGIT_DATA_DIR", str(tmp_path / "data"))


def test_a_gpu_process_is_given_its_devices_lock_and_a_cpu_one_none(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    env = worker_env("cuda:1")
    assert env[DEVICE_LOCK_ENV] == str(devices.lock_path("cuda:1"))
    assert env[DEVICE_LOCK_ENV].endswith("cuda-5.lock")  # the physical GPU's lock, as every okgit process takes it
    assert DEVICE_LOCK_ENV not in worker_env("cpu")


def test_the_start_waits_for_a_timing_and_leaves_no_trace_of_the_lock(tmp_path, monkeypatch):
    path = tmp_path / "gpu.lock"
    monkeypatch.setenv(DEVICE_LOCK_ENV, str(path))
    entered = threading.Event()

    def start() -> None:
        with device_start("worker"):
            entered.set()
            assert DEVICE_LOCK_ENV not in os.environ  # what the job runs later does not find it there

    with held(path, shared=False):  # a timing in progress
        t = threading.Thread(target=start, daemon=True)
        t.start()
        assert not entered.wait(0.5)
    assert entered.wait(5)
    t.join(5)
    with held(path, shared=False) as waited:  # released once started
        assert waited < 1.0


def test_the_start_writes_its_hold_and_steps_to_the_ledger_and_keeps_its_name_from_the_job(tmp_path, monkeypatch):
    path, ledger = tmp_path / "gpu.lock", tmp_path / "ledger.jsonl"
    monkeypatch.setenv(DEVICE_LOCK_ENV, str(path))
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    with device_start("judge"):
        time.sleep(0.2)
        step("cuda")
        time.sleep(0.1)
        step("warm-up")
        assert LEDGER_ENV not in os.environ  # a candidate run later cannot write the sweep's account
    (entry,) = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert entry["stage"] == "process start" and entry["role"] == "judge" and entry["mode"] == "shared"
    assert entry["held_s"] >= 0.3 and entry["wait_s"] < 1.0 and entry["pid"] == os.getpid()
    assert list(entry["steps"]) == ["cuda", "warm-up"]
    assert entry["steps"]["cuda"] >= 0.2 and 0.1 <= entry["steps"]["warm-up"] < entry["steps"]["cuda"]
    assert "after" not in entry  # nothing ran after the hold


def test_a_start_lets_go_before_its_profiler_session_and_the_ledger_names_it_apart(tmp_path, monkeypatch):
    """torch.profiler's session runs no kernel: a timing need not wait for it (okgit.eval.protocol.start)."""
    path, ledger = tmp_path / "gpu.lock", tmp_path / "ledger.jsonl"
    monkeypatch.setenv(DEVICE_LOCK_ENV, str(path))
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    with device_start("worker") as let_go:
        time.sleep(0.1)
        step("warm-up")
        let_go()
        with held(path, shared=False) as waited:  # a timing gets the device while the session opens
            assert waited < 1.0
        time.sleep(0.3)
        step("profiler")
        let_go()  # once is enough; again changes nothing
    (entry,) = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert list(entry["steps"]) == ["warm-up"] and list(entry["after"]) == ["profiler"]
    assert 0.1 <= entry["held_s"] < 0.3 <= entry["after"]["profiler"]


def _waits_for_a_lock(pid: int, within_s: float) -> bool:
    """The process is asleep in flock (Linux's wait channel), within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if "lock" in open(f"/proc/{pid}/wchan").read():
                return True
        except OSError:
            return False
        time.sleep(0.05)
    return False


def _ready_within(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    return bool(ready) and b'"ready": true' in proc.stdout.readline()


@pytest.mark.slow  # a worker's and a judge's processes: torch and Triton imported
@pytest.mark.parametrize("program", ["okgit.eval.worker", "okgit.eval.judge"])
def test_a_process_is_not_ready_while_the_device_is_held_alone(tmp_path, program):
    path, ledger = tmp_path / "gpu.lock", tmp_path / "ledger.jsonl"
    env = {**worker_env("cpu"), DEVICE_LOCK_ENV: str(path), LEDGER_ENV: str(ledger),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    with held(path, shared=False):
        proc = subprocess.Popen([sys.executable, "-m", program, "--device", "cpu"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
        try:
            assert _waits_for_a_lock(proc.pid, 120.0)  # its imports done, it waits for the device
            assert not _ready_within(proc, 1.0)
            released = time.monotonic()
        except BaseException:
            proc.kill()
            raise
    try:
        assert _ready_within(proc, 120.0)
        assert time.monotonic() - released < 60.0
        (entry,) = [json.loads(line) for line in ledger.read_text().splitlines()]  # its start, as a sweep reads it
        assert entry["role"] == program.rsplit(".", 1)[1] and entry["wait_s"] >= 1.0 and "warm-up" in entry["steps"]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow  # an evaluator's idle worker and spare judge: real processes
def test_an_evaluators_processes_exit_inside_a_shared_hold(tmp_path, monkeypatch):
    from okgit.eval.parent.local import LocalEvaluator
    from okgit.eval.parent.sandbox import WorkerProcess
    from okgit.eval.protocol.ledger import LEDGER_ENV

    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    closed: list[float] = []
    real_close = WorkerProcess.close

    def close(self: WorkerProcess) -> None:
        real_close(self)
        closed.append(time.time())

    monkeypatch.setattr(WorkerProcess, "close", close)
    evaluator = LocalEvaluator(device="cpu")  # a worker and a judge started ahead
    processes = [w.proc for queue in evaluator.pool.idle.values() for w in queue] + [evaluator._spare_judge.proc]
    evaluator.close()
    assert len(closed) == len(processes) == 2 and all(p.poll() is not None for p in processes)
    holds = [json.loads(line) for line in ledger.read_text().splitlines()]
    (hold,) = [h for h in holds if h.get("stage") == "close"]
    assert hold["mode"] == "shared"
    assert all(hold["t"] - hold["held_s"] - 0.01 <= t <= hold["t"] + 0.01 for t in closed), (hold, closed)


@pytest.mark.gpu
@pytest.mark.slow  # the real evaluator on a GPU: an evaluation and a final gate's round
def test_on_a_gpu_only_an_evaluations_worker_opens_a_profiler_session_after_its_start(tmp_path, monkeypatch):
    """An evaluation's worker profiles its candidate once timed, so once up it opens torch.profiler's
    session (3.4-4.5 s on the H200), after its start's hold (the ledger's `after`); the judge opens
    it in a thread beside its preparation, so its start names none, and the reference's profiled
    call still lists its kernels; the final gate's rounds only time: their workers start without
    it, and the ledger names them apart. While they last the problem's footprint counts their CUDA
    contexts."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from okgit.eval.parent.local import LocalEvaluator
    from okgit.eval.types import Status
    from okgit.problem import load_problem
    from tests.eval.test_eval_local import OPS

    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    evaluator = LocalEvaluator(device="cuda")
    try:
        problem, source = load_problem(OPS / "relu.py", root=str(OPS)), (OPS / "relu_triton.py").read_text()
        reference = evaluator.reference(problem)
        assert reference.profile is not None and reference.profile.top_kernels, reference.profile
        assert evaluator.evaluate(problem, source).status is Status.correct
        comparison = evaluator.compare(problem, source, rounds=1)
        assert len(comparison.candidate_us) == 1
    finally:
        evaluator.close()
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    starts = [e for e in entries if e.get("stage") == "process start"]
    # the problem's footprint counts the round's two workers' contexts while they last, then not
    from okgit.eval.parent.memory import CUDA_CONTEXT

    feet = [e["footprint_bytes"] for e in entries if "footprint_bytes" in e]
    assert len(feet) >= 3 and feet[-2] - feet[-1] == 2 * CUDA_CONTEXT, feet
    workers = [s for s in starts if s["role"] == "worker"]
    rounds = [s for s in starts if s["role"] == "timing worker"]
    judges = [s for s in starts if s["role"] == "judge"]
    assert judges and all("profiler" not in s["steps"] and "after" not in s for s in judges), starts
    assert workers and all("profiler" in s.get("after", {}) and "profiler" not in s["steps"] for s in workers), starts
    assert len(rounds) >= 2 and all("profiler" not in s["steps"] and "after" not in s and "warm-up" in s["steps"]
                                    for s in rounds), starts
    print("start holds (s): evaluations' workers", sorted(s["held_s"] for s in workers),
          "their profiler sessions after them", sorted(s["after"]["profiler"] for s in workers),
          "timing-only", sorted(s["held_s"] for s in rounds))
