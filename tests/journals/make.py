"""Writes the recorded runs the watch/progress/figures tests read: `python tests/journals/make.py`.

Each run is a run directory (journal.jsonl + traces.jsonl) following docs/internals.md, with
profiles and results built from okgit's own types and every event checked against its model
(okgit.journal.events, as the run's own writer does), so the recorded shapes match the real ones.
  gpu-optimized: a timed triton run on a GPU that ends `optimized`, with an LLM, intents,
                 a critic's diagnosis and the final gate.
  cpu-failures:  an untimed run on a CPU with every failure status, ending `unverified`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from okgit.eval.types import EvalError, EvalResult, KernelTime, ProfileData, Status
from okgit.journal.events import check_event

HERE = Path(__file__).parent
T0 = 1_700_000_000.0

BASE = '''import torch
import torch.nn as nn

batch_size = 4096
dim = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


def candidate_source(block: int, note: str) -> str:
    kernel = f'''import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # {note}
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    x = x - tl.max(x, 0)
    e = tl.exp(x)
    tl.store(y_ptr + row * n + cols, e / tl.sum(e, 0), mask=cols < n)


'''
    forward = f'''        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK={block})
        return y
'''
    return kernel + BASE.replace("        return torch.softmax(x, dim=-1)\n", forward)


class Recorder:
    def __init__(self, run: str) -> None:
        self.run = run
        self.t = T0
        self.journal: list[dict[str, Any]] = []
        self.traces: list[dict[str, Any]] = []

    def log(self, type: str, dt: float = 1.0, **fields: Any) -> None:
        self.t += dt
        line = {"type": type, "ts": round(self.t, 3), "run": self.run, **fields}
        check_event(json.loads(json.dumps(line, default=lambda o: o.model_dump(mode="json"))))
        self.journal.append(line)

    def trace(self, type: str, **fields: Any) -> None:
        self.traces.append({"type": type, "ts": round(self.t, 3), "run": self.run, **fields})

    def candidate(self, cand: str, origin: str, intent: str, source: str, result: EvalResult, dt: float = 20.0,
                  parent: str | None = None) -> None:
        self.log("proposal", dt=2.0, cand=cand, origin=origin, intent=intent, parent=parent, backend="triton")
        r = result.model_dump(mode="json")
        self.log("evaluated", dt=dt, cand=cand, status=r["status"], correct=r["correct"], timed=r["timed"],
                 speedup=r["speedup"], runtime_us=r["runtime_us"], ref_runtime_us=r["ref_runtime_us"],
                 error=r["error"], profile=r["profile"], wall_s=r["wall_s"])
        self.trace("candidate", cand=cand, origin=origin, intent=intent, parent=parent, source=source, result=r)
        if result.correct:
            self.log("accepted", dt=0.2, cand=cand, tag=f"okgit/{self.run}/{cand}", commit=f"{cand}0" * 8, speedup=result.speedup)

    def write(self) -> None:
        d = HERE / self.run
        d.mkdir(exist_ok=True)
        for name, records in (("journal.jsonl", self.journal), ("traces.jsonl", self.traces)):
            (d / name).write_text("".join(json.dumps(r) + "\n" for r in records))


# The shape of okgit.eval.roofline.measure_peaks' result.
H100 = {"device": "NVIDIA H100 80GB HBM3", "copy_bandwidth": 2.9e12, "read_bandwidth": 3.0e12,
        "matmul": {"fp32": 5.1e13, "tf32": 3.8e14, "bf16": 6.6e14, "fp16": 6.7e14}, "l2_bytes": 52428800, "sm_count": 132}
FLOPS = 5.0 * 4096 * 4096
MIN_BYTES = 2 * 4 * 4096 * 4096


def gpu_profile(runtime_us: float, bandwidth: float) -> dict[str, Any]:
    floor_us = MIN_BYTES / 3.0e12 * 1e6
    return ProfileData(
        bottleneck_type="memory", roofline_position=round(floor_us / runtime_us, 3), bandwidth_utilization=bandwidth,
        compute_utilization=0.04, occupancy=0.62, flops=FLOPS, min_bytes=MIN_BYTES, floor_us=round(floor_us, 2),
        launch_count=1, top_kernels=[KernelTime(name="softmax_kernel", time_us=runtime_us, custom=True)],
    ).model_dump(mode="json")


def timed(speedup: float, bandwidth: float) -> EvalResult:
    runtime = round(120.0 / speedup, 2)
    return EvalResult(status=Status.correct, correct=True, timed=True, speedup=speedup, runtime_us=runtime,
                      ref_runtime_us=120.0, device="cuda", profile=ProfileData.model_validate(gpu_profile(runtime, bandwidth)),
                      wall_s=14.2)


def failed(status: Status, gate: str, message: str, device: str = "cuda") -> EvalResult:
    return EvalResult(status=status, device=device, error=EvalError(gate=gate, message=message), wall_s=3.1)


def gpu_optimized() -> Recorder:
    run = "gpu-optimized"
    r = Recorder(run)
    r.log("run_started", dt=0.0, op="ops/softmax.py", base="0123456789abcdef0123456789abcdef01234567", base_dirty=False,
          branch=f"okgit/{run}", worktree=f".okgit/worktrees/{run}", backend="triton", device="cuda", mode="fast",
          model="openai/gpt-4o", eval="local", iterations=6)
    r.trace("reference", path="ops/softmax.py", source=BASE)
    r.log("reference", dt=8.0, runtime_us=120.0, timed=True, device="cuda", profile=gpu_profile(120.0, 0.31),
          degenerate=None, shapes=[{"batch_size": 4096, "dim": 4096}, {"batch_size": 17, "dim": 1000}],
          flags={"allow_tf32": False}, hardware=H100)
    r.log("intent", op="insert", id="i1", description="fuse the row softmax into one kernel", parent=None, priority=0.9,
          status="open", attempts=0, best_speedup=None)
    r.log("intent", op="insert", id="i2", description="vectorize loads, one read per element", parent="i1", priority=0.7,
          status="open", attempts=0, best_speedup=None)
    r.log("intent", op="insert", id="i3", description="split rows across programs", parent=None, priority=0.3,
          status="open", attempts=0, best_speedup=None)
    r.candidate("c001", "templates", "fused row softmax (template)", candidate_source(4096, "template"), timed(1.5, 0.47))
    r.log("best", dt=0.1, cand="c001", speedup=1.5)
    r.log("diagnosis", cand="c001", bottleneck_type="memory", roofline_position=0.47,
          specific_issue="two passes over each row", recommendation="online softmax: one read of x",
          estimated_headroom=2.0, confidence=0.7)
    r.log("llm_call", role="generator", model="openai/gpt-4o", prompt_tokens=2400, completion_tokens=800,
          cost_usd=0.014, latency_s=9.5, ok=True)
    r.candidate("c002", "llm", "online softmax, one read", candidate_source(4096, "online, broken"),
                failed(Status.compile_error, "compile", "triton.CompilationError: at 12:8: unsupported tl.max axis"), parent="c001")
    r.log("llm_call", role="generator", model="openai/gpt-4o", prompt_tokens=2900, completion_tokens=850,
          cost_usd=0.016, latency_s=10.1, ok=True)
    r.candidate("c003", "llm", "online softmax, one read (fixed)", candidate_source(4096, "online"), timed(2.1, 0.66), parent="c001")
    r.log("best", dt=0.1, cand="c003", speedup=2.1)
    r.log("intent", op="update", id="i1", description="fuse the row softmax into one kernel", parent=None, priority=0.9,
          status="done", attempts=2, best_speedup=2.1)
    r.candidate("c004", "autotune", "BLOCK=8192", candidate_source(8192, "autotune"),
                failed(Status.incorrect, "outputs", "max abs error 3.1e-01 at seed 2 (rtol 1e-4)"), parent="c003")
    r.candidate("c005", "autotune", "BLOCK=4096 num_warps=8", candidate_source(4096, "num_warps=8"), timed(2.3, 0.72), parent="c003")
    r.log("best", dt=0.1, cand="c005", speedup=2.3)
    r.log("intent", op="update", id="i2", description="vectorize loads, one read per element", parent="i1",
          priority=0.7, status="done", attempts=1, best_speedup=2.3)
    r.candidate("c006", "llm", "skip the max subtraction", candidate_source(4096, "no max"),
                failed(Status.rejected, "roofline", "21.0 us is below the roofline floor 22.4 us"), parent="c005")
    r.log("intent", op="prune", id="i3", description="split rows across programs", parent=None, priority=0.3,
          status="pruned", attempts=0, best_speedup=None, reason="no gain expected after the online softmax")
    r.log("note", message="search ended: iteration budget (6) reached")
    r.log("gate", dt=30.0, name="thorough", cand="c005", passed=True, detail="all correctness gates passed")
    r.log("gate", dt=40.0, name="interleaved", cand="c005", passed=True, detail="won 5 of 5 rounds by more than the noise",
          rounds=5, baseline_us=[121.0, 120.4, 122.1, 120.9, 121.3], candidate_us=[53.1, 52.8, 53.4, 52.9, 53.0],
          noise=0.008, wins=5, sign_test_p=0.03125, speedup=2.28, optimized=True)
    r.log("run_finished", dt=1.0, status="optimized", speedup=2.28, baseline_us=121.0, best_us=53.0,
          best_tag=f"okgit/{run}/c005", best_cand="c005", report=f".okgit/runs/{run}/report.md",
          diff=f".okgit/runs/{run}/report.diff", iterations=6, cost_usd=0.03)
    return r


def untimed(device: str = "cpu") -> EvalResult:
    profile = ProfileData(flops=FLOPS, min_bytes=MIN_BYTES)
    return EvalResult(status=Status.correct, correct=True, device=device, profile=profile, wall_s=6.0)


def cpu_failures() -> Recorder:
    run = "cpu-failures"
    r = Recorder(run)
    r.log("run_started", dt=0.0, op="ops/softmax.py", base="89abcdef0123456789abcdef0123456789abcdef", base_dirty=True,
          branch=f"okgit/{run}", worktree=f".okgit/worktrees/{run}", backend="triton", device="cpu", mode="fast",
          model=None, eval="local", iterations=8)
    r.log("note", dt=0.1, message="ops/softmax.py has uncommitted changes: its working-tree version is the base")
    r.trace("reference", path="ops/softmax.py", source=BASE)
    r.log("reference", dt=3.0, runtime_us=None, timed=False, device="cpu",
          profile=ProfileData(flops=FLOPS, min_bytes=MIN_BYTES).model_dump(mode="json"), degenerate=None,
          shapes=[{"batch_size": 4096, "dim": 4096}], flags={}, hardware={"device": "cpu"})
    r.candidate("c001", "templates", "fused row softmax (template)", candidate_source(4096, "template"), untimed())
    r.log("best", dt=0.1, cand="c001", speedup=None)
    r.candidate("c002", "templates", "two-pass softmax (template)", candidate_source(1024, "two-pass"),
                failed(Status.compile_error, "compile", "NameError: name 'tl' is not defined", "cpu"))
    r.candidate("c003", "autotune", "BLOCK=2048", candidate_source(2048, "short block"),
                failed(Status.incorrect, "outputs", "columns past 2048 never written (poisoned memory)", "cpu"))
    r.candidate("c004", "autotune", "BLOCK=8192", candidate_source(8192, "hang"),
                failed(Status.error, "timeout", "worker killed after 60 s", "cpu"))
    r.candidate("c005", "autotune", "BLOCK=4096 num_warps=8", candidate_source(4096, "num_warps=8"), untimed())
    r.candidate("c006", "templates", "torch fallback", BASE.replace("softmax(x", "softmax(x.float()"),
                failed(Status.rejected, "custom_kernel", "launches no triton kernel", "cpu"))
    r.log("note", message="search ended: proposers exhausted")
    r.log("run_finished", dt=1.0, status="unverified", speedup=None, baseline_us=None, best_us=None,
          best_tag=f"okgit/{run}/c001", best_cand="c001", report=f".okgit/runs/{run}/report.md",
          diff=f".okgit/runs/{run}/report.diff", iterations=6, cost_usd=0.0)
    return r


if __name__ == "__main__":
    for recorder in (gpu_optimized(), cpu_failures()):
        recorder.write()
        print(f"wrote {HERE / recorder.run}: {len(recorder.journal)} events, {len(recorder.traces)} traces")
