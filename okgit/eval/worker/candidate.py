"""A candidate's worker: `python -m okgit.eval.worker`, the isolated process that runs one
candidate's code for one evaluation.

Life of a worker: start (import torch and triton, pin the backend flags, initialise CUDA,
install the launch counters, bind the timing functions, snapshot the entry points), say
`ready`, wait for one message naming a job directory, run that one job, write result.json
there, exit. Nothing of a candidate is loaded before the job, so a pre-started idle worker
carries no state between candidates.

The job runs case by case: the reference loaded at the case's shape draws the inputs here
(okgit.eval.worker.calls), the candidate's model is called, and its outputs are exported to the judge
(okgit.eval.worker.export) and held until the judge answered; then they are dropped. The expected
outputs never enter this process: it records facts and the judge compares.

A file `phase` in the job directory names the gate in progress, so that a crash (segfault,
CUDA error, kill on timeout) can be attributed without the worker's cooperation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from okgit.eval.protocol.channel import READY, Channel
from okgit.eval.protocol.jobs import Case, Job, flatten, perturb_floats, tree_spec
from okgit.eval.protocol.keys import FRESH, FRESH_FIRST, CallKey
from okgit.eval.protocol.start import device_start
from okgit.eval.worker import calls
from okgit.eval.worker.calls import CallFailed

RESULT_FILE = "result.json"
PHASE_FILE = "phase"


class Worker:
    """`timing_only`: a worker for jobs that only time (the final gate's rounds). It opens no
    torch.profiler session after its start (`main`), nor does a profiling pass's worker, whose
    tool takes CUPTI alone."""

    def __init__(self, device: str, channel: Channel, timing_only: bool = False) -> None:
        import torch

        from okgit.backends import cuda as cuda_backend
        from okgit.backends import triton as triton_backend
        from okgit.eval.worker import timing
        from okgit.eval.worker.entrypoints import Snapshot

        self.torch = torch
        self.device = device
        self.channel = channel
        calls.start(torch, device)
        self.triton_launches = triton_backend.install_launch_counter()
        self.cuda_launches = triton_backend.LaunchCounter()
        self.cuda_kernel_names: set[str] = set()
        cuda_backend.install_load_hooks(self.cuda_launches, self.cuda_kernel_names, run_on_gpu=device == "cuda")
        if device == "cuda":
            timing.bind()
        elif os.environ.get("TRITON_INTERPRET") == "1":
            from okgit.backends import libdevice_cpu

            libdevice_cpu.install()  # libdevice's math, which Triton's interpreter lacks
            triton_backend.interpret_as_compiled()
        self.timing_only = timing_only
        calls.warm_up(torch, device)
        self.entry_points = Snapshot()  # after the hooks above, before any candidate code
        self.job_dir = Path(".")
        self.result: dict[str, Any] = {"calls": {}}
        self.sent = 0
        self.check_bytes = 0  # the judge's check's device peak (Job.check_bytes), read from each job
        self.buffers: list[str] = []  # the reference's buffer names, for the modes case
        self.returned: list[tuple[str, Any, int]] = []  # (call, weak reference, storage address) of each output
        self.current, self.since = "load", time.monotonic()

    # ---- plumbing -------------------------------------------------------------------------
    def phase(self, gate: str) -> None:
        """Name the gate in progress (for crash reports) and account the time and, on a GPU, the
        peak device memory reserved of the last one (what drives a problem's footprint)."""
        now = time.monotonic()
        times = self.result.setdefault("phase_s", {})
        times[self.current] = times.get(self.current, 0.0) + now - self.since
        if self.device == "cuda":
            peaks = self.result.setdefault("phase_peak", {})
            try:  # the allocator's own counts; a context a candidate broke loses the account, never the verdict
                peaks[self.current] = max(peaks.get(self.current, 0), int(self.torch.cuda.max_memory_reserved()))
                self.torch.cuda.reset_peak_memory_stats()
            except RuntimeError:
                pass
        self.current, self.since = gate.split(":")[0], now
        (self.job_dir / PHASE_FILE).write_text(gate)

    def spent(self, bucket: str, seconds: float) -> None:
        """Account `seconds` of the gate in progress to `bucket` (drawing inputs, waiting for the judge
        or for the device alone), not to the gate: where an evaluation's seconds go."""
        times = self.result.setdefault("phase_s", {})
        times[bucket] = times.get(bucket, 0.0) + seconds
        self.since += seconds

    def finish(self) -> None:
        from okgit.eval.worker.own_memory import own_memory

        self.result["memory"] = memory = own_memory()
        if "device_peak" in memory:  # since the last gate's reset: the whole job's is the largest gate's
            memory["device_peak"] = max([memory["device_peak"], *self.result.get("phase_peak", {}).values()])
        (self.job_dir / RESULT_FILE).write_text(json.dumps(self.result, default=str))

    def fail(self, status: str, gate: str, message: str) -> None:
        self.result["failure"] = {"status": status, "gate": gate, "message": calls.clipped(message)}

    def run(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self.since = time.monotonic()
        job = Job.load(job_dir / "job.json")
        self.check_bytes = job.check_bytes
        if job.root and job.root not in sys.path:
            sys.path.insert(0, job.root)
        try:
            if job.profile and self.timing_only:  # its first profiled call would pay the session, timed alone
                self.fail("error", "worker", "a timing-only worker was given a job that profiles")
            elif job.counters:
                self.run_counters(job)
            else:
                self.run_candidate(job)
        except CallFailed as e:
            self.fail(e.status, e.gate, e.message)
        except BaseException as e:  # noqa: BLE001 - everything a candidate throws is a finding
            if type(e).__name__ == "CompiledNotRun":  # CUDA on a CPU machine: compiled, not run
                self.result["compiled_not_run"] = str(e)
                self.fail("error", "device", str(e))
            else:
                gate = (job_dir / PHASE_FILE).read_text() if (job_dir / PHASE_FILE).exists() else "worker"
                self.fail(calls.status_of(e, gate), gate, calls.describe(e))
        self.result["replaced"] = self.entry_points.changed()
        self.phase("write")
        self.finish()

    def send(self, key: str, gate: str, called: calls.Called) -> None:
        """Export one call's outputs to the judge, through the parent, and wait for its answer
        (the parent reads the case, the salt and the gate from the key)."""
        from okgit.eval.worker.export import export

        self.sent += 1
        t0 = time.monotonic()
        self.make_room()
        descriptors, alive = export(called.leaves, self.device, self.job_dir, self.sent)
        self.channel.send({"op": "check", "key": key, "leaves": called.facts["leaves"], "spec": called.facts["spec"],
                           "outputs": descriptors})
        reply = self.channel.receive()
        del alive
        if self.device == "cuda":
            self.torch.cuda.ipc_collect()
        self.spent("judge", time.monotonic() - t0)
        if reply is None or not reply.get("ok"):
            raise CallFailed(gate, "error", f"{key}: the judge did not answer")
        self.make_way()

    def make_room(self) -> None:
        """Before a check, hand this process's cached device memory back while the device has less
        free than the judge's check reaches: the judge computes the case again (inputs, outputs,
        their float64 copies) while this process holds what it freed in its allocator's cache, and
        after a timing that is the input sets, their copies and the flush buffer. On an 80 GB H100
        (2026-12-05), every check of KernelBench L1/39's and L1/45's timed outputs ran out of
        memory in the judge beside a worker holding 48.86 GiB, by the timing's arithmetic most of
        it cached, not in use."""
        if self.device == "cuda" and self.torch.cuda.mem_get_info()[0] < self.check_bytes:
            self.torch.cuda.empty_cache()

    def make_way(self) -> None:
        """Between two calls, this job's GPU work finished and judged: the parent lets a timing of
        another job that waits for the device alone go first (okgit.eval.parent.devices.DeviceHold.make_way).
        On a CPU nothing is locked: nothing to make way for."""
        if self.device != "cuda":
            return
        self.torch.cuda.synchronize()
        self._ask_parent({"op": "make_way"}, "the parent did not answer between two calls")

    def timed(self) -> None:
        """The timing (or the profiled call) done and synchronized: the device goes back to shared
        for what is left of the job (the timed outputs' check, the result, the exit); the parent
        stops this process while a waiting timing of another job goes first."""
        self.torch.cuda.synchronize()
        self._ask_parent({"op": "timed"}, f"the parent did not take the device back after its {self.current}")

    def alone(self) -> None:
        """Ask the parent for the device alone, until `timed`: until here it was shared with other
        jobs' work that times nothing; timing and profiling must not run beside anything
        (okgit.eval.parent.devices). A failure belongs to the gate in progress (timing, profiling)."""
        self._ask_parent({"op": "exclusive", "for": self.current},  # the gate: a label in the ledger
                         f"the parent did not give this job the device alone for its {self.current}")

    def _ask_parent(self, message: dict[str, Any], unanswered: str) -> None:
        """One request about the device, its wait counted as `device_wait`; no "ok" fails the gate in progress."""
        t0 = time.monotonic()
        self.channel.send(message)
        reply = self.channel.receive()
        self.spent("device_wait", time.monotonic() - t0)
        if reply is None or not reply.get("ok"):
            raise CallFailed(self.current, "error", unanswered)

    # ---- the candidate --------------------------------------------------------------------
    def run_candidate(self, job: Job) -> None:
        torch = self.torch
        self.phase("compile")
        references = [calls.load_op(job.reference_path, f"okgit_reference_{i}", knobs)
                      for i, knobs in enumerate(job.shapes)]  # before the candidate: its code cannot reach these first
        modules = [calls.load_op(job.source_path, f"okgit_candidate_{i}", knobs) for i, knobs in enumerate(job.shapes)]
        classes = [getattr(m, "ModelNew", None) or getattr(m, "Model", None) for m in modules]
        if classes[0] is None:
            raise CallFailed("compile", "compile_error", "the candidate defines neither ModelNew nor Model")
        models: dict[int | str, Any] = {}
        loaded: dict[str, bool] = {}
        for case in job.cases:  # one model per shape, and one per init_inputs case
            if case.model not in models:
                self.phase("construct")
                models[case.model], loaded[str(case.model)] = self.build(job, case, references, classes)
        self.result["state_dict_loaded"] = loaded
        seeds = [c for c in job.cases if c.kind == "seed"]
        counters = (self.triton_launches, self.cuda_launches)

        def run_case(case: Case, call: CallKey, gate: str) -> None:
            key = call.format()
            if case.kind == "modes":
                self.phase(gate)
                called = calls.mode_sequence(torch, models[case.model], references[case.shape], case, self.device,
                                             label=key, buffers=self.buffers, gates=job.gates, counters=counters)
                self.result["calls"][key] = called.facts
                self.send(key, gate, called)
                return
            t0 = time.monotonic()
            inputs = calls.draw_inputs(torch, references[case.shape], case, self.device)
            self.spent("draw", time.monotonic() - t0)
            self.phase(gate)
            t0 = time.monotonic()
            called = calls.call(torch, models[case.model], inputs, self.device, label=key, gate=gate, counters=counters)
            self.spent("inputs_kept", called.kept_s)
            if self.sent == 0:  # the candidate's first call: its kernels' compile (Triton's JIT), apart
                self.spent("first_call", time.monotonic() - t0 - called.kept_s)
            self.returned_before(key, called)
            self.result["calls"][key] = called.facts
            del inputs
            self.send(key, gate, called)

        if job.check:
            with calls.poisoned(torch):
                for case in job.cases:
                    run_case(case, CallKey.of(case.id), job.gates[case.kind])
                for case in seeds:  # more calls than the trials, each still right, and identical
                    run_case(case, CallKey.repeat(case.id), job.gates["repeat"])
                if len(seeds) >= 2:
                    self.fresh_inputs(models[0], references[0], seeds[0], seeds[1], counters, job.gates["fresh"])
            if job.own_knobs is not None:
                self.own_shape(job, job.own_knobs)
        self.result["backend_launches"] = {k: sum(f["launches"][k] for f in self.result["calls"].values())
                                           for k in ("triton", "cuda")}
        self.result["failed_launches"] = {k: sum(f["failed_launches"][k] for f in self.result["calls"].values())
                                          for k in ("triton", "cuda")}
        spot: list[tuple[Case, Any]] = []
        if job.device == "cuda" and (job.timing or job.profile):
            from okgit.eval.worker.measure import time_model

            self.phase("timing")
            self.alone()
            measured, spot = time_model(torch, models[0], references[0], seeds, job, self.device)
            self.timed()
            self.result.update(measured)
        elif job.check and seeds:  # nothing is timed here: the timing's protocol all the same
            from okgit.eval.worker.measure import exercise_model

            self.phase(job.gates["timed"])
            spot = exercise_model(torch, models[0], references[0], seeds, self.device)
        if job.check:
            while spot:  # timed outputs must still be right, on their own salted inputs
                case, out = spot.pop(0)  # each dropped once judged: the judge's next check has its room
                leaves = flatten(out)
                facts = {"spec": tree_spec(out), "leaves": [calls.leaf_facts(t, []) for t in leaves]}
                key = CallKey.timed(case.id, case.salt).format()
                self.result["calls"][key] = facts
                self.send(key, job.gates["timed"], calls.Called(out, leaves, facts))
                del out, leaves
        self.result["cuda_kernel_names"] = sorted(self.cuda_kernel_names)

    def run_counters(self, job: Job) -> None:
        """The profiling pass (okgit.eval.worker.counters): the model at the first shape, on the first
        seed's inputs, called under the tool this worker was started for; nothing is checked. Shared
        with other jobs' work up to the profiled calls, alone from there (`profile_model`)."""
        from okgit.eval.worker.counters import profile_model

        self.phase("compile")
        references = [calls.load_op(job.reference_path, "okgit_reference_0", job.shapes[0])]
        module = calls.load_op(job.source_path, "okgit_candidate_0", job.shapes[0])
        cls = getattr(module, "ModelNew", None) or getattr(module, "Model", None)
        if cls is None:
            raise CallFailed("compile", "compile_error", "the candidate defines neither ModelNew nor Model")
        case = next(c for c in job.cases if c.kind == "seed" and c.shape == 0)
        self.phase("construct")
        model, _ = self.build(job, case, references, [cls])
        inputs = calls.draw_inputs(self.torch, references[0], case, self.device)
        self.phase("profiling")
        self.triton_launches.reset()
        self.result["counters"] = profile_model(self.torch, model, inputs, job.counters, self.alone, self.timed)
        self.result["kernels"] = sorted(set(self.triton_launches.counts) | self.cuda_kernel_names)

    def returned_before(self, key: str, called: calls.Called) -> None:
        """Name an output that is a tensor an earlier call returned and the candidate still holds
        (its storage, alive): a remembered output, and one its earlier holder sees overwritten.
        Outputs the worker dropped are dead, so a new allocation at their address is no finding."""
        for leaf in called.leaves:
            storage = leaf.untyped_storage()
            if storage.nbytes() == 0:
                continue
            for earlier_key, ref, ptr in self.returned:
                if ptr == storage.data_ptr() and ref() is not None:
                    called.facts["returned_before"] = earlier_key
            self.returned.append((key, weakref.ref(leaf), storage.data_ptr()))

    def build(self, job: Job, case: Case, references: list[Any], classes: list[Any]) -> tuple[Any, bool]:
        """The candidate's model for a case, from the reference's constructor arguments (perturbed
        for the init_inputs case), with the reference model's tensors where they match."""
        torch = self.torch
        reference = references[case.shape]
        init = calls.init_args(torch, reference, job.init_seed, self.device)
        if case.kind == "init_inputs":
            init, _ = perturb_floats(init, calls.init_names(reference.Model))
        ref_model, _ = calls.build(torch, reference.Model, init, self.device)
        state = ({k: v.detach().clone() for k, v in ref_model.state_dict().items()}
                 if isinstance(ref_model, torch.nn.Module) else None)
        if case.kind == "modes":  # the buffers whose state the candidate's must follow, by the reference's names
            self.buffers = sorted(name for name, _ in ref_model.named_buffers())
        del ref_model
        try:
            return calls.build(torch, classes[case.shape], list(init), self.device, state)
        except Exception as e:
            if case.kind != "init_inputs":
                raise
            gate = job.gates[case.kind]
            raise CallFailed(gate, calls.status_of(e, gate),
                             f"{case.id} ({case.note}): the constructor raised: {calls.describe(e)}") from None

    def own_shape(self, job: Job, knobs: dict[str, int]) -> None:
        """Whether the candidate's kernels launch at the op file's own shape, where the checked shapes
        are smaller (the interpreter's): its model called there on the meta device, each launch
        counted and not run, nothing computed. A call that cannot run without data is told apart
        (launches None), unless a kernel launched before it stopped."""
        torch = self.torch
        self.phase("own_shape")
        counters = (self.triton_launches, self.cuda_launches)
        facts: dict[str, Any] = {"knobs": knobs, "launches": None, "why": ""}
        for counter in counters:
            counter.reset()
            counter.dry = True
        try:
            reference = calls.load_op(job.reference_path, "okgit_reference_own", knobs)
            module = calls.load_op(job.source_path, "okgit_candidate_own", knobs)
            cls = getattr(module, "ModelNew", None) or module.Model
            model, _ = calls.build(torch, cls, calls.init_args(torch, reference, job.init_seed, "meta"), "meta")
            inputs = calls.draw_inputs(torch, reference, Case(id="own", kind="seed", shape=0, seed=job.init_seed), "meta")
            with torch.no_grad():
                model(*inputs)
            facts["launches"] = {"triton": self.triton_launches.total(), "cuda": self.cuda_launches.total()}
        except Exception as e:  # noqa: BLE001 - the candidate's code, on tensors without data
            launched = {"triton": self.triton_launches.total(), "cuda": self.cuda_launches.total()}
            facts["launches"] = launched if any(launched.values()) else None
            facts["why"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
        finally:
            for counter in counters:
                counter.dry = False
                counter.reset()
        self.result["own_shape"] = facts

    def fresh_inputs(self, model: Any, reference: Any, first: Case, second: Case, counters: tuple[Any, ...],
                     gate: str) -> None:
        """The same input buffers, refilled in place with new values, must give the new answer."""
        torch = self.torch
        t0 = time.monotonic()
        buffers = calls.draw_inputs(torch, reference, first, self.device)
        self.spent("draw", time.monotonic() - t0)
        self.phase(gate)
        once, key = FRESH_FIRST.format(), FRESH.format()
        first_call = calls.call(torch, model, buffers, self.device, label=once, gate=gate, counters=counters)
        self.result["calls"][once] = first_call.facts
        for buf, new in zip(buffers, calls.draw_inputs(torch, reference, second, self.device), strict=True):
            if isinstance(buf, torch.Tensor):
                buf.copy_(new)
        called = calls.call(torch, model, buffers, self.device, label=key, gate=gate, counters=counters)
        self.spent("inputs_kept", first_call.kept_s + called.kept_s)
        self.result["calls"][key] = called.facts
        del first_call, buffers  # not judged: their memory is the judge's room for the check
        self.send(key, gate, called)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="okgit.eval.worker")
    parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
    parser.add_argument("--counters", choices=["ncu", "proton"], help="a worker for the profiling pass")
    parser.add_argument("--timing-only", action="store_true", help="a worker for jobs that only time: no profiler")
    args = parser.parse_args(argv)
    channel = Channel()  # from here on, whatever runs may print: never onto the messages
    # the device shared: CUDA's start and the warm-up never beside a timing
    with device_start("timing worker" if args.timing_only else "worker") as let_go:
        if args.counters:
            from okgit.eval.worker.counters import start

            start(args.counters)
        worker = Worker(args.device, channel, timing_only=args.timing_only)
        if not (args.counters or args.timing_only):  # its job's profiled call then pays nothing
            let_go()
            calls.open_profiler(args.device)
    channel.send(READY)
    message = channel.receive()
    if message is None:
        return  # the parent closed the pipe: an idle worker no longer needed
    worker.run(Path(str(message["job"])))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: atexit hooks and finalizers of candidate code

