"""Neighbouring modules a kernel could fuse: found in the model's own process (okgit.campaign.probe).

A chain is a Linear or a convolution followed by its norm, its activation or both (a Linear and
its ReLU, a Conv2d, its BatchNorm2d and its ReLU): leaf modules called one after another, each
on the output of the one before (the same tensor object, no other argument). A producer counts
only when every call of it starts the same chain. Then the extracted op files themselves are
swapped into copies of the model with okgit.campaign.swapin, the code the patched model will
run, and the model's outputs in training and eval mode must stay bit for bit what they were
(within float32 rounding where the model does not repeat itself bit for bit); a chain whose
first output is read elsewhere too, or changed in place before the next module reads it, fails
this and is refused, with why, before any search is spent on it.
"""

from __future__ import annotations

import copy
from types import ModuleType
from typing import Any, Callable

PRODUCERS = ("Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d",
         "InstanceNorm3d", "LayerNorm")
ACTIVATIONS = ("ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "SELU", "CELU", "Hardswish",
               "Hardsigmoid", "Hardtanh", "Mish", "Softplus")
LONGEST = 3  # a producer, its norm, its activation


def find(order: list[tuple[str, bool]], kinds: dict[str, str]) -> list[list[str]]:
    """Chains in one model call's `order` of leaf calls ((module path, whether its one argument
    is the previous leaf's output)); `kinds`: each path's torch.nn class name (None: not one)."""
    starts: dict[str, list[tuple[str, ...]]] = {}
    for i, (name, _) in enumerate(order):
        if kinds.get(name) not in PRODUCERS:
            continue
        chain = [name]
        for later, consumes in order[i + 1:]:
            if not consumes or len(chain) == LONGEST or not _fits(kinds[chain[-1]], kinds.get(later)):
                break
            chain.append(later)
        starts.setdefault(name, []).append(tuple(chain))
    return [list(found[0]) for found in starts.values() if len(found[0]) > 1 and len(set(found)) == 1]


def _fits(last: str, kind: str | None) -> bool:
    return (kind in NORMS and last in PRODUCERS) or (kind in ACTIVATIONS and last not in ACTIVATIONS)


def check(torch: Any, model: Any, inputs: list[Any], chains: list[list[str]], leaves: dict[str, dict[str, Any]],
          model_file: str) -> list[dict[str, Any]]:
    """Each chain with the reason it is refused (None: extractable): a module okgit cannot
    rebuild, or outputs that change once the chain's op file is swapped in."""
    from okgit.campaign import extract

    records: list[dict[str, Any]] = [{"paths": paths, "refused": None} for paths in chains]
    for r in records:
        bad = next((p for p in r["paths"] if leaves[p].get("refused")), None)
        if bad:
            r["refused"] = f"its module {bad} cannot be extracted: {leaves[bad]['refused']}"
    groups = {id(r): extract.Group(paths=[r["paths"]], infos=[leaves[p] for p in r["paths"]])
              for r in records if not r["refused"]}
    kernels: dict[str, ModuleType] = {}
    for group in groups.values():
        kernel = ModuleType(f"okgit_chain_{group.slug}")
        exec(compile(extract.op_source(group, model_file), f"<{group.slug}>", "exec"), kernel.__dict__)
        kernels[group.slug] = kernel
    live = [r for r in records if id(r) in groups]
    try:
        if live and not _holds(torch, model, inputs, [groups[id(r)] for r in live], kernels.__getitem__):
            for r in live:  # which ones: each alone
                if not _holds(torch, model, inputs, [groups[id(r)]], kernels.__getitem__):
                    r["refused"] = ("swapped in, it changes the model's outputs (its first module's output is read "
                                    "elsewhere too, or changed before the next module reads it)")
    except Exception as e:  # noqa: BLE001 - a model that cannot be copied or run twice: no chain is offered, the profile stands
        for r in live:
            r["refused"] = f"the swap could not be checked on copies of the model: {type(e).__name__}: {e}"[:300]
    return records


def _holds(torch: Any, model: Any, inputs: list[Any], groups: list[Any], load: Callable[[str], Any]) -> bool:
    """Whether copies of the model with and without `groups` swapped in agree through the
    evaluator's modes sequence (a training-mode call, then an eval-mode one, then the state),
    as strictly as the model agrees with itself."""
    from okgit.campaign import swapin

    copies = [copy.deepcopy(model) for _ in range(3)]
    swapin.install(copies[2], [site for g in groups for site in g.sites()], load)
    want, repeat, got = (_sequence(torch, m, inputs) for m in copies)
    return same(torch, got, want) or (not same(torch, repeat, want) and close(torch, got, want))


def _sequence(torch: Any, model: Any, inputs: list[Any]) -> list[Any]:
    with torch.no_grad():
        model.train()
        torch.manual_seed(3)
        trained = model(*inputs)
        model.eval()
        torch.manual_seed(4)
        evaluated = model(*inputs)
    return [trained, evaluated, list(model.state_dict().values())]


def close(torch: Any, a: Any, b: Any) -> bool:
    """Equal within float32 rounding (tensors), else exactly."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(torch, x, y) for x, y in zip(a, b))
    return same(torch, a, b)


def same(torch: Any, a: Any, b: Any) -> bool:
    """Equal bit for bit, with the same shapes and dtypes."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(torch, x, y) for x, y in zip(a, b))
    return bool(a == b)
