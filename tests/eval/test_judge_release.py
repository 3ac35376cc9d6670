"""When the judge hands its cached device memory back after a check (prepared.must_release)."""

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
