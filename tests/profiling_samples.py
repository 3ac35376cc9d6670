"""The profiler output samples of tests/profiling (README.md there says where each format comes
from), loaded as the profiling pass reads them: torch.profiler's floor, ncu's launches, Proton's
stalls, and the profile with all of them merged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from okgit.eval.parent import ncu, proton
from okgit.eval.parent.profile import profile_data, with_counters
from okgit.eval.types import ProfileData
from okgit.eval.worker.occupancy import SmLimits
from okgit.eval.worker.profiler import add_launches

SAMPLES = Path(__file__).parent / "profiling"
H200 = SmLimits.of(9, 0, registers=65536, shared_bytes=233472, sms=132, threads=2048)
RELU = "fused_add_relu_kernel"
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


def ncu_launches() -> list[dict[str, Any]]:
    return ncu.launches((SAMPLES / "ncu.csv").read_text())


def proton_stalls() -> dict[str, dict[str, Any]]:
    found = proton.read(SAMPLES)
    assert found is not None
    return found


def floor_profile() -> ProfileData:
    """What a timed evaluation holds before the pass: torch.profiler's kernels with their launches."""
    kernels: dict[str, dict[str, Any]] = {RELU: {"time_us": 210.9, "calls": 1}, GEMM: {"time_us": 1613.2, "calls": 1}}
    add_launches(kernels, json.loads((SAMPLES / "kineto_trace.json").read_text()), H200)
    return profile_data(kernels, {RELU}, launch_count=1, flops=2.1e11, min_bytes=1.2e9,
                        roofline={"bottleneck_type": "compute", "roofline_position": 0.52, "floor_us": 948.0,
                                  "bandwidth_utilization": 0.16, "compute_utilization": 0.52})


def counters_profile(base: ProfileData | None = None) -> ProfileData:
    """The profile after a pass that ran both tools."""
    prof = with_counters(base or floor_profile(), ncu_launches(), proton_stalls())
    prof.profile_s = 7.5
    return prof
