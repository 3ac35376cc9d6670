"""KernelCode's offsets into broadcast operands (index, index_within, index_across), evaluated
as Python over every element of small domains against the operand's own row-major offset: the
flat offset, one part's position alone, and positions of several parts summed (a tile's rows and
columns), dims of a part that are not adjacent in the domain included."""

from __future__ import annotations

import itertools

import pytest

from okgit.lower.graph import Unsupported
from okgit.lower.kernelcode import KernelCode

SHAPE = (3, 4, 1, 5, 2)  # dim 2 is 1: not covered


def code_for(shape: tuple[int, ...]) -> KernelCode:
    return KernelCode(None, {}, [str(s) for s in shape], set())  # no group: the offsets read the domain alone


def evaluate(code: KernelCode, expr: str, **positions: int) -> int:
    sizes = {arg: eval(expr_, {}, {}) for expr_, arg in code.sizes.items()}  # the sizes are products of literals
    return eval(expr, {}, {**sizes, **positions})  # the offset's own arithmetic


def position(coords: tuple[int, ...], dims: list[int], shape: tuple[int, ...]) -> int:
    """The row-major position of `coords` among `dims` (each dim's extent from `shape`)."""
    p = 0
    for d in dims:
        p = p * shape[d] + coords[d]
    return p


OPERANDS = [(0,), (1,), (3,), (4,), (0, 1), (1, 3), (0, 3), (3, 4), (0, 1, 3), (1, 3, 4), (0, 4), (0, 1, 3, 4)]
PARTS = [
    [{0, 1, 2, 3, 4}],  # the flat offset
    [{0, 1}, {3, 4}],  # rows and columns
    [{0, 3}, {1, 4}],  # parts whose dims are not adjacent in the domain
    [{0}, {1, 2}, {3, 4}],  # three parts (outer, folded, inner)
]


@pytest.mark.parametrize("dims", OPERANDS, ids=str)
@pytest.mark.parametrize("parts", PARTS, ids=str)
def test_the_offset_is_the_operands_row_major_offset_at_every_element(dims, parts):
    code = code_for(SHAPE)
    bmap = tuple(d if d in dims else None for d in range(len(SHAPE)))
    covered = [d for d in range(len(SHAPE)) if SHAPE[d] != 1]
    names = [f"p{k}" for k in range(len(parts))]
    expr = code.index_across(bmap, [(n, p) for n, p in zip(names, parts)])
    for coords in itertools.product(*(range(s) for s in SHAPE)):
        at = {n: position(coords, [d for d in covered if d in p], SHAPE) for n, p in zip(names, parts)}
        want = position(coords, [d for d in dims if SHAPE[d] != 1], SHAPE)
        assert evaluate(code, expr, **at) == want, (expr, coords)


def test_index_and_index_within_are_its_one_part_cases():
    code = code_for(SHAPE)
    assert code.index((None, 1, None, 3, None), "flat") == code.index_across((None, 1, None, 3, None), [("flat", {0, 1, 2, 3, 4})])
    assert code.index_within((None, 1, None, 3, None), "r", {1, 3}) == "r"  # adjacent within the part: one term
    assert code.index((0, 1, None, 3, 4), "flat") == "flat"  # the whole domain: the flat offset itself
    assert code.index((None, None, 2, None, None), "flat") == "0"  # only a size-1 dim: one element


def test_a_dim_in_no_part_or_a_permuted_operand_is_declined():
    code = code_for(SHAPE)
    with pytest.raises(Unsupported, match="outside the tile's parts"):
        code.index_across((0, None, None, 3, None), [("r", {0, 1})])
    with pytest.raises(Unsupported, match="permuted"):
        code.index_across((3, 0), [("flat", {0, 1, 3, 4})])
