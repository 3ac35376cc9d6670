"""Device memory of the judge and of a timing: when the judge hands its cached memory back after a
check (prepared.must_release), what a candidate's checked timing holds by the judge's count
(measure.checked_timing_bytes) and how the parent tells the judge such a timing is still to come
(Job.checked_timing, the relay's check messages), and how many input sets a timing rotates
(measure.set_count)."""

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import OPS
from scriptrun import run_script

from okgit.eval.judge.prepared import must_release
from okgit.eval.parent.memory import CUDA_CONTEXT
from okgit.eval.parent.reference import PreparedReference
from okgit.eval.parent.relay import Relay
from okgit.eval.protocol.jobs import Case, CheckedTiming, Job, Timing
from okgit.eval.worker.measure import TIMING_SET_BYTES, checked_timing_bytes

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30
H100_80GB = 85_031_714_816  # the device's total memory, as torch.cuda.mem_get_info reports it
# KernelBench L1/63: nn.Conv2d(16, 128, 3) on 16 x 16 x 1024 x 1024 fp32
L1_63_INPUT = 16 * 16 * 1024 * 1024 * 4  # 1 GiB
L1_63_OUTPUT = 16 * 128 * 1022 * 1022 * 4  # 7.97 GiB
FAST_SEEDS, FAST_SAMPLES = 5, 10  # a fast evaluation's (okgit.eval.parent.local.MODES)


def test_a_cached_case_never_releases():
    assert not must_release(False, free=0, case_bytes=26 * GiB)


def test_a_recomputed_case_keeps_its_memory_while_the_candidate_has_room():
    # KernelBench L1/39 alone on an H200: 17.2 GB per case, ~68 GB free after a check
    case = 17 * GiB
    assert not must_release(True, free=2 * case + TIMING_SET_BYTES, case_bytes=case)
    assert not must_release(True, free=63 * GiB, case_bytes=case)


def test_a_recomputed_case_releases_where_the_candidate_could_run_short():
    case = 17 * GiB
    assert must_release(True, free=2 * case + TIMING_SET_BYTES - 1, case_bytes=case)
    assert must_release(True, free=10 * GiB, case_bytes=case)  # a device crowded by other problems
    assert must_release(True, free=0, case_bytes=0)


def test_timing_rotates_input_sets_that_fit_and_one_set_of_a_multi_gb_input():
    """The evaluator's timing and a sweep's baselines rotate as many input sets as set_count says:
    three of a small case, one of L1/45's 16 GiB input (the baselines once drew three, 96 GiB with
    the timer's copies, beside a footprint counted for one)."""
    from okgit.eval.worker.measure import set_count

    assert set_count(64 * 2**20, 3) == 3
    assert set_count(3 * 2**30, 3) == 1 and set_count(2 * 2**30, 3) == 2
    assert set_count(16 * 2**30, 3) == 1 and set_count(0, 3) == 3
    assert set_count(1, 1) == 1  # never more than the seeds there are


def test_l1_63_on_an_80gb_h100_hands_back_before_a_checked_timing():
    """The failure on an H100: the judge kept a salted case's 28.8 GiB by the rule without the
    timing's outputs (free memory above 2 x 8.97 + 8 = 25.9 GiB), and the worker's checked timing
    (four input sets and their copies, 8 GiB, then four clones and the output in flight, 39.8 GiB)
    ran out of memory at its fifth output. Told of the timing, the judge hands back; handed back,
    the timing fits."""
    case = L1_63_INPUT + L1_63_OUTPUT
    held = checked_timing_bytes(L1_63_INPUT, L1_63_OUTPUT, FAST_SEEDS, FAST_SAMPLES)
    assert held == 8 * GiB + 5 * L1_63_OUTPUT  # 47.8 GiB
    judge = int(28.8 * GiB)
    # after its last check before the timing, the worker holds a case (inputs, their copy, outputs)
    # and each process a CUDA context: the judge, the worker and an idle worker started ahead
    worker = 2 * L1_63_INPUT + L1_63_OUTPUT
    free = H100_80GB - judge - worker - 3 * CUDA_CONTEXT  # 38.9 GiB
    assert 2 * case + TIMING_SET_BYTES <= free < held
    assert not must_release(True, free, case)  # the rule that kept it
    assert must_release(True, free, case, held)
    assert must_release(False, free, case, held)  # a check of a kept case too: an earlier check's memory
    assert free + judge >= held  # what the judge hands back makes the room


def test_a_checked_timing_is_kept_beside_the_judge_only_where_all_of_it_fits():
    case = L1_63_INPUT + L1_63_OUTPUT
    held = checked_timing_bytes(L1_63_INPUT, L1_63_OUTPUT, FAST_SEEDS, FAST_SAMPLES)
    assert must_release(True, held - 1, case, held)
    assert not must_release(True, held, case, held)
    assert not must_release(False, held, case, held)


