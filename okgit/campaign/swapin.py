"""Kernels put in place of a model's modules: the runtime of the `okgit_<model>/` package.

A model campaign copies this file's code, from `import` on, verbatim into the package it writes
beside the model (okgit.campaign.extract.package_init), so the patched model needs nothing of
okgit; the probe (okgit.campaign.probe) runs the same code on the extracted op files
themselves before any search, so a module or chain that cannot be swapped in is refused then.

A site is one module, or one chain of modules that run one after another on each other's
output (a Linear and its activation, a convolution, its norm and its activation). Its kernel
module's `Model` (or `ModelNew`) holds the site's modules as `layer` (one module) or `layer0`,
`layer1`, ... (a chain). After `install`, every module keeps its parameters and buffers (the
model's state dict does not change); the first module's forward becomes the kernel's, and each
later module of a chain hands back, untouched, the output the kernel just made for it (any
other input it computes as before: an activation module may be shared by several sites).
A site whose classes or parameter shapes differ from those its kernel was found for is left
as it is. Only the standard library is imported.
"""

import functools
import weakref
from typing import Any, Callable

Site = tuple[str, list[Any], list[tuple[str, str, dict[str, list[int]]]]]


def layer_names(count: int) -> list[str]:
    """The attributes that hold a site's modules in its kernel module."""
    return ["layer"] if count == 1 else [f"layer{i}" for i in range(count)]


def install(model: Any, sites: list[Site], load: Callable[[str], Any]) -> list[str]:
    """Put the kernels in place in `model`. `sites`: (kernel name, constructor arguments,
    [(module path, class name, {state name: shape})]) per site; `load(name)`: that kernel's
    module. Returns the paths of the sites swapped in."""
    pending: dict[str, Any] = {}  # the output a chain's kernel made, and the modules that still hand it back
    swapped: list[str] = []
    wrapped: set[int] = set()
    for name, init, members in sites:
        modules = [_module(model, path, kind, shapes) for path, kind, shapes in members]
        if any(m is None for m in modules):
            continue
        kernel = load(name)
        fast = (getattr(kernel, "ModelNew", None) or kernel.Model)(*init)
        names = layer_names(len(modules))
        expected = {f"{n}.{k}" for n, m in zip(names, modules) for k in m.state_dict()}
        if set(fast.state_dict()) != expected:
            raise RuntimeError(f"okgit: the kernel {name} does not hold the modules of {members[0][0]} as {', '.join(names)}")
        for n, m in zip(names, modules):
            setattr(fast, n, m)  # the model's own parameters, not the kernel module's fresh ones
        modules[0].forward = _first(fast, modules, pending)
        for m in modules[1:]:
            if id(m) not in wrapped:  # once, whichever chains it closes
                wrapped.add(id(m))
                m.forward = _later(m, m.forward, pending)
        swapped.append("+".join(path for path, _, _ in members))
    return swapped


def _module(model: Any, path: str, kind: str, shapes: dict[str, list[int]]) -> Any:
    try:
        module = model.get_submodule(path)
    except AttributeError:
        return None
    if type(module).__name__ != kind or {k: list(v.shape) for k, v in module.state_dict().items()} != shapes:
        return None
    return module


def _first(fast: Any, modules: list[Any], pending: dict[str, Any]) -> Callable[..., Any]:
    original = modules[0].forward
    busy: list[bool] = []  # the kernel module calling the module itself (a reference path): the module's own forward

    @functools.wraps(original)
    def forward(*args: Any) -> Any:
        if busy:
            return original(*args)
        fast.training = modules[0].training  # the kernel module is not the model's child: its mode follows
        busy.append(True)
        try:
            out = fast.forward(*args)
        finally:
            busy.pop()
        pending.clear()
        if len(modules) > 1:
            pending.update(out=weakref.ref(out), rest=list(modules[1:]))
        return out

    return forward


def _later(module: Any, original: Callable[..., Any], pending: dict[str, Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def forward(*args: Any) -> Any:
        rest = pending.get("rest")
        if rest and rest[0] is module and len(args) == 1 and pending["out"]() is args[0]:
            rest.pop(0)
            if not rest:
                pending.clear()
            return args[0]  # the chain's kernel already applied this module
        return original(*args)

    return forward
