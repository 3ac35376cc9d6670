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

The modes are compiled by one child process, in the background: the default mode's seeds are
proposed (and evaluated) while it goes on to max-autotune. The child holds the device's lock
itself: shared while its model is built and its compiled graphs run, alone while Inductor
benchmarks, not at all while it compiles on the CPU (okgit.inductor.locking), so a seed's
compile keeps no other job's timing waiting.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from okgit.inductor.gemm import split_gemm_seed
from okgit.search.types import Context, Proposal

TIME_LIMIT_S = 900  # one mode's compile, Inductor's autotuning and one run of the reference at its real size
# The seed's process and its compile workers run below the evaluator's workers' priority: where
# problems share a machine (`okgit bench kernelbench --parallel`), a timing taken with the device
# held alone still needs its host thread to launch on time, and Inductor's compiles of the other
# problems were what slowed a reference's rounds 2.6x (problem 15, docs/benchmarks.md).
SEED_NICE = 10


class InductorProposer:
    """One seed in torch.compile's default mode; on a GPU, where Inductor's kernels at static
    sizes differ from its dynamic ones (a reduction kept in registers rather than looped, or
    only the sizes as constants in the index arithmetic), a second that takes the static kernels at exactly the timed shape and the dynamic
    ones elsewhere, so that the search keeps the specialisation only where it times faster; then
    one in max-autotune-no-cudagraphs (more launch configs, coordinate descent, Triton GEMM and
    convolution templates against the vendor's), which costs minutes of compilation and can find
    faster kernels."""

    name = "inductor"

    def __init__(self, on_cpu: bool = False) -> None:
        self.on_cpu = on_cpu  # decided by the run's device, known once the evaluator is made
        self._source: str | None = None
        self._child: SeedProcess | None = None
        self._ready: list[Proposal] = []  # made together with the last one, proposed next

    def begin(self, ctx: Context) -> None:
        """The compile starts once the reference is prepared, beside the reference's profile and
        the templates' evaluations (KernelBench L1/6's search on the H200, 2026-12-05, waited 20 s
        for its default mode, whose compile started at this proposer's turn); a second call for
        the same problem does nothing."""
        if self._source != ctx.problem.source:
            self.finish(ctx)
            self._source = ctx.problem.source
            gpu = ctx.device.startswith("cuda")
            modes = ["default", "max-autotune-no-cudagraphs"] if gpu else ["default"] if self.on_cpu else []
            # at the shape the evaluator times (a CPU's is scaled down for the interpreter); the
            # specialised variant only where the timing can tell whether it pays
            knobs = ctx.reference.shapes[0] if ctx.reference.shapes else {}
            if modes:
                self._child = SeedProcess(ctx.problem.source, ctx.problem.root, ctx.device, modes, knobs,
                                          "both" if gpu else "dynamic")
            self._ready = []

    def propose(self, ctx: Context) -> Proposal | None:
        self.begin(ctx)  # where the driver did not (a proposer called on its own)
        if self._ready:
            return self._ready.pop(0)
        while self._child is not None:
            mode, files, why = self._child.next()
            if mode is None:
                self.finish(ctx)
                break
            if not files:
                ctx.log("note", message=f"inductor ({mode}): {why}")
                continue
            origin = "inductor" if mode == "default" else f"inductor:{mode}"
            # screened: where the search has a timed best, a seed timed slower than it past the
            # margin is dropped unchecked (it could only lose); on KernelBench L1/87 (an H100,
            # 2026-12-05) its three seeds at 0.26-0.35x eager took 33 s of full evaluations
            made = [Proposal(source=source, origin=origin + ("" if j == 0 else ":specialised"), intent=what, parent=None,
                             meta={"kernels": [], "tunables": {}}, screen=True) for j, (source, what) in enumerate(files)]
            split = split_gemm_seed(made[0].source) if mode == "default" else None
            if split is not None:  # the seed with its vendor GEMMs on the split-precision GEMM, next
                why_split = f"{made[0].intent}; its vendor GEMMs on tensor cores at fp32 accuracy (3xTF32)"
                made.insert(1, Proposal(source=split, origin=f"{origin}:split_gemm", intent=why_split, parent=None,
                                        meta={"kernels": [], "tunables": {}}, screen=True))
            self._ready = made[1:]
            return made[0]
        return None

    def finish(self, ctx: Context) -> None:
        """The search is over (or moved to another problem): a compile still going is stopped."""
        if self._child is not None:
            self._child.close()
            self._child = None