def test_a_small_problem_keeps_its_cache_before_a_checked_timing():
    """64 MiB in and out: five input sets, their copies and six outputs are 1 GiB; the rule without
    the timing's outputs (8.25 GiB here) decides, as before."""
    small = 64 * 2**20
    held = checked_timing_bytes(small, small, FAST_SEEDS, FAST_SAMPLES)
    assert held == 16 * small
    for free in (60 * GiB, 2 * 2 * small + TIMING_SET_BYTES):
        assert not must_release(True, free, 2 * small, held)
        assert not must_release(False, free, 2 * small, held)
    assert must_release(True, 2 * 2 * small + TIMING_SET_BYTES - 1, 2 * small, held)  # a crowded device
    assert not must_release(False, held, 2 * small, held)  # its kept case's check: the timing fits


def test_l1_39_alone_on_an_h200_keeps_its_cache_before_a_checked_timing():
    """KernelBench L1/39 (8 GiB in, 8 GiB out: one input set, two clones and the output in flight,
    40 GiB) keeps what it kept on the H200, ~63 GiB free after a check: no release paid there."""
    side = 32768 * 65535 * 4
    held = checked_timing_bytes(side, side, FAST_SEEDS, FAST_SAMPLES)
    assert held == 2 * side + 3 * side
    assert not must_release(True, 63 * GiB, 2 * side, held)


@pytest.mark.parametrize("free_gib", [0, 10, 25, 26, 40, 47, 48, 70])
def test_a_checked_timing_never_keeps_where_the_old_rule_hands_back(free_gib: int):
    for case_in, case_out in ((L1_63_INPUT, L1_63_OUTPUT), (2**20, 2**20), (8 * GiB, 8 * GiB)):
        case = case_in + case_out
        held = checked_timing_bytes(case_in, case_out, FAST_SEEDS, FAST_SAMPLES)
        for recomputed in (True, False):
            if must_release(recomputed, free_gib * GiB, case):
                assert must_release(recomputed, free_gib * GiB, case, held)


def test_without_a_checked_timing_the_rule_is_the_old_threshold():
    """A final-gate round or the search's screen (no correctness check, nothing kept for a judge),
    and every timed call's check (its timing is over): twice the case plus the input sets' 8 GiB."""
    case = L1_63_INPUT + L1_63_OUTPUT
    threshold = 2 * case + TIMING_SET_BYTES  # 25.9 GiB
    assert must_release(True, threshold - 1, case, None)
    assert not must_release(True, threshold, case, None)
    assert not must_release(False, 0, case, None)


def _job(**kw: Any) -> Job:
    seeds = [Case(id=f"s{i}", kind="seed", shape=0, seed=i) for i in range(5)]
    cases = seeds + [Case(id="signed", kind="distribution", shape=0, seed=0, signed=True)]
    return Job(**{"role": "candidate", "source_path": "", "device": "cuda", "backend": "triton", "root": None,
                  "cases": cases, "timing": Timing(warmup=3, samples=10), **kw})


def test_only_a_candidates_checked_timing_is_one_the_judge_is_told_of():
    assert _job().checked_timing() == CheckedTiming(seeds=5, samples=10)
    assert _job().keeps_checked()
    assert _job(check=False).checked_timing() is None  # a final-gate round, the search's screen
    assert _job(role="judge").checked_timing() is None  # the reference's own timing
    assert _job(timing=None).checked_timing() is None  # a CPU's evaluation: nothing timed


class RecordingJudge:
    """The judge process's side of the channel: what it was asked, answered as a passing check."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.asked.append(message)
        return {"checks": [], "fingerprints": None, "seconds": {}}


def _relay(tmp_path: Path, timing: CheckedTiming | None) -> tuple[Relay, RecordingJudge]:
    judge = RecordingJudge()
    cases = [Case(id=f"s{i}", kind="seed", shape=0, seed=i) for i in range(2)]
    prep = PreparedReference(judge=judge, reference_path="", shapes=[{}], cases=cases,  # type: ignore[arg-type]
                             calls={}, tolerances={}, deterministic=True, degenerate=None, cost={}, case_bytes=0,
                             init_seed=0)
    relay = Relay(prep, {"s0", "s1"}, "cuda", 10.0, timing)
    relay.job_dir = tmp_path
    return relay, judge


def test_the_judge_is_told_of_the_checked_timing_with_each_check_before_it(tmp_path: Path):
    timing = _job().checked_timing()
    relay, judge = _relay(tmp_path, timing)
    for key in ("s0", "s0#repeat", "fresh", "timed:s1~123"):
        assert relay({"op": "check", "key": key, "leaves": [], "outputs": []}) == {"ok": True}
    told = [message["timing"] for message in judge.asked]
    assert told == [{"seeds": 5, "samples": 10}] * 3 + [None]  # the timed call's check comes after it
    assert CheckedTiming(**told[0]) == timing  # as the judge reads it back


def test_a_job_without_a_checked_timing_tells_the_judge_of_none(tmp_path: Path):
    relay, judge = _relay(tmp_path, _job(check=False).checked_timing())
    relay({"op": "check", "key": "s0", "leaves": [], "outputs": []})
    assert judge.asked[0]["timing"] is None


SIZES = """
import json, sys

