"""The profiling pass's readers on the tools' own formats (tests/profiling/README.md says where each
sample's format comes from): Nsight Compute's CSV, Proton's PC-sampling tree, torch.profiler's
launch records with the occupancy calculator, and their merge into one ProfileData."""

from __future__ import annotations

import pytest
from profiling_samples import GEMM, H200, RELU, SAMPLES, floor_profile, ncu_launches

from okgit.eval.parent import ncu, proton
from okgit.eval.parent.profile import classify, profile_data, with_counters
from okgit.eval.worker.occupancy import occupancy


def test_ncu_rows_become_one_launch_each_in_okgit_units():
    launches = ncu_launches()
    assert [launch["name"] for launch in launches] == [RELU, GEMM]
    relu = ncu.counters(launches[0])
    assert relu["time_s"] == pytest.approx(210.112e-6)
    assert relu["dram_bytes"] == 805_306_368  # read and written, thousands separators gone
    assert relu["bandwidth"] == pytest.approx(805_306_368 / 210.112e-6)
    assert (relu["bandwidth_utilization"], relu["compute_utilization"]) == (pytest.approx(0.7984), pytest.approx(0.1843))
    assert (relu["occupancy"], relu["occupancy_theoretical"]) == (pytest.approx(0.6127), pytest.approx(0.75))
    assert relu["occupancy_limiter"] == "registers" and relu["registers"] == 40 and relu["shared_bytes"] == 0
    assert relu["l2_hit_rate"] == pytest.approx(0.0312)
    assert relu["block"] == [128, 1, 1] and relu["grid"] == [65536, 1, 1]
    reasons = [r for r, _ in relu["stalls"]]
    assert reasons[0] == "long_scoreboard" and "selected" not in reasons  # the issuing state is no stall
    assert sum(s for _, s in relu["stalls"]) == pytest.approx(1.0)
    gemm = ncu.counters(launches[1])
    assert gemm["occupancy_limiter"] == "registers"  # registers and shared memory both hold it to 1 block
    assert gemm["shared_bytes"] == 213_024 and gemm["stalls"][0][0] == "math_pipe_throttle"


def test_ncu_says_why_it_read_nothing():
    denied = ("==PROF== Connected to process 812 (/usr/bin/python3.12)\n==ERROR== ERR_NVGPUCTRPERM - The user does "
              "not have permission to access NVIDIA GPU Performance Counters on the target device 0.\n")
    assert "not permitted" in (ncu.refusal(denied) or "") and ncu.launches(denied) == []
    assert ncu.refusal("==ERROR== Failed to find metric regex:foo") == "==ERROR== Failed to find metric regex:foo"
    assert ncu.refusal((SAMPLES / "ncu.csv").read_text()) is None
    assert ncu.number("n/a") is None and ncu.number("1,234.5") == 1234.5


def test_the_ncu_command_leaves_the_clocks_alone_and_profiles_only_the_marked_call(tmp_path):
    cmd = ncu.command("/usr/local/cuda/bin/ncu", tmp_path / "ncu.csv")
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"
    assert cmd[cmd.index("--launch-count") + 1] == str(ncu.LAUNCH_LIMIT)
    assert cmd[cmd.index("--log-file") + 1] == str(tmp_path / "ncu.csv")


@pytest.mark.parametrize("threads, registers, shared, held, theoretical, limiter", [
    (128, 40, 0, 12, 0.75, "registers"),  # 1280 registers a warp: 12 warps per scheduler, 48 of 64
    (384, 168, 213_024, 1, 0.1875, "registers"),  # shared memory holds it to one block too: registers named first
    (1024, 16, 0, 2, 1.0, "warps"),
    (32, 16, 0, 32, 0.5, "blocks"),  # 32 one-warp blocks: the block slots run out at half the warp slots
    (256, 32, 100_000, 2, 0.25, "shared_memory"),  # 101,120 bytes a block with the 1 KiB reserve
])
def test_the_occupancy_calculator_names_the_limit_as_ncu_does(threads, registers, shared, held, theoretical, limiter):
    occ = occupancy(H200, threads, registers, shared, blocks=held * 132 * 3)
    assert occ is not None
    assert (occ.blocks_per_sm, occ.theoretical, occ.limiter) == (held, pytest.approx(theoretical), limiter)
    assert occ.waves == pytest.approx(3.0)


def test_a_block_no_sm_can_hold_has_no_occupancy():
    assert occupancy(H200, 1024, 255, 0) is None  # 1024 threads x 255 registers: more than an SM has
    assert occupancy(H200, 0, 32, 0) is None


def test_torch_profilers_launch_records_give_each_kernel_its_launch_and_occupancy():
    prof = floor_profile()
    relu = next(k for k in prof.top_kernels if k.name == RELU)
    assert relu.custom and relu.grid == [65536, 1, 1] and relu.registers == 40
    assert (relu.occupancy_theoretical, relu.occupancy_limiter) == (pytest.approx(0.75), "registers")
    assert relu.sources["registers"] == "torch.profiler" and relu.sources["occupancy_limiter"] == "occupancy calculator"
    assert prof.occupancy_limiter == "registers"  # the GEMM's, the longest kernel
    assert prof.occupancy is None  # achieved occupancy is measured, never calculated
    assert prof.roofline.startswith("compute-bound: its floor is 948 us")
    assert prof.sources["bandwidth_utilization"] == "roofline"


