"""Gates as objects (okgit/eval/parent/gates/) and the call keys (okgit/eval/protocol/keys.py):
a gate joins the verdict, the prompt's rules and the jobs through its registration alone.

The verdict is pure over data (the worker's facts, the judge's answers), so these build the
facts of a tiny evaluation and decide it in-process; tests/eval/test_eval_cases.py judges real
candidates with real workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from okgit.eval.parent.gates import call_gates, gate_names, gates, rules_text
from okgit.eval.parent.gates.base import GATES, Evidence, Findings, Gate, gate
from okgit.eval.parent.reference import PreparedReference
from okgit.eval.parent.verdict import decide
from okgit.eval.protocol.checks import LeafTolerance
from okgit.eval.protocol.jobs import Case
from okgit.eval.protocol.keys import FRESH, FRESH_FIRST, CallKey, CallKind, fresh_case
from okgit.eval.types import Status

LEAF = {"type": "torch.Tensor", "exact": True, "shape": [4], "dtype": "torch.float32", "device": "cpu", "alias": None}


def test_call_keys_round_trip_and_refuse_other_forms():
    keys = [CallKey.of("s0"), CallKey.repeat("s1"), CallKey.timed("signed", 12345), FRESH, FRESH_FIRST]
    texts = [k.format() for k in keys]
    assert texts == ["s0", "s1#repeat", "timed:signed~12345", "fresh", "fresh#1"]
    assert [CallKey.parse(t) for t in texts] == keys
    for bad in ("", "s0~5", "timed:s0", "timed:s0~x", "s0#again", "a b", "timed:s0~5~6", "../x"):
        assert CallKey.parse(bad) is None, bad
    assert CallKey.repeat("s0").part("seed") == "repeat" and CallKey.of("x1").part("extra_shape") == "extra_shape"
    assert fresh_case(["s0", "s1", "s2"]) == "s1" and fresh_case(["s0"]) is None


def test_every_part_of_the_protocol_has_its_gate():
    parts = call_gates()
    case_kinds = {"seed", "distribution", "extra_shape", "init_inputs", "modes"}
    assert case_kinds | {k.value for k in (CallKind.repeat, CallKind.fresh, CallKind.timed)} | {"modes.state",
                                                                                                   "modes.eval"} <= set(parts)
    assert set(parts.values()) <= set(gate_names())
    # what a worker names itself when it stops while loading the candidate (okgit.eval.worker.candidate)
    assert {"compile", "device", "own_shape"} <= set(gate_names())


def test_the_gate_names_the_judge_reports_are_gates():
    """check_leaf names the output gates itself (a wrong dtype, an unwritten element, a NaN
    pattern): each name it reports is a registered gate's."""
    torch = pytest.importorskip("torch")
    from okgit.eval.judge.tolerance import check_leaf

    ref = torch.ones(4)
    tol = LeafTolerance(1e-4, 1e-4, 0.0, 1.0)
    nan_ref = torch.tensor([1.0, float("nan"), 1.0, 1.0])
    found = [check_leaf(torch.ones(4, dtype=torch.float64), LEAF, ref, None, tol, "seeds"),
             check_leaf(torch.tensor([1.0, float("nan"), 1.0, 1.0]), LEAF, ref, None, tol, "seeds"),
             check_leaf(torch.ones(4), LEAF, nan_ref, None, tol, "seeds"),
             check_leaf(torch.full((4,), 2.0), LEAF, ref, None, tol, "seeds")]
    assert [c.gate for c in found] == ["output_type", "outputs_written", "nan_pattern", "seeds"]
    assert {c.gate for c in found} <= set(gate_names())


def _evidence(**facts: Any) -> tuple[PreparedReference, list[Case], dict[str, Any], dict[str, Any]]:
    """One seed case called twice, right both times, one Triton launch each: a correct candidate."""
    cases = [Case(id="s0", kind="seed", shape=0, seed=1000)]
    call = {"spec": "t", "leaves": [LEAF], "inputs_changed": [], "launches": {"triton": 1, "cuda": 0},
            "failed_launches": {"triton": 0, "cuda": 0}, "kernels": ["k"]}
    prep = PreparedReference(judge=None, reference_path="", shapes=[{}], cases=cases,  # type: ignore[arg-type]
                             calls={"s0": {"spec": "t", "leaves": [LEAF], "inputs_changed": []}},
                             tolerances={"s0": [LeafTolerance(1e-4, 1e-4, 0.0, 1.0)]}, deterministic=True,
                             degenerate=None, cost={}, case_bytes=0, init_seed=1000)
    result = {"calls": {"s0": call, "s0#repeat": call}, "backend_launches": {"triton": 2, "cuda": 0},
              "failed_launches": {"triton": 0, "cuda": 0}, **facts}
    answer = {"checks": [{"ok": True, "max_abs": 0.0, "max_rel": 0.0}], "fingerprints": ["f"]}
    return prep, cases, result, {"s0": answer, "s0#repeat": answer}


def _decide(prep, cases, result, checks):
    return decide(prep, cases, result, checks, backend="triton", device="cpu", mode="fast", base={"device": "cpu"})


