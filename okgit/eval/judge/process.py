"""The judge: `python -m okgit.eval.judge`, the trusted process that owns a problem's reference.

One judge per prepared reference, alive while the evaluator is. It loads the reference at each
shape, draws every case's inputs on the problem's device, runs the reference natively and in
float64, and fixes what every candidate is judged by (cases, tolerances, the reference's own
facts, degeneracy, determinism, cost, its timing). Then, for each output a candidate's worker
exports (okgit.eval.worker.export), it compares in place on the device and answers with the gates'
findings and a fingerprint of the output. Expected outputs live only here: kept between
evaluations while they fit `Job.cache_bytes`, drawn and computed again otherwise, so the
memory of a check is bounded by one case whatever the number of cases.

Messages (okgit.eval.protocol.channel): {"op": "prepare", "job": Job} -> the prepared facts;
{"op": "measure"} -> the reference's timing and profile on a GPU (a request of its own, since the
parent holds the device alone for it and shares it for the rest); {"op": "check", "case", "gate",
"fingerprint", "leaves", "outputs", "dir", "timing" (a CheckedTiming still to come in the job, or
None)} -> {"checks", "fingerprints" (None unless asked for), "seconds"} (the last: where the
check's time went, okgit.eval.parent.phases).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from okgit.eval.judge.prepared import (
    PEAK_SALT,
    Arm,
    CaseStats,
    Prepared,
    count_cost,
    device_peaks,
    must_release,
    scale_for_cpu,
    shape_variants,
)
from okgit.eval.judge.tolerance import (
    check_leaf,
    degenerate_reason,
    fingerprint,
    inputs_digest,
    magnitude,
    random_reason,
    reference_error,
    summarize_outputs,
)
from okgit.eval.protocol.jobs import Case, CheckedTiming, Job, flatten, perturb_floats
from okgit.eval.worker import calls
from okgit.eval.worker.tensors import bitwise_equal


class Judge:
    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.device = device
        calls.start(torch, device)
        if device == "cuda":
            from okgit.eval.worker import timing

            timing.bind()
        calls.warm_up(torch, device)
        self.prep: Prepared | None = None
        self.layout_outputs: dict[str, list[Any]] = {}  # case -> the channels_last reference's outputs, until its stats
        self.phase_file: Path | None = None
        # while the reference is prepared and timed on a GPU: [phase, the peak bytes allocated in
        # the phase, the bytes still allocated at its end, the peak bytes reserved in it, its
        # seconds], for a sweep's admission to see what drives a problem's footprint and what the
        # judge keeps (and where the preparation's seconds go). Each
        # phase begins with the allocator's cache emptied, so that its reserved peak is its own
        # (blocks a phase before it left cached, in pieces of other sizes, are not counted again).
        self.memory_trace: list[list[Any]] | None = None
        self.current, self.began = "start", time.monotonic()  # the phase, and when it began
        self.profiler_session: threading.Thread | None = None  # torch.profiler's one-time start (okgit.eval.judge.__main__)

    def phase(self, gate: str) -> None:
        now = time.monotonic()  # a phase's seconds include the cache handed back as it begins
        if self.memory_trace is not None and self.device == "cuda":
            cuda = self.torch.cuda
            self.memory_trace.append([self.current, int(cuda.max_memory_allocated()), int(cuda.memory_allocated()),
                                      int(cuda.max_memory_reserved()), round(now - self.began, 3)])
            cuda.empty_cache()
            cuda.reset_peak_memory_stats()
        self.current, self.began = gate, now
        if self.phase_file is not None:
            self.phase_file.write_text(gate)

    # ---- preparation ---------------------------------------------------------------------------
    def prepare(self, job: Job) -> dict[str, Any]:
        torch = self.torch
        if job.root and job.root not in sys.path:
            sys.path.insert(0, job.root)
        prep = self.prep = Prepared(job)
        result: dict[str, Any] = {"calls": {}}
        if job.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        self.memory_trace, self.current, self.began = [], "reference: start", time.monotonic()
        self.phase("reference: import")
        main = dict(job.knobs)
        if job.device == "cpu":
            self.phase("reference: scale shapes for the CPU")
            main = scale_for_cpu(self.torch, job, main)
        prep.shapes = [main]
        seeds = job.seeds
        stats: dict[str, CaseStats] = {}
        first: list[Any] = []
        dropped: list[str] = []

        def run_case(case: Case) -> None:
            native, f64, facts, inputs_bytes = self.compute(case, record=True)
            result["calls"][case.id] = facts
            if "parts" in facts:
                prep.parts[case.id] = facts["parts"]
            stats[case.id] = self.stats(native, f64, inputs_bytes, first if case.id != "s0" else None,
                                        self.layout_outputs.pop(case.id, None))
            # what is kept beyond the case holds its outputs' elements alone, not the storage they
            # may be views of (calls.compact)
            native, f64 = calls.compact(native), calls.compact(f64) if f64 is not None else None
            if not first:
                first.extend(native)
            self.keep(case, native, f64)

        with calls.poisoned(torch):
            prep.arms[0] = self.arm(job, 0, main)
            main_cases = [Case(id=f"s{i}", kind="seed", shape=0, seed=s) for i, s in enumerate(seeds)]
            main_cases.append(Case(id="signed", kind="distribution", shape=0, seed=seeds[0], signed=True))
            for case in main_cases:
                prep.cases[case.id] = case
                run_case(case)
            # determinism of the reference itself: the model called again on seed 0, as a candidate's
            # repeat is, so a reference drawing random numbers shows it (the random stream has moved on)
            self.phase("reference: determinism")
            again = calls.call(torch, prep.arms[0].model, calls.draw_inputs(torch, prep.arms[0].module, main_cases[0],
                                                                            self.device), self.device,
                               label="s0#again", gate="reference: determinism", check_inputs=False)
            deterministic = len(again.leaves) == len(first) and all(
                bitwise_equal(a, b) for a, b in zip(again.leaves, first, strict=True))
            random_why = None if deterministic else random_reason(again.leaves, first)
            del again
            self.init_case(prep, run_case, dropped)
            self.modes_case(prep, run_case)
            self.extra_shapes(prep, main, run_case, dropped)
        kept = prep.drop_nonfinite(stats, dropped)
        self.phase("reference: flops")
        result["cost"] = count_cost(self.torch, prep, self.device)
        prep.fix_tolerances(stats, kept, contraction=result["cost"]["counted_flops"] > 0)
        summaries = [stats[c.id].summary for c in kept if c.kind in ("seed", "distribution")]
        result.update(
            shapes=prep.shapes, cases=[vars(c) for c in kept], dropped_shapes=dropped, deterministic=deterministic,
            degenerate=random_why or degenerate_reason(summaries),
            tolerances={cid: [asdict(t) for t in tols] for cid, tols in prep.tolerances.items()},
            case_bytes=max(s.nbytes for s in stats.values()), cached=sorted(prep.cache),
        )
        prep.case_bytes = result["case_bytes"]
        prep.set_bytes = stats["s0"].input_bytes  # the timing rotates the seed cases' inputs at the main shape
        prep.output_bytes = stats["s0"].nbytes - stats["s0"].input_bytes
        del first[:]
        if job.device == "cuda":  # what this problem holds on the device, for a sweep's admission
            seed = next((c for c in kept if c.kind == "seed"), None)
            if seed is not None:  # as a timed call's check does it: the seed case drawn salted, computed again
                try:
                    self.expected(replace(seed, salt=PEAK_SALT))
                except (calls.CallFailed, RuntimeError) as e:  # the device full: its phase says how far it got
                    if not calls.out_of_memory(e):
                        raise
            self.phase("reference: prepared")  # the trace goes with the timing's answer (`measure`)
            result["device_peak_bytes"], result["preparation_peak_bytes"] = device_peaks(
                self.memory_trace or [], kept, set(prep.cache))
        # torch.profiler's start, under way beside the preparation, is done before it answers: never
        # beside the timing the parent then holds the device alone for
        if self.profiler_session is not None:
            self.profiler_session.join()
            self.profiler_session = None
        return result

    def arm(self, job: Job, key: int | str, knobs: dict[str, int], perturbed: list[Any] | None = None) -> Arm:
        torch = self.torch
        module = calls.load_op(job.source_path, f"okgit_reference_{key}", knobs)
        init = perturbed if perturbed is not None else calls.init_args(torch, module, job.init_seed, self.device)
        model, _ = calls.build(torch, module.Model, init, self.device)
        return Arm(module, model, self.double_model(module, init), init, calls.layout_twin(torch, model))

    def init_case(self, prep: Prepared, run_case: Any, dropped: list[str]) -> None:
        """Constructor arguments baked into a kernel: the same model from perturbed floats, one seed."""
        base = prep.arms[0]
        perturbed, changes = perturb_floats(list(base.init), calls.init_names(base.module.Model))
        if not changes:
            dropped.append("init_inputs: no float constructor argument to perturb")
            return
        case = Case(id="i0", kind="init_inputs", shape=0, seed=prep.job.seeds[0],
                    note="built with constructor arguments " + ", ".join(changes))
        try:
            prep.arms[case.id] = self.arm(prep.job, case.id, prep.shapes[0], perturbed)
            prep.cases[case.id] = case
            run_case(case)
        except Exception as e:
            if calls.out_of_memory(e):
                raise
            dropped.append(f"init_inputs: the reference raises with {', '.join(changes)}: "
                           f"{calls.describe(e).splitlines()[-1]}")
            prep.forget(case)

    def modes_case(self, prep: Prepared, run_case: Any) -> None:
        """Where the reference's behaviour or state depends on its mode: one case that calls a fresh
        model in training mode, reads its buffers, and calls it in eval mode (calls.mode_sequence)."""
        base = prep.arms[0]
        with open(prep.job.source_path) as f:
            source = f.read()
        if not calls.mode_dependent(self.torch, base.model, source):
            return
        seeds = prep.job.seeds
        case = Case(id="m0", kind="modes", shape=0, seed=seeds[2 % len(seeds)],
                    note="a fresh model: training mode, its buffers, then eval mode")
        prep.arms[case.id] = Arm(base.module, None, None, base.init)
        prep.cases[case.id] = case
        run_case(case)

    def extra_shapes(self, prep: Prepared, main: dict[str, int], run_case: Any, dropped: list[str]) -> None:
        job = prep.job
        variants = [{**main, **s} for s in job.extra_shapes] if job.extra_shapes is not None else shape_variants(main)
        for knobs in variants:
            if len(prep.shapes) > 2 or knobs in prep.shapes:
                continue
            idx = len(prep.shapes)
            case = Case(id=f"x{idx}", kind="extra_shape", shape=idx, seed=job.seeds[1 % len(job.seeds)])
            try:
                prep.arms[idx] = self.arm(job, idx, knobs)
                prep.shapes.append(knobs)
                prep.cases[case.id] = case
                run_case(case)
            except Exception as e:
                if calls.out_of_memory(e):
                    raise
                dropped.append(f"{knobs}: {calls.describe(e).splitlines()[-1]}")
                if prep.shapes[-1] is knobs:
                    prep.shapes.pop()
                prep.forget(case)

    # ---- one case ------------------------------------------------------------------------------
    def compute(self, case: Case, record: bool = False) -> tuple[list[Any], list[Any] | None, dict[str, Any], int]:
        """The case's expected outputs, native and float64 (None where there is none)."""
        torch = self.torch
        assert self.prep is not None
        arm = self.prep.arms[case.model]
        self.phase(f"reference: {case.id}" + (f"~{case.salt}" if case.salt else ""))
        if case.kind == "modes":
            return self.compute_modes(case, arm, record)
        inputs = calls.draw_inputs(torch, arm.module, case, self.device)
        inputs_bytes = calls.nbytes(inputs)  # as a worker counts an input set (its timing's copies are whole)
        f64 = None
        if arm.double is not None:
            # float64 first, then the inputs drawn again for the native call: the native inputs and
            # outputs never sit beside the float64 copies and outputs, a check's peak one input's
            # worth lower (KernelBench L1/39's timed checks: 48 GiB reserved, 8 of them its input)
            drawn = inputs_digest(inputs) if record else None
            doubled = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
            del inputs
            try:
                with torch.no_grad():
                    f64 = flatten(arm.double(*doubled))
            except Exception as e:  # the op has no float64 path, or it does not fit
                if calls.out_of_memory(e):
                    if not record:
                        raise  # a check that does not fit: never judged on less than it was prepared with
                    arm.double = None  # for every later call too: the tolerances rest on the native output
                f64 = None
            del doubled
            inputs = calls.draw_inputs(torch, arm.module, case, self.device)
            if record and inputs_digest(inputs) != drawn:  # each process draws a case's inputs for itself
                raise calls.CallFailed(f"reference: {case.id}", "error", "get_inputs() drew different inputs twice "
                                       "under the same seed (torch.manual_seed): the judge and each candidate's worker "
                                       "draw a case's inputs apart and must get the same ones")
        native = calls.call(torch, arm.model, inputs, self.device, label=case.id, gate=f"reference: {case.id}",
                            check_inputs=record)
        if record and arm.channels_last is not None:  # the same op in the other layout: part of its own error
            self.layout_outputs[case.id] = calls.call(
                torch, arm.channels_last, calls.channels_last_inputs(torch, inputs), self.device, label=case.id,
                gate=f"reference: {case.id} (channels_last)", check_inputs=False).leaves
        return native.leaves, f64, native.facts, inputs_bytes

    def compute_modes(self, case: Case, arm: Arm, record: bool = False) -> tuple[list[Any], list[Any] | None,
                                                                               dict[str, Any], int]:
        """The modes case on fresh reference models (native, and float64 where it has one): each
        computation starts from the state the candidate's model starts from. While recording, a
        fresh model in channels_last runs it too, as every other case's reference does (its own
        error is the worse of the two layouts: cuDNN may take TF32 kernels in one layout only)."""
        torch = self.torch
        model, _ = calls.build(torch, arm.module.Model, arm.init, self.device)
        buffers = sorted(name for name, _ in model.named_buffers())
        assert self.prep is not None
        gates = self.prep.job.gates
        twin = calls.layout_twin(torch, model) if record else None  # a copy while the model is fresh
        native = calls.mode_sequence(torch, model, arm.module, case, self.device, label=case.id, buffers=buffers,
                                     gates=gates)
        if twin is not None:
            self.layout_outputs[case.id] = calls.mode_sequence(
                torch, twin, arm.module, case, self.device, label=f"{case.id} (channels_last)", buffers=buffers,
                gates=gates, convert=lambda xs: calls.channels_last_inputs(torch, xs)).leaves
            del twin
        f64 = None
        double = self.double_model(arm.module, arm.init)
        if double is not None:
            def doubled(xs: list[Any]) -> list[Any]:
                return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]

            try:
                f64 = calls.mode_sequence(torch, double, arm.module, case, self.device, label=case.id,
                                          buffers=buffers, gates=gates, convert=doubled).leaves
            except Exception:  # noqa: BLE001 - no float64 path, or it does not fit: the native outputs stand
                f64 = None
        return native.leaves, f64, native.facts, calls.nbytes(native.leaves)

    def stats(self, native: list[Any], f64: list[Any] | None, inputs_bytes: int, first: list[Any] | None,
              layout: list[Any] | None = None) -> CaseStats:
        finite = all(not (t.is_floating_point() or t.is_complex()) or bool(self.torch.isfinite(t).all())
                     for t in native)
        floats = [t.is_floating_point() or t.is_complex() for t in native]
        # the reference's own error: the worse of its run as written and in channels_last, where
        # the library flags let cuDNN take TF32 kernels for one layout and not the other
        errors = [reference_error(t, f64[j] if f64 else None) for j, t in enumerate(native)]
        if layout is not None and f64 and len(layout) == len(native):
            errors = [max(e, reference_error(layout[j], f64[j]) if floats[j] else 0.0) for j, e in enumerate(errors)]
        return CaseStats(
            finite=finite,
            ref_errors=errors,
            scales=[magnitude(t, f64[j] if f64 else None) if floats[j] else 0.0 for j, t in enumerate(native)],
            dtypes=[str(t.dtype).replace("torch.", "") if floats[j] else "" for j, t in enumerate(native)],
            summary=summarize_outputs(native, first),
            nbytes=inputs_bytes + calls.held_bytes(native),
            input_bytes=inputs_bytes,
        )

    def keep(self, case: Case, native: list[Any], f64: list[Any] | None) -> None:
        """Keep the case's expected outputs for later checks while they fit the cache."""
        assert self.prep is not None
        size = calls.held_bytes(native) + calls.held_bytes(f64 or [])
        if self.prep.cached_bytes + size <= self.prep.job.cache_bytes:
            self.prep.cache[case.id] = (native, f64)
            self.prep.cached_bytes += size

    def expected(self, case: Case) -> tuple[list[Any], list[Any] | None]:
        assert self.prep is not None
        if case.id in self.prep.cache and not case.salt:
            return self.prep.cache[case.id]
        native, f64, _, _ = self.compute(case)
        return native, f64

    def check(self, message: dict[str, Any]) -> dict[str, Any]:
        """The gates of one candidate call's outputs against its case's expected outputs."""
        from okgit.eval.judge.exported import open_exported

        assert self.prep is not None
        case = self.prep.cases[str(message["case"])]
        if message.get("salt"):  # a timed call's inputs: the case's, salted (okgit.eval.worker.calls.salt_inputs)
            case = replace(case, salt=int(message["salt"]))
        t0 = time.monotonic()
        native, f64 = self.expected(case)
        t1 = time.monotonic()
        outputs = open_exported(message["outputs"], self.device, Path(str(message["dir"])))
        t_open = time.monotonic()
        leaves = message["leaves"]
        tolerances = self.prep.tolerances[case.id]
        # the modes case names the gate of each output (training mode, a buffer, eval mode)
        gates = [g for g, _ in self.prep.parts.get(case.id, [])] or [str(message["gate"])] * len(native)
        checks = [asdict(check_leaf(out, leaves[j], native[j], f64[j] if f64 else None, tolerances[j], gates[j]))
                  for j, out in enumerate(outputs[: len(native)])]
        t_compare = time.monotonic()
        prints = ([fingerprint(o) if o is not None else None for o in outputs]
                  if message.get("fingerprint", True) else None)  # the determinism gate's pairs only
        t2 = time.monotonic()
        del outputs, native, f64
        recomputed = bool(case.salt) or case.id not in self.prep.cache
        timing = CheckedTiming(**message["timing"]) if message.get("timing") else None
        if self.device == "cuda" and must_release(recomputed, self.torch.cuda.mem_get_info()[0], self.prep.case_bytes,
                                                  self.prep.timing_bytes(timing)):
            self.torch.cuda.empty_cache()  # what a recomputed case held goes back to the candidate's worker
        # where the check's time went: the expected outputs (drawn and computed again where the
        # cache does not hold them), the worker's outputs opened (CUDA IPC on a GPU), the
        # comparisons, the fingerprints, then the worker's outputs closed and the
        # memory of a recomputed case handed back to the device where the candidate may need it
        seconds = {"expected": t1 - t0, "open": t_open - t1, "compare": t_compare - t_open, "fingerprint": t2 - t_compare,
                   "release": time.monotonic() - t2}
        return {"checks": checks, "fingerprints": prints, "seconds": seconds}

    # ---- helpers -------------------------------------------------------------------------------
    def double_model(self, module: ModuleType, init: list[Any]) -> Any:
        try:
            model, _ = calls.build(self.torch, module.Model, init, self.device)
            return model.double() if isinstance(model, self.torch.nn.Module) else model
        except Exception:  # noqa: BLE001 - no float64 version: compare against the native output
            return None

    def measure(self) -> dict[str, Any]:
        """Device peaks (once per device), then the time to beat: ModelNew's where the op file has one."""
        from okgit.eval.worker.measure import time_model

        assert self.prep is not None
        job = self.prep.job
        if job.peaks_path and not Path(job.peaks_path).exists():
            self.phase("reference: device peaks")
            from okgit.eval.roofline import measure_peaks

            Path(job.peaks_path).parent.mkdir(parents=True, exist_ok=True)
            Path(job.peaks_path).write_text(json.dumps(measure_peaks(self.device)))
        arm = self.prep.arms[0]
        cls = getattr(arm.module, "ModelNew", None) or arm.module.Model
        model = arm.model
        if cls is not arm.module.Model:
            model, _ = calls.build(self.torch, cls, arm.init, self.device, arm.model.state_dict()
                                   if isinstance(arm.model, self.torch.nn.Module) else None)
        seeds = [c for c in self.prep.cases.values() if c.kind == "seed"]
        self.phase("reference: timing")
        measured, _ = time_model(self.torch, model, arm.module, seeds, job, self.device)
        self.phase("reference: timed")
        measured["device_phases"], self.memory_trace = self.memory_trace or [], None  # the checks are not traced
        # what the checks reach from here on (own_memory's peak with each answer), not the one-off
        # preparation and timing: the footprint counts a problem at what recurs
        self.torch.cuda.empty_cache()
        self.torch.cuda.reset_peak_memory_stats()
        return measured
