"""An out-of-memory failure says in one line what did not fit, where, and what was free
(okgit.eval.worker.oom): the first line of a worker's failure, the final gate's timing round, and the
run's `error`, never torch's paragraph with the traceback under it. It stays the machine's failure,
not a verdict on the candidate (okgit.eval.types.INFRASTRUCTURE_SIGNS)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from okgit import final_gate
from okgit.errors import OkgitError
from okgit.eval.types import EvalError, EvalResult, Status
from okgit.eval.worker.calls import clipped, describe
from okgit.eval.worker.oom import oom_line
from okgit.problem import load_problem

OPS = Path(__file__).parents[1] / "ops"

# torch's message in the final-gate round of KernelBench L1/63 on an 80 GB H100 (its ten idle workers' lines alike)
TORCH_MESSAGE = (
    "CUDA out of memory. Tried to allocate 7.97 GiB. GPU 0 has a total capacity of 79.18 GiB of which 2.91 GiB "
    "is free. Process 1469 has 28.82 GiB memory in use. Process 1503 has 658.00 MiB memory in use. "
    + "".join(f"Process {1600 + i} has 520.00 MiB memory in use. " for i in range(10))
    + "Including non-PyTorch memory, this process has 40.59 GiB memory in use. Of the allocated memory 39.97 GiB "
    "is allocated by PyTorch, and 11.80 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
LINE = ("out of memory on cuda:0: a tensor of 7.97 GiB did not fit, 2.91 GiB of the device's 79.18 GiB free; "
        "this process held 40.59 GiB (39.97 GiB of it in tensors), 12 other processes 34.54 GiB (the largest 28.82 GiB)")


def _raised(e: BaseException) -> BaseException:
    try:
        raise e
    except BaseException as caught:  # noqa: BLE001 - a traceback to describe
        return caught


def test_torch_s_message_in_one_line() -> None:
    assert oom_line(torch.OutOfMemoryError(TORCH_MESSAGE)) == LINE
    assert oom_line(MemoryError()) == "out of host memory (MemoryError)"
    assert oom_line(ValueError("shapes differ")) is None
    older = RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.18 GiB total capacity)")
    assert oom_line(older) == "out of memory: CUDA out of memory"


def test_a_worker_s_failure_has_the_line_first_and_the_traceback_under_it() -> None:
    text = describe(_raised(torch.OutOfMemoryError(TORCH_MESSAGE)))
    first, rest = text.split("\n", 1)
    assert first == LINE and "Traceback (most recent call last)" in rest
    result = EvalResult(status=Status.error, device="cuda:0", error=EvalError(gate="timing", message=text))
    assert result.infrastructure_failure() == f"timing: {LINE}"[:300]  # the machine's failure: no verdict


def test_a_long_failure_keeps_its_first_line_within_the_limit() -> None:
    """A device shared by many processes makes torch's paragraph long: a failure's message is cut to
    4000 characters from its middle, never losing the line (it was cut from the front)."""
    crowded = TORCH_MESSAGE.replace("Process 1503", "".join(f"Process {i} has 520.00 MiB memory in use. "
                                                             for i in range(2000, 2100)) + "Process 1503")
    text = describe(_raised(torch.OutOfMemoryError(crowded)))
    assert len(text) > 4000
    kept = clipped(text)
    assert len(kept) <= 4000 and kept.splitlines()[0].startswith("out of memory on cuda:0: a tensor of 7.97 GiB")
    assert kept.endswith(text[-100:]) and clipped(LINE) == LINE


CANDIDATE = f'''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise torch.OutOfMemoryError({TORCH_MESSAGE!r})

    def forward(self, x):
        return torch.relu(x)
'''


@pytest.mark.slow  # the real evaluator: a worker per evaluation and per timing round
def test_a_timing_round_out_of_memory_ends_the_final_gate_in_one_line(evaluator, monkeypatch) -> None:
    """A worker that runs out of device memory (here its model's constructor says so, as torch
    would: a CPU has no device memory to run out of): the evaluation is `error` with the line first;
    a timing round's failure and the final gate's `Unjudged`, the run's error, are that line alone."""
    problem = load_problem(OPS / "relu.py", root=str(OPS))
    result = evaluator.evaluate(problem, CANDIDATE)
    assert result.status is Status.error and result.error.gate == "construct", result.error
    assert result.error.message.splitlines()[0] == LINE
    assert result.infrastructure_failure() == f"construct: {LINE}"[:300]

    with pytest.raises(OkgitError) as round_failed:
        evaluator.time_once(problem, evaluator.prepared(problem), CANDIDATE, "triton")
    assert str(round_failed.value) == f"a timing round failed: {LINE} (at construct)"

    monkeypatch.setattr(final_gate, "GATE_RETRY_WAITS_S", ())  # one try: the retries are test_final_gate's
    rounds = lambda: evaluator.time_once(problem, evaluator.prepared(problem), CANDIDATE, "triton")  # noqa: E731
    with pytest.raises(final_gate.Unjudged) as unjudged:
        final_gate._retried(rounds, "c002", "the interleaved rounds", lambda *a, **kw: None)
    error = str(unjudged.value)
    assert error == f"the interleaved rounds of c002 could not be judged after 1 tries: a timing round failed: {LINE} (at construct)"
    assert "\n" not in error and "Traceback" not in error