@pytest.fixture
def side_work_gate() -> Iterator[type[Gate]]:
    """A gate of a fact no built-in reads, registered as an extension would be, then removed."""

    @gate(205)
    class SideWork(Gate):
        name = "side_work"
        rule = "Do no work on the side."
        rejects = True

        def check(self, ev: Evidence, found: Findings) -> None:
            if ev.result.get("side_work_us", 0) > 0:
                found.fail(self.name, f"{ev.result['side_work_us']} us of work on the side")

    yield SideWork
    del GATES._entries["side_work"]


def test_a_new_gate_joins_through_the_registry_alone(side_work_gate):
    names = gate_names()
    assert names.index("backend_kernel") < names.index("side_work") < names.index("timed_outputs")
    assert "- [side_work] Do no work on the side." in rules_text()
    clean = _decide(*_evidence())
    assert clean.status is Status.correct and "side_work" in [g.name for g in clean.gates]
    caught = _decide(*_evidence(side_work_us=7))
    assert caught.status is Status.rejected and caught.error.gate == "side_work"
    assert caught.error.message == "7 us of work on the side"
    # the first failed gate in the registered order names the error: backend_kernel (200) before it
    both = _decide(*_evidence(side_work_us=7, backend_launches={"triton": 0}))
    assert both.error.gate == "backend_kernel"
    assert {g.name: g.passed for g in both.gates}["side_work"] is False


def test_the_verdict_loops_over_the_registered_gates():
    out = _decide(*_evidence())
    assert out.status is Status.correct, out.error
    listed = [g.name for g in out.gates]
    # registered order; device only where it fails, the modes and timing gates only where they ran
    assert listed == [n for n in gate_names() if n not in ("device", "train_mode", "state", "eval_mode",
                                                           "timed_outputs", "streams", "roofline")]
    assert [g.name for g in gates()][:3] == ["static", "compile", "device"]
    # a repeat the judge never answered: an error at the repeat gate, whatever the worker says
    prep, cases, result, checks = _evidence()
    del checks["s0#repeat"]
    missing = _decide(prep, cases, result, checks)
    assert (missing.status, missing.error.gate) == (Status.error, "repeat")
    # a failure under a name no gate has still fails the candidate
    prep, cases, result, checks = _evidence()
    checks["s0"] = {"checks": [{"ok": False, "gate": "", "message": "differs"}], "fingerprints": ["f"]}
    assert _decide(prep, cases, result, checks).status is Status.incorrect


def _timed(prep: PreparedReference, samples_us: float, **timing: Any) -> dict[str, Any]:
    """A GPU evaluation's timing facts (okgit.eval.worker.measure), for the timed gates on a CPU."""
    prep.timing = {"samples_us": [100.0] * 5}
    return {"samples_us": [samples_us] * 5, "residual_sync_us": 0.0, "batch_host_us": 5.0, "batch_calls": 10,
            **timing}


def test_the_timed_gates_read_the_timing_facts():
    prep, cases, result, checks = _evidence()
    out = _decide(prep, cases, {**result, "timing": _timed(prep, 50.0)}, checks)
    assert out.status is Status.correct and out.timed and out.runtime_us == 50.0 and out.speedup == 2.0
    assert [g.name for g in out.gates][-2:] == ["streams", "roofline"]
    escaped = _decide(prep, cases, {**result, "timing": _timed(prep, 50.0, escaped=["timed:s0~7"])}, checks)
    assert (escaped.status, escaped.error.gate) == (Status.rejected, "streams") and not escaped.timed
    assert "timed:s0~7" in escaped.error.message
    left = _decide(prep, cases, {**result, "timing": _timed(prep, 50.0, residual_sync_us=900.0)}, checks)
    assert (left.status, left.error.gate) == (Status.rejected, "streams")
    # 1 GB moved at 1 TB/s takes 1000 us at least: 50 us is less work than the op needs
    prep.peaks, prep.cost = {"copy_bandwidth": 1e12, "matmul": {"fp32": 1e14}}, {"flops": 0.0, "min_bytes": 1e9}
    timing = _timed(prep, 50.0)
    slow_reference = _decide(prep, cases, {**result, "timing": timing}, checks)  # the reference at 100 us: below too
    assert slow_reference.status is Status.correct and "skipped" in slow_reference.gates[-1].detail
    prep.timing = {"samples_us": [2000.0] * 5}
    fast = _decide(prep, cases, {**result, "timing": timing}, checks)
    assert (fast.status, fast.error.gate) == (Status.rejected, "roofline")
    # the floor assumes 1.25x the measured bandwidth: 800 us at least, 720 us the least plausible
    # (L1/45 on the H200: torch's copy measured below what an honest pooling kernel reached)
    near_timing, below_timing = _timed(prep, 760.0), _timed(prep, 700.0)
    prep.timing = {"samples_us": [2000.0] * 5}
    near = _decide(prep, cases, {**result, "timing": near_timing}, checks)
    assert near.status is Status.correct and near.gates[-1].name == "roofline" and not near.gates[-1].detail
    below = _decide(prep, cases, {**result, "timing": below_timing}, checks)
    assert (below.status, below.error.gate) == (Status.rejected, "roofline") and "800.00 us" in below.error.message
    # the op's work after an exact rewrite (okgit.lower.work) is what the message names
    prep.cost["rewrites"] = ["linear_sum"]
    named = _decide(prep, cases, {**result, "timing": below_timing}, checks)
    assert "the op's work by its exact rewrites (linear_sum)" in named.error.message
