"""The profiling pass holds the device alone only for its profiled calls: the worker asks for it
after the warm-up (ncu: before cudaProfilerStart; Proton: before its scope) and gives it back
once they are done (the tool's wrap-up and the worker's exit time nothing), and the parent,
holding the device shared from the job's start, answers as it does for a timing; the ledger
shows the pass's shared and exclusive holds apart, all under the stage "profile".

On a CPU neither tool runs (torch has no CUDA there), so the worker's side is profile_model
itself, on a real model, with torch's CUDA calls and the request recorded in the order they come;
the parent's side is a real process speaking the worker's protocol."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from okgit.eval.parent.local import LocalEvaluator
from okgit.eval.parent.sandbox import WorkerProcess, default_memory_limit, read_result
from okgit.eval.protocol.jobs import Job
from okgit.eval.protocol.ledger import LEDGER_ENV
from okgit.eval.worker.calls import CallFailed
from okgit.eval.worker.counters import WARMUP_CALLS, profile_model


class Doubled(torch.nn.Module):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.log.append("call")
        return x * 2


def recording_torch(log: list[str]) -> SimpleNamespace:
    """torch, with the CUDA calls profile_model makes written to `log` instead of run."""
    def note(name: str):
        return lambda: log.append(name)

    cuda = SimpleNamespace(synchronize=note("synchronize"), empty_cache=note("empty_cache"),
                           profiler=SimpleNamespace(start=note("profiler.start"), stop=note("profiler.stop")))
    return SimpleNamespace(no_grad=torch.no_grad, cuda=cuda)


@pytest.fixture
def log(monkeypatch) -> list[str]:
    """What profile_model did, in order; Proton's scope and its end recorded too (on a CPU, Proton's
    session cannot open)."""
    import triton.profiler as proton

    done: list[str] = []

    @contextmanager
    def scope(name: str):
        done.append("scope")
        yield
        done.append("scope end")

    monkeypatch.setattr(proton, "scope", scope)
    monkeypatch.setattr(proton, "finalize", lambda: done.append("finalize"))
    return done


@pytest.mark.parametrize(("tool", "profiled"), [
    ("ncu", ["empty_cache", "profiler.start", "call", "synchronize", "profiler.stop"]),
    ("proton", ["scope", "call", "call", "synchronize", "scope end", "finalize"]),
])
def test_the_worker_holds_the_device_alone_for_the_profiled_calls_only(log, tool, profiled):
    out = profile_model(recording_torch(log), Doubled(log), [torch.ones(4)], tool, lambda: log.append("alone"),
                        lambda: log.append("done"))
    assert log == ["call"] * WARMUP_CALLS + ["synchronize", "alone", *profiled, "done"]
    assert out["tool"] == tool and out["profiled_s"] >= 0


def test_a_pass_the_parent_does_not_give_the_device_alone_profiles_nothing(log):
    def refused() -> None:
        raise CallFailed("profiling", "error", "the parent did not give this job the device alone for its profiling")

    with pytest.raises(CallFailed):
        profile_model(recording_torch(log), Doubled(log), [torch.ones(4)], "ncu", refused, lambda: log.append("done"))
    assert log == ["call"] * WARMUP_CALLS + ["synchronize"]  # no profiler started, no call profiled


# Speaks the worker's protocol (ready, the job, the request for the device alone) with the shared and
# the alone parts of a pass a measurable length, and a wrapper's line among the messages, as ncu's
# would be; the wrapped worker's command line is ignored.
STAND_IN = textwrap.dedent("""
    import json, sys, time
    print(json.dumps({"ready": True}), flush=True)
    job_dir = json.loads(sys.stdin.readline())["job"]
    time.sleep(0.3)  # load, compile, warm up: shared
    print("==PROF== Connected to process", flush=True)  # the wrapper's (ncu's) words: no message
    print(json.dumps({"op": "exclusive"}), flush=True)
    reply = json.loads(sys.stdin.readline())
    time.sleep(0.3)  # the profiled call: alone
    print(json.dumps({"op": "check"}), flush=True)  # anything else goes to the judge, and a pass has none
    other = json.loads(sys.stdin.readline())
    print(json.dumps({"op": "timed"}), flush=True)  # the profiled call done
    back = json.loads(sys.stdin.readline())
    time.sleep(0.3)  # the tool's wrap-up, the worker's exit: shared
    with open(job_dir + "/result.json", "w") as f:  # the worker's result: here, the parent's answers
        json.dump({"replies": [reply, other, back]}, f)
""")


def test_the_parent_holds_a_pass_shared_then_alone_when_its_worker_asks(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    ev = LocalEvaluator(device="cpu", prestart=False)
    worker = WorkerProcess("cpu", default_memory_limit(), args=["--counters", "ncu"],
                           wrap=[sys.executable, "-c", STAND_IN])
    try:
        job = Job(role="candidate", source_path="", device="cpu", backend="triton", root=None, check=False,
                  counters="ncu")
        outcome = ev._in_worker(worker, job, 60.0, None, "profile", {})
        assert outcome.returncode == 0 and not outcome.crashed, outcome.stderr_tail
        upgraded, other, back = read_result(worker.dir)["replies"]
        assert upgraded["ok"] is True and 0.0 <= upgraded["waited_s"] < 1.0 and other == {"ok": False}
        assert back["ok"] is True
    finally:
        worker.close()
        ev.close()
    holds = [h for h in map(json.loads, ledger.read_text().splitlines()) if h.get("stage") != "close"]  # the pass's
    assert [(h["stage"], h["mode"]) for h in holds] == [("profile", "shared"), ("profile", "exclusive"),
                                                        ("profile", "shared")]
    assert all(h["held_s"] >= 0.25 for h in holds)  # each part where it ran
    assert set(holds[1]["for"]) == {"job"}  # a worker that names no gate: the hold is the job's


MAKES_WAY = textwrap.dedent("""
    import json, sys, time
    print(json.dumps({"ready": True}), flush=True)
    job_dir = json.loads(sys.stdin.readline())["job"]
    print(json.dumps({"op": "make_way"}), flush=True)  # between two calls
    reply = json.loads(sys.stdin.readline())
    time.sleep(0.5)  # the next call
    with open(job_dir + "/result.json", "w") as f:
        json.dump({"replies": [reply]}, f)
""")


def test_the_parent_answers_make_way_and_its_wait_is_not_the_jobs_time(tmp_path, monkeypatch):
    """A worker's offer of its turn between two calls is answered (made way or not), and the seconds
    the parent waited for the device then move the job's deadline: a job with a 1 s limit whose
    parent waited 0.8 s for other jobs' timings, and which then works 0.5 s, still ends on its own."""
    from okgit.eval.parent.devices import DeviceHold

    def slow_way(self, away=None) -> bool:
        time.sleep(0.8)  # other jobs' timings went first
        return True

    monkeypatch.setattr(DeviceHold, "make_way", slow_way)
    ev = LocalEvaluator(device="cpu", prestart=False)
    worker = WorkerProcess("cpu", default_memory_limit(), wrap=[sys.executable, "-c", MAKES_WAY])
    try:
        job = Job(role="candidate", source_path="", device="cpu", backend="triton", root=None, check=False)
        outcome = ev._in_worker(worker, job, 1.0, None, "evaluation", {})
        assert not outcome.timed_out and outcome.returncode == 0, outcome.stderr_tail
        (reply,) = read_result(worker.dir)["replies"]
        assert reply["ok"] is True and reply["made_way"] is True and reply["waited_s"] >= 0.8
    finally:
        worker.close()
        ev.close()
