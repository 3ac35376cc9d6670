"""The reference built on the meta device and traced with torch.export into a captured graph.

The op file runs in a namespace of its own (its knobs overridden), its Model is built on the
meta device (shapes without memory or compute) and exported; okgit.lower.translate turns
the exported program into okgit.lower.graph nodes. Attribute binding (okgit.lower.binding)
traces the same reference again with a float attribute or the constructor's floats changed.
"""

from __future__ import annotations

import inspect
import logging
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from okgit.lower.graph import Graph, Unsupported
from okgit.lower.translate import translate
from okgit.problem import Problem, perturb_floats


def instantiate(
    source: str, knobs: dict[str, int], perturbed: bool = False, tweak: Callable[[torch.nn.Module], None] | None = None,
    fake: bool = False,
) -> tuple[dict[str, Any], torch.nn.Module, tuple]:
    """The op module, its reference Model and its inputs, on the meta device (shapes only).

    `perturbed`: get_init_inputs' floats perturbed as the evaluator's init_inputs case does
    (okgit.problem.perturb_floats); `tweak` edits the built model; `fake`: fake CPU tensors
    instead (no memory either), where a tensor the forward makes on its input's device must have
    a value."""
    with tempfile.TemporaryDirectory() as tmp:
        # a real file: @triton.jit in the op file reads its own source
        path = Path(tmp) / "reference.py"
        path.write_text(source)
        ns: dict[str, Any] = {"__name__": "okgit_reference", "__file__": str(path)}
        try:
            exec(compile(source, str(path), "exec"), ns)
            ns.update(knobs)
            with FakeTensorMode(allow_non_fake_inputs=True) if fake else torch.device("meta"):
                init = ns["get_init_inputs"]()
                if perturbed:
                    init, _ = perturb_floats(list(init))
                model = ns["Model"](*init)
                if tweak is not None:
                    tweak(model)
                inputs = tuple(ns["get_inputs"]())
        except Exception as e:  # noqa: BLE001 - any failure here means: not ours to lower
            raise Unsupported(f"cannot build the reference: {type(e).__name__}: {str(e)[:200]}") from None
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise Unsupported("get_inputs returns non-tensor values")
    return ns, model, inputs


def input_extent(problem: Problem) -> tuple[int, int]:
    """(largest numel, largest dim) over the reference's inputs and parameters, default knobs."""
    _, model, inputs = instantiate(problem.source, {})
    tensors = list(inputs) + list(model.parameters()) + list(model.buffers())
    numel = max((t.numel() for t in tensors), default=1)
    dim = max((s for t in tensors for s in t.shape), default=1)
    return numel, dim


def trace(source: str, knobs: dict[str, int], perturbed: bool = False, tweak=None) -> Graph:
    """The reference's graph with these knobs (and `instantiate`'s changes), nothing bound yet."""
    ns, model, inputs = instantiate(source, knobs, perturbed, tweak)
    try:
        ep = _export(model, inputs)
        constants = dict(ep.constants)
        if any(isinstance(t, torch.Tensor) and t.is_meta for t in constants.values()):
            # made on the input's device (meta here): the same trace on fake CPU tensors has their values
            constants = dict(_export(*instantiate(source, knobs, perturbed, tweak, fake=True)[1:]).constants)
    except Exception as e:  # noqa: BLE001 - any failure to trace means: not ours to lower
        if "triton.jit" in source:  # its own kernels run only on a device, not on the meta tensors of a capture
            raise Unsupported("the reference launches its own Triton kernel, which a capture cannot see into; "
                              "the autotune phase tunes that kernel instead") from None
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise Unsupported(f"cannot trace the reference: {type(e).__name__}: {first}") from None
    names = list(inspect.signature(model.forward).parameters)
    return translate(ep, names, "ModelNew" if "ModelNew" in ns else "Model", constants)


# A trace that fails is answered by Unsupported (one line in the note); torch's fake tensors also
# log the failing op's traceback at ERROR level, which would reach the user's terminal.
_FAKE_TENSOR_LOG = logging.getLogger("torch._subclasses.fake_tensor")


def _export(model: torch.nn.Module, inputs: tuple):
    level = _FAKE_TENSOR_LOG.level
    _FAKE_TENSOR_LOG.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.export(model, inputs, strict=False)
    finally:
        _FAKE_TENSOR_LOG.setLevel(level)
