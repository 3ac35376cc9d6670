"""The gates that catch a candidate working around the evaluation rather than computing the op:
replaced entry points, remembered outputs, no work in the backend's own kernels. Each failure is
`rejected`."""

from __future__ import annotations

from okgit.eval.parent.gates.base import Evidence, Findings, Gate, gate


@gate(30)
class EntryPoints(Gate):
    name = "entry_points"
    rule = ("Do not replace or patch what the evaluator relies on (torch functions, timers, "
            "comparison functions, the reference's names).")
    rejects = True

    def check(self, ev: Evidence, found: Findings) -> None:
        replaced = ev.result.get("replaced")  # okgit.eval.worker.entrypoints, after the candidate ran
        if replaced:
            found.fail(self.name, "the candidate replaced what the evaluator relies on: " + ", ".join(replaced))


@gate(130)
class Remembered(Gate):
    name = "remembered"
    rule = ("Compute every output in the call that returns it: never return a tensor an earlier call "
            "returned (no cache of outputs keyed on input contents, hashes, addresses or call counts).")
    rejects = True

    def check(self, ev: Evidence, found: Findings) -> None:
        for key, facts in ev.calls.items():
            if facts.get("returned_before"):
                found.fail(self.name, f"{key}: returned the tensor that call {facts['returned_before']} returned, "
                           "still held by the candidate: a remembered output (and an earlier caller's result "
                           "overwritten)")


@gate(200)
class BackendKernel(Gate):
    name = "backend_kernel"
    rule = "The main work runs in your own kernels of the backend; a file that only calls PyTorch ops is rejected."
    rejects = True

    def check(self, ev: Evidence, found: Findings) -> None:
        backend = ev.backend
        failed = ev.result.get("failed_launches", {}).get(backend, 0)
        if failed:
            found.fail(self.name, f"{failed} {backend} kernel launch(es) raised and the calls went on: their outputs "
                       "came from something else (only launches that completed count)")
        if ev.result.get("backend_launches", {}).get(backend, 0) == 0:
            found.fail(self.name, f"no {backend} kernel was launched in {len(ev.calls)} calls: not an optimization "
                       f"of the op (pure PyTorch or another backend)")