class SeedProcess:
    """`python -m okgit.inductor` over several modes, running beside the search: `next()` waits
    for the next mode's seed. It dies with the process that started it."""

    def __init__(self, reference: str, root: str | None, device: str, modes: list[str], knobs: dict[str, int],
                 sizes: str) -> None:
        from okgit.eval.parent.sandbox import Lines, worker_env

        env = worker_env(device)
        package = str(Path(__file__).resolve().parents[3])  # okgit importable in the child, as in a worker
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package, root, env.get("PYTHONPATH")) if p)
        self._tmp = tempfile.TemporaryDirectory(prefix="okgit-inductor-")
        tmp = Path(self._tmp.name)
        (tmp / "reference.py").write_text(reference)
        self.modes, self.device = list(modes), device
        with open(tmp / "stderr.log", "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "okgit.inductor", str(tmp / "reference.py"), device.split(":")[0],
                 str(tmp / "seed.py"), ",".join(modes), json.dumps(knobs), sizes],
                cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=err, preexec_fn=_below_timing)
        self._lines = Lines(self.proc)
        atexit.register(self.close)

    def next(self) -> tuple[str | None, list[tuple[str, str]], str]:
        """(mode, [(seed file, what it holds)], why there is none); mode None: no more modes."""
        if not self.modes:
            return None, [], ""
        mode = self.modes.pop(0)
        line = self._line(time.monotonic() + TIME_LIMIT_S)
        if line is None:
            timed_out = self.proc.poll() is None
            self.modes = []
            self.close()
            if timed_out:
                return mode, [], f"torch.compile of the reference took over {TIME_LIMIT_S} s"
            return mode, [], f"the seed's process failed: {self._stderr_tail()}"
        answer = json.loads(line)
        if not answer.get("ok"):
            if mode == "default":
                self.modes = []  # the child stops there too: what the default mode cannot take, max-autotune cannot
            return mode, [], str(answer.get("why"))
        return mode, _files(answer, mode), ""

    def _line(self, deadline: float) -> str | None:
        while (raw := self._lines.next(deadline)) is not None:
            if raw.startswith(b"{"):  # a library may print lines of its own
                return raw.decode()
        return None

    def _stderr_tail(self) -> str:
        try:
            lines = (Path(self._tmp.name) / "stderr.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return (lines or ["no output"])[-1][:200]

    def close(self) -> None:
        atexit.unregister(self.close)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._tmp.cleanup()


def _below_timing() -> None:
    """The seed's `preexec_fn`: dies with its parent, and runs at SEED_NICE (its compile workers
    inherit it)."""
    from okgit.eval.parent.sandbox import die_with_parent

    die_with_parent()
    os.nice(SEED_NICE)


def _files(answer: dict[str, Any], mode: str) -> list[tuple[str, str]]:
    modes = " and ".join(m for m in answer["modes"] if m != "any")
    free = answer.get("dynamic") or []
    free_sizes = f"; sizes compiled dynamic: {', '.join(free)}" if free else "; every size static"
    layout = f"; {answer['layout']}" if answer.get("layout") else ""
    what = (f"torch.compile's {answer['kernels']} Triton kernel(s) (Inductor, {mode} mode) launched from a "
            f"standalone file{f', one graph each for {modes} mode' if modes else ''}{free_sizes}{layout}")
    files = [(Path(answer["path"]).read_text(), what)]
    if answer.get("specialised"):
        files.append((Path(answer["specialised"]).read_text(),
                      f"{what}; and Inductor's kernels compiled static for exactly the timed shape, taken there "
                      f"(they differ: {answer.get('differs')}), kept only if this times faster"))
    return files