import torch

from okgit.eval.judge.process import Judge
from okgit.eval.parent.reference import judge_job
from okgit.eval.protocol.jobs import CheckedTiming
from okgit.eval.worker import calls
from okgit.problem import load_problem

path = sys.argv[1]
judge = Judge("cpu")
judge.prepare(judge_job(load_problem(path), "cpu", path, [1000 + i for i in range(5)], 0, None, None))
prep = judge.prep
module = calls.load_op(path, "okgit_sizes", prep.shapes[0])  # the shape the judge prepared
inputs = module.get_inputs()
with torch.no_grad():
    out = module.Model(*module.get_init_inputs())(*inputs)
print(json.dumps({"set": prep.set_bytes, "output": prep.output_bytes, "case": prep.case_bytes,
                  "timing": prep.timing_bytes(CheckedTiming(seeds=5, samples=10)), "none": prep.timing_bytes(None),
                  "inputs": calls.nbytes(inputs), "outputs": calls.nbytes([out])}))
"""


@pytest.mark.slow  # a judge of its own in a Python process (torch, Triton's interpreter), a convolution prepared
def test_a_prepared_judge_sizes_a_checked_timing_from_its_seed_case():
    """The judge's own preparation knows one input set's bytes and one output's (a convolution's,
    smaller than its input here) and counts the timing the parent tells it of from them, as the
    worker sizes it; a job without one leaves the rule as it was."""
    proc = run_script(SIZES, [str(OPS / "conv_sub_mish.py")], {**os.environ, "TRITON_INTERPRET": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (got["set"], got["output"]) == (got["inputs"], got["outputs"]) and got["set"] != got["output"]
    assert got["case"] >= got["set"] + got["output"]
    assert got["timing"] == checked_timing_bytes(got["inputs"], got["outputs"], 5, 10) and got["none"] is None
    assert must_release(False, got["timing"] - 1, got["case"], got["timing"])  # told the device is that small


def test_held_bytes_count_each_storage_once_and_whole_and_compact_copies_only_views():
    import torch

    from okgit.eval.worker import calls

    base = torch.zeros(64, 256)
    loss = torch.nn.functional.mse_loss(base, torch.ones(64, 256))  # a 0-dim view of its reduction's storage
    assert loss.nbytes == 4 and calls.held_bytes([loss]) == loss.untyped_storage().nbytes() > 4
    assert calls.held_bytes([base, base[1:], base.t()]) == base.nbytes  # views of one storage: once
    kept = calls.compact([loss, base, 3])
    assert kept[0].untyped_storage().nbytes() == 4 and torch.equal(kept[0], loss)
    assert kept[1] is base and kept[2] == 3  # a tensor of its own storage and a constant stay as they are


KEPT = """
import json, sys

from okgit.eval.judge.process import Judge
from okgit.eval.parent.reference import judge_job
from okgit.problem import load_problem

path = sys.argv[1]
judge = Judge("cpu")
judge.prepare(judge_job(load_problem(path), "cpu", path, [0, 1, 2], 2**30, None, None))
prep = judge.prep
kept = [t for native, f64 in prep.cache.values() for t in native + (f64 or [])]
print(json.dumps({"cases": sorted(prep.cache), "cached": prep.cached_bytes, "elements": sum(t.nbytes for t in kept),
                  "storages": sum(t.untyped_storage().nbytes() for t in kept), "output": prep.output_bytes,
                  "set": prep.set_bytes}))
"""


@pytest.mark.slow  # a judge of its own in a Python process (torch, Triton's interpreter)
def test_the_judge_keeps_a_losss_value_not_the_storage_it_views():
    """KernelBench L1/96 (smooth_l1_loss of two 32768 x 32768 inputs) ran out of an H100's and an
    H200's memory in its judge: each case's 0-dim losses (native and float64) kept the full-size
    storage their reduction ran in, 12 GiB a case, while the cache counted 12 bytes. The judge keeps
    the values alone, and counts an output in flight at what it holds (examples/12_mse_loss.py:
    mse_loss returns its mean the same way)."""
    proc = run_script(KEPT, [str(ROOT / "examples" / "12_mse_loss.py")], {**os.environ, "TRITON_INTERPRET": "1"},
                      timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"s0", "s1", "s2", "signed"} <= set(got["cases"])
    assert got["cached"] == got["elements"] == got["storages"] == len(got["cases"]) * (4 + 8)  # fp32 and fp64 losses
    assert got["output"] == got["set"] // 2  # the loss's storage (one input's size), as the reference's call holds it