def test_ncu_counters_fill_the_profile_and_say_where_each_figure_came_from():
    prof = with_counters(floor_profile(), ncu_launches(), None)
    relu = next(k for k in prof.top_kernels if k.name == RELU)
    gemm = next(k for k in prof.top_kernels if k.name == GEMM)
    assert relu.time_us == 210.9  # torch.profiler's time stays
    assert (relu.bottleneck_type, gemm.bottleneck_type) == ("memory", "compute")
    assert relu.occupancy == pytest.approx(0.6127) and relu.sources["occupancy"] == "ncu"
    assert prof.bottleneck_type == "compute" and prof.sources["bottleneck_type"] == "ncu"
    assert "ncu: 88% of the kernel time is compute-bound" in prof.bottleneck_why
    weight = (210.112, 1612.64)
    assert prof.compute_utilization == pytest.approx((0.1843 * weight[0] + 0.8631 * weight[1]) / sum(weight))
    assert prof.cache_hit_rate == pytest.approx((0.0312 * weight[0] + 0.889 * weight[1]) / sum(weight))
    assert prof.bandwidth == pytest.approx((805_306_368 + 469_762_048) / (sum(weight) * 1e-6))
    assert prof.stalls[0].reason == "math_pipe_throttle" and prof.sources["stalls"] == "ncu"
    assert {prof.sources[k] for k in ("occupancy", "occupancy_theoretical", "occupancy_limiter", "bandwidth")} == {"ncu"}


def test_proton_reads_the_stalls_of_the_profiled_calls_and_their_source_lines():
    found = proton.read(SAMPLES)
    assert found is not None and set(found) == {RELU, GEMM}  # the warm-up's kernel ran outside the scope
    relu = found[RELU]
    assert relu["samples"] == 5120 + 2890 + 1180
    assert relu["stalls"][0][0] == "long_scoreboard"
    assert relu["stalls"][0][1] == pytest.approx(6460 / (6460 + 550 + 1090 + 60 + 170))
    assert relu["lines"]["long_scoreboard"] == "candidate.py:31" and relu["lines"]["lg_throttle"] == "candidate.py:35"
    assert found[GEMM]["stalls"][0][0] == "math_pipe_throttle" and "not_selected" in dict(found[GEMM]["stalls"])


def test_proton_gives_the_stalls_where_ncu_did_not_run_and_the_lines_where_it_did():
    stalls = proton.read(SAMPLES)
    alone = with_counters(floor_profile(), None, stalls)
    relu = next(k for k in alone.top_kernels if k.name == RELU)
    assert relu.stalls[0].reason == "long_scoreboard" and relu.stalls[0].line == "candidate.py:31"
    assert alone.sources["stalls"] == "proton" and alone.stalls[0].reason == "math_pipe_throttle"
    assert alone.bottleneck_type == "compute" and alone.sources["bottleneck_type"] == "roofline"
    both = with_counters(floor_profile(), ncu_launches(), stalls)
    relu = next(k for k in both.top_kernels if k.name == RELU)
    assert relu.sources["stalls"] == "ncu" and relu.stalls[0].line == "candidate.py:31"


def test_a_malformed_proton_file_is_no_profile(tmp_path):
    (tmp_path / "okgit_proton.hatchet").write_text("[1, 2")
    assert proton.read(tmp_path) is None
    assert proton.read(tmp_path / "absent") is None
    with pytest.raises(ValueError):
        proton.kernels("not a tree")


def test_a_call_whose_kernels_leave_gaps_is_latency_bound():
    prof = profile_data({"k1": {"time_us": 4.0, "calls": 1}, "k2": {"time_us": 3.0, "calls": 1}}, {"k1"}, launch_count=6,
                        flops=0.0, min_bytes=4e6, roofline={"bottleneck_type": "memory", "roofline_position": 0.3,
                                                            "floor_us": 6.0})
    classify(prof, runtime_us=20.0)
    assert prof.bottleneck_type == "latency" and prof.sources["bottleneck_type"] == "torch.profiler"
    assert "7 us of the call's 20 us" in prof.bottleneck_why
    busy = profile_data({"k1": {"time_us": 18.0, "calls": 1}}, {"k1"}, launch_count=1, flops=0.0, min_bytes=4e6,
                        roofline={"bottleneck_type": "memory", "roofline_position": 0.3, "floor_us": 6.0})
    classify(busy, runtime_us=20.0)
    assert busy.bottleneck_type == "memory" and busy.sources["bottleneck_type"] == "roofline"


def test_a_kernel_proton_names_otherwise_weighs_in_the_totals_but_adds_no_kernel():
    stalls = {"_ZN2at6native29vectorized_elementwise_kernelILi4EEEviT_": {
        "samples": 500.0, "stalled": 450.0, "stalls": [("wait", 1.0)], "lines": {}}}
    prof = with_counters(floor_profile(), None, stalls)
    assert [k.name for k in prof.top_kernels] == [k.name for k in floor_profile().top_kernels]
    assert [(s.reason, s.share) for s in prof.stalls] == [("wait", 1.0)] and prof.sources["stalls"] == "proton"
