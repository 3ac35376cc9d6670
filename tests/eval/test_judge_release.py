"""Device memory of the judge and of a timing: when the judge hands its cached memory back after a
check (prepared.must_release), and how many input sets a timing rotates (measure.set_count)."""

from okgit.eval.judge.prepared import must_release
from okgit.eval.worker.measure import TIMING_SET_BYTES

GiB = 2**30


def test_a_cached_case_never_releases():
    assert not must_release(False, free=0, case_bytes=26 * GiB)


def test_a_recomputed_case_keeps_its_memory_while_the_candidate_has_room():
    # KernelBench L1/39 alone on an H200: 17.2 GB per case, ~68 GB free after a check
    case = 17 * GiB
    assert not must_release(True, free=2 * case + TIMING_SET_BYTES, case_bytes=case)
    assert not must_release(True, free=63 * GiB, case_bytes=case)


def test_a_recomputed_case_releases_where_the_candidate_could_run_short():
    case = 17 * GiB
    assert must_release(True, free=2 * case + TIMING_SET_BYTES - 1, case_bytes=case)
    assert must_release(True, free=10 * GiB, case_bytes=case)  # a device crowded by other problems
    assert must_release(True, free=0, case_bytes=0)


def test_timing_rotates_input_sets_that_fit_and_one_set_of_a_multi_gb_input():
    """The evaluator's timing and a sweep's baselines rotate as many input sets as set_count says:
    three of a small case, one of L1/45's 16 GiB input (the baselines once drew three, 96 GiB with
    the timer's copies, beside a footprint counted for one)."""
    from okgit.eval.worker.measure import set_count

    assert set_count(64 * 2**20, 3) == 3
    assert set_count(3 * 2**30, 3) == 1 and set_count(2 * 2**30, 3) == 2
    assert set_count(16 * 2**30, 3) == 1 and set_count(0, 3) == 3
    assert set_count(1, 1) == 1  # never more than the seeds there are
