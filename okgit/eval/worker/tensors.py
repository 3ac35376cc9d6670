"""Passes over tensors in flat chunks, and bitwise equality: what a worker process compares of its
own tensors (inputs a call changed) and what the judge's comparisons walk outputs with.

Every pass walks a tensor in flat chunks of CHUNK elements where it lives (on the GPU for a GPU
problem): the temporaries of one chunk are what a pass adds to memory, whatever the tensor's size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

CHUNK = 1 << 26  # elements per pass: a few float64 temporaries of 512 MiB at most


def chunks(*tensors: Any, size: int = CHUNK) -> Iterator[tuple[int, list[Any]]]:
    """(flat offset, [the same flat range of each tensor]) over tensors of one shape, in
    row-major order; None stays None."""
    flat = [t.reshape(-1) if t is not None else None for t in tensors]
    n = next(t.numel() for t in flat if t is not None)
    for start in range(0, max(n, 1), size):
        yield start, [t[start:start + size] if t is not None else None for t in flat]


def bitwise_equal(a: Any, b: Any) -> bool:
    import torch

    if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return all(bool(((x == y) | (torch.isnan(x) & torch.isnan(y))).all()) for _, (x, y) in chunks(a, b))
    return bool(torch.equal(a, b))
