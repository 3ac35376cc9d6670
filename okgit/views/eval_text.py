"""Human summaries of evaluator results (the `--json` output is the model itself)."""

from __future__ import annotations

from okgit.eval.types import EvalResult, KernelShape, ProfileData
from okgit.search.profile_text import summary

# A kernel okgit checked on a CPU ran under Triton's interpreter; outside okgit, Triton without
# it looks for a GPU driver and fails ("0 active drivers"). Said in the report and by `apply`.
INTERPRETER_NOTE = ("checked on a CPU under Triton's interpreter: to run the applied kernel on a CPU, set "
                    "TRITON_INTERPRET=1 before Python starts (TRITON_INTERPRET=1 python your_script.py); "
                    "on a machine with an NVIDIA GPU it runs as it is")


def interpreted(device: str | None, backend: str | None) -> bool:
    """Whether kernels found on `device` with `backend` were checked under Triton's interpreter."""
    return device == "cpu" and backend == "triton"


def applies_at(shapes: list[KernelShape]) -> str:
    """Where a kernel's own code ran ("its kernels ran at: ...") and where only other code did, from
    its evaluation; "" when nothing was recorded (an older run)."""
    if not shapes:
        return ""

    def name(s: KernelShape) -> str:
        knobs = ", ".join(f"{k}={v}" for k, v in s.knobs.items()) or "no shape knobs"
        tags = (["the op file's own shape"] if s.own else []) + (["counted on the meta device"] if s.how == "meta" else [])
        return knobs + (f" ({', '.join(tags)})" if tags else "")

    shapes = sorted(shapes, key=lambda s: not s.own)  # the op file's own first
    ran = [name(s) for s in shapes if s.ran()]
    other = [name(s) for s in shapes if s.launches == 0]
    unknown = [f"{name(s)}: {s.why}" for s in shapes if s.launches is None]
    text = f"its kernels ran at: {'; '.join(ran) or 'no checked shape'}"
    if other:
        text += f"; only other code (the original) ran at: {'; '.join(other)}"
    if unknown:
        text += f"; not told at: {'; '.join(unknown)}"
    return text


def eval_text(result: EvalResult) -> str:
    """Status, each gate pass/fail, the error, and times (or why none are claimed)."""
    lines = [f"status: {result.status.value}" + (f"  (failed at {result.error.gate})" if result.error else "")]
    if result.error:
        lines.append("error: " + result.error.message.strip().replace("\n", "\n       "))
    lines += _checks(result)
    if result.timed and result.runtime_us is not None:
        ref = f"{result.ref_runtime_us:.2f} us" if result.ref_runtime_us else "?"
        speed = f"  speedup {result.speedup:.3f}x" if result.speedup else ""
        lines.append(f"time: {result.runtime_us:.2f} us (reference {ref}){speed} on {result.device}")
    elif result.device == "cpu":
        lines.append("time: timing not claimed on cpu (Triton interpreter: correctness only)")
    if result.profile is not None:
        lines += _profile(result.profile)
    if result.wall_s is not None:
        lines.append(f"wall: {result.wall_s:.1f} s")
    return "\n".join(lines)


def _checks(result: EvalResult) -> list[str]:
    """The gates, their notes, the shapes checked, where the kernels ran, the error's size."""
    lines = []
    gates = "  ".join(f"{'ok' if g.passed else 'FAIL'} {g.name}" for g in result.gates)
    if gates:
        lines.append(f"gates: {gates}")
    lines += [f"  note {g.name}: {g.detail}" for g in result.gates if g.passed and g.detail]
    if result.shapes:
        lines.append("shapes: " + "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) or "(no knobs)" for s in result.shapes))
    if result.kernel_shapes:
        lines.append(applies_at(result.kernel_shapes))
    if result.max_abs_error is not None and result.correct:
        lines.append(f"max error: abs {result.max_abs_error:.3e}, rel {result.max_rel_error or 0:.3e}")
    return lines


def _profile(p: ProfileData) -> list[str]:
    facts = []
    if p.flops:  # torch's FlopCounterMode counts matmuls, convolutions and attention; pointwise work counts 0
        facts.append(f"{p.flops:.3g} FLOP in matmuls/convolutions")
    if p.min_bytes is not None:
        facts.append(f"{p.min_bytes:.3g} B min")
    if p.launch_count is not None:
        facts.append(f"{p.launch_count} custom launches/call")
    if p.roofline_position is not None:
        facts.append(f"{p.roofline_position:.0%} of roofline ({p.bottleneck_type})")
    lines = ["profile: " + ", ".join(facts)] if facts else []
    if p.occupancy is not None or p.occupancy_theoretical is not None or p.stalls or p.cache_hit_rate is not None:
        lines.append(f"  {summary(p)} ({', '.join(dict.fromkeys(p.sources.values()))})")
    lines += [f"  {k.time_us:9.2f} us  {'custom ' if k.custom else 'library'}  {k.name[:70]}" for k in p.top_kernels[:3]]
    return lines + [f"  not measured by {tool}: {why}" for tool, why in p.not_run.items()]
