"""A template's NAME_MAX bounds the autotune's values of NAME and is no setting itself (the pool
kind's window-row lanes: tests/lower/test_pool_bounds.py)."""

from __future__ import annotations

from okgit.search.proposers.autotune import find_sites, variants

SOURCE = """\
K_ROW_LANES: int = 16
K_BLOCK_W: int = 64
{bound}
"""


def lanes(source: str) -> set[int]:
    return {v for s, v in variants(source, 1 << 30, 4096) if s.name == "K_ROW_LANES"}


def test_a_bound_caps_the_values_and_is_no_setting_itself():
    assert lanes(SOURCE.format(bound="")) == {8, 32, 4, 64}
    bounded = SOURCE.format(bound="K_ROW_LANES_MAX: int = 16")
    assert lanes(bounded) == {8, 4}
    assert "K_ROW_LANES_MAX" not in {s.name for s in find_sites(bounded)}
