"""The Inductor seed: torch.compile's own kernels as one standalone candidate (origin `inductor`).

Inductor (default mode) compiles the reference in a child process on the run's device, which
also runs its autotuning, with the batch and the dims that follow the shape knobs dynamic;
okgit.inductor.standalone turns its code into an op file that launches the same Triton kernels
with the settings Inductor chose, without torch.compile, at every size the op takes (the
reference's own forward, with a warning, where the arguments fall outside what was compiled).
The candidate is then judged like any other; the autotune phase tunes its launches where it is
the best, and a model continues from it.

A seed that calls vendor GEMMs is followed by the same seed with them on the split-precision
GEMM family (origin `inductor:split_gemm`, okgit.inductor.gemm). On by default on a GPU, where a
last seed comes from max-autotune-no-cudagraphs. On a CPU (Triton's interpreter, nothing timed) it is off unless
`inductor = true` in okgit.toml: the compile costs tens of seconds there for a candidate whose
speed nobody can measure.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from okgit.inductor.gemm import split_gemm_seed
from okgit.search.types import Context, Proposal

TIME_LIMIT_S = 900  # the compile, Inductor's autotuning and one run of the reference at its real size


class InductorProposer:
    """One seed in torch.compile's default mode; on a GPU, where Inductor's kernels at static
    sizes differ in kind from its dynamic ones (a reduction kept in registers rather than
    looped), a second that takes the static kernels at exactly the timed shape and the dynamic
    ones elsewhere, so that the search keeps the specialisation only where it times faster; then
    one in max-autotune-no-cudagraphs (more launch configs, coordinate descent, Triton GEMM and
    convolution templates against the vendor's), which costs minutes of compilation and can find
    faster kernels."""

    name = "inductor"

    def __init__(self, on_cpu: bool = False) -> None:
        self.on_cpu = on_cpu  # decided by the run's device, known once the evaluator is made
        self._source: str | None = None
        self._modes: list[str] = []
        self._ready: list[Proposal] = []  # made together with the last one, proposed next

    def propose(self, ctx: Context) -> Proposal | None:
        if self._source != ctx.problem.source:
            self._source = ctx.problem.source
            gpu = ctx.device.startswith("cuda")
            self._modes = ["default", "max-autotune-no-cudagraphs"] if gpu else ["default"] if self.on_cpu else []
            self._ready = []
        if self._ready:
            return self._ready.pop(0)
        while self._modes:
            mode = self._modes.pop(0)
            # at the shape the evaluator times (a CPU's is scaled down for the interpreter); the
            # specialised variant only where the timing can tell whether it pays
            knobs = ctx.reference.shapes[0] if ctx.reference.shapes else {}
            sizes = "both" if mode == "default" and ctx.device.startswith("cuda") else "dynamic"
            files, why = seed_files(ctx.problem.source, ctx.problem.root, ctx.device, mode, knobs, sizes)
            if files:
                origin = "inductor" if mode == "default" else f"inductor:{mode}"
                made = [Proposal(source=source, origin=origin + ("" if j == 0 else ":specialised"), intent=what, parent=None,
                                 meta={"kernels": [], "tunables": {}}) for j, (source, what) in enumerate(files)]
                split = split_gemm_seed(made[0].source) if mode == "default" else None
                if split is not None:  # the seed with its vendor GEMMs on the split-precision GEMM, next
                    why_split = f"{made[0].intent}; its vendor GEMMs on tensor cores at fp32 accuracy (3xTF32)"
                    made.insert(1, Proposal(source=split, origin=f"{origin}:split_gemm", intent=why_split, parent=None,
                                            meta={"kernels": [], "tunables": {}}))
                self._ready = made[1:]
                return made[0]
            ctx.log("note", message=f"inductor ({mode}): {why}")
            if mode == "default":
                self._modes = []  # what the default mode cannot take, max-autotune cannot either
        return None


def seed_files(reference: str, root: str | None, device: str, mode: str = "default",
               knobs: dict[str, int] | None = None, sizes: str = "dynamic") -> tuple[list[tuple[str, str]], str]:
    """([(seed file, what it holds)], ""), or ([], why there is none). `sizes`: "dynamic" (the
    batch and the knob-following dims), "static" (every size, torch.compile's default) or
    "both" (the dynamic file, then the specialised one where Inductor's static kernels differ)."""
    from okgit.eval.parent.devices import device_lock
    from okgit.eval.parent.sandbox import worker_env

    env = worker_env(device)
    package = str(Path(__file__).resolve().parents[3])  # okgit importable in the child, as in a worker
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package, root, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="okgit-inductor-") as tmp:
        ref, out = Path(tmp) / "reference.py", Path(tmp) / "seed.py"
        ref.write_text(reference)
        # on a GPU under the device's lock: Inductor's autotuning times kernels, and would disturb
        # (and be disturbed by) another problem's timing on the same device
        lock = device_lock(device) if device.startswith("cuda") else contextlib.nullcontext()
        try:
            with lock:
                proc = subprocess.run([sys.executable, "-m", "okgit.inductor", str(ref), device.split(":")[0], str(out), mode,
                                       json.dumps(knobs or {}), sizes],
                                      cwd=tmp, env=env, capture_output=True, text=True, timeout=TIME_LIMIT_S)
        except subprocess.TimeoutExpired:
            return [], f"torch.compile of the reference took over {TIME_LIMIT_S} s"
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
            return [], f"the seed's process failed: {tail}"
        answer = json.loads(lines[-1])
        if not answer.get("ok"):
            return [], str(answer.get("why"))
        modes = " and ".join(m for m in answer["modes"] if m != "any")
        free = answer.get("dynamic") or []
        free_sizes = f"; sizes compiled dynamic: {', '.join(free)}" if free else "; every size static"
        what = (f"torch.compile's {answer['kernels']} Triton kernel(s) (Inductor, {mode} mode) launched from a "
                f"standalone file{f', one graph each for {modes} mode' if modes else ''}{free_sizes}")
        files = [(out.read_text(), what)]
        if answer.get("specialised"):
            files.append((Path(answer["specialised"]).read_text(),
                          f"{what}; and Inductor's kernels compiled static for exactly the timed shape, taken there "
                          f"(they differ in kind: {answer.get('differs')}), kept only if this times faster"))
        return files, ""
