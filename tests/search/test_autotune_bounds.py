"""A template's NAME_MAX bounds the autotune's values of NAME and is no setting itself (the pool
kind's window-row lanes: tests/lower/test_pool_bounds.py)."""

from __future__ import annotations

from okgit.search.proposers.autotune import variants
from okgit.search.proposers.sites import find_sites

# a kernel of the file's own: a file without one exposes no launch settings
KERNEL = """
import triton


@triton.jit
def k(x_ptr):
    pass
"""
SOURCE = """\
K_ROW_LANES: int = 16
K_BLOCK_W: int = 64
{bound}
""" + KERNEL


def lanes(source: str) -> set[int]:
    return {v for s, v in variants(source, 1 << 30, 4096) if s.name == "K_ROW_LANES"}


def test_a_bound_caps_the_values_and_is_no_setting_itself():
    assert lanes(SOURCE.format(bound="")) == {8, 32, 4, 64}
    bounded = SOURCE.format(bound="K_ROW_LANES_MAX: int = 16")
    assert lanes(bounded) == {8, 4}
    assert "K_ROW_LANES_MAX" not in {s.name for s in find_sites(bounded)}


def test_a_max_with_nothing_to_bound_is_a_setting():
    """The rows kind's BLOCK_N_MAX (the widest row kept in registers) bounds no constant BLOCK_N:
    the autotune varies it as before."""
    source = "R_BLOCK_N_MAX: int = 2048\nR_CHUNK: int = 2048\n" + KERNEL
    assert {v for s, v in variants(source, 1 << 30, 1 << 20) if s.name == "R_BLOCK_N_MAX"} == {1024, 4096, 512, 8192}
