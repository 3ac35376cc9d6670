"""A model's leaf modules as KernelBench op files, and the package that swaps the winners back in.

An op file holds one module, rebuilt from the constructor arguments the probe read back and
checked (okgit.campaign.probe), as `self.layer` of its `Model`, with `get_inputs()` drawing
the shapes and dtypes of the module's first call in the model. Modules of the same class,
arguments and inputs (the blocks of a transformer) are one problem.

The package `okgit_<model>/` holds each winner as it was tagged, and `swap_in`, which the model
file applies to its `Model`: after the model's own constructor, every listed module keeps its
parameters and buffers (the state dict is unchanged), and its forward becomes the winner's,
built from the same arguments and holding the original module as `layer`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def package_name(model_file: str) -> str:
    """`okgit_<stem>`: an importable name even for `44_MiniGPTBlock.py`."""
    return "okgit_" + re.sub(r"\W", "_", Path(model_file).stem)


@dataclass
class Group:
    """Leaf modules that are one problem: same class, constructor arguments, dtype and inputs."""

    paths: list[str]
    info: dict[str, Any]  # the first one's probe record
    time_us: float = 0.0  # all of them, per model call
    share: float = 0.0
    rows: list[str] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return re.sub(r"\W", "_", self.paths[0]).strip("_") or "module"

    @property
    def label(self) -> str:
        return ", ".join(self.paths)


def groups(found: dict[str, Any]) -> tuple[list[Group], dict[str, str]]:
    """Extractable modules grouped and ranked by their time in the model; and the modules that
    took time but are refused, with why."""
    by_key: dict[str, Group] = {}
    refused: dict[str, str] = {}
    for row in found["rows"]:
        if row["kind"] != "module":
            continue
        info = found["leaves"][row["name"]]
        if info.get("refused"):
            refused[row["name"]] = info["refused"]
            continue
        key = json.dumps([info["type"], info["ctor"], info["param_dtype"], info["inputs"]])
        group = by_key.setdefault(key, Group(paths=[], info=info))
        group.paths.append(row["name"])
        group.time_us += row["time_us"]
        group.share += row["share"]
    return sorted(by_key.values(), key=lambda g: -g.time_us), refused


def op_source(group: Group, model: str) -> str:
    info = group.info
    args = ", ".join(info["ctor_names"] or [])
    cast = f".to({_dtype(info['param_dtype'])})" if info["param_dtype"] not in (None, "float32") else ""
    params = ", ".join(f"x{i}" for i in range(len(info["inputs"])))
    lines = [
        f'"""{info["class"]} module {group.label} of {model}, as an op file (extracted by okgit).',
        "",
        "The inputs have the shapes and dtypes of its first call in the model; the constructor",
        "arguments are the module's own. A faster Model here can replace the module's forward.",
        '"""',
        "import torch",
        "import torch.nn as nn",
        "",
        "",
        "class Model(nn.Module):",
        f"    def __init__(self{', ' + args if args else ''}):",
        "        super().__init__()",
        f"        self.layer = nn.{info['class']}({args}){cast}",
        "",
        f"    def forward(self, {params}):",
        f"        return self.layer({params})",
        "",
        "",
        "def get_inputs():",
        f"    return [{', '.join(_draw(spec) for spec in info['inputs'])}]",
        "",
        "",
        "def get_init_inputs():",
        f"    return {info['ctor']!r}",
    ]
    return "\n".join(lines) + "\n"


def _dtype(name: str) -> str:
    return f"torch.{name}"


def _draw(spec: dict[str, Any]) -> str:
    shape = ", ".join(map(str, spec["shape"])) or ""
    size = f"({shape},)" if len(spec["shape"]) == 1 else f"({shape})"
    if spec["dtype"] == "bool":
        return f"torch.rand{size} < 0.5"
    if "low" in spec:
        return f"torch.randint({spec['low']}, {spec['high'] + 1}, {size}, dtype={_dtype(spec['dtype'])})"
    return f"torch.randn({size}, dtype={_dtype(spec['dtype'])})"


def package_init(campaign_id: str, model: str, sites: dict[str, tuple[str, str, list[Any], dict[str, list[int]]]]) -> str:
    """`okgit_<model>/__init__.py`: the sites and `swap_in`."""
    table = "\n".join(f"    {path!r}: {site!r}," for path, site in sites.items())
    return f'''"""Kernels okgit campaign {campaign_id} found for {model}'s modules; `swap_in` puts them in place.

Each module listed in SITES keeps its parameters and buffers (the model's state dict does not
change); its forward becomes the kernel module's Model, built from the same constructor
arguments and holding the original module as `layer`. A module whose class or parameter
shapes differ from those the kernel was found for is left as it is.
"""

import functools
import importlib

# module path -> (kernel module, class, constructor arguments, parameter and buffer shapes)
SITES = {{
{table}
}}


def swap_in(cls):
    """`cls` (the model's class) with the kernels put in place after its own constructor."""
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        for path, (name, kind, init, shapes) in SITES.items():
            try:
                module = self.get_submodule(path)
            except AttributeError:
                continue
            if type(module).__name__ != kind or {{k: list(v.shape) for k, v in module.state_dict().items()}} != shapes:
                continue
            kernel = importlib.import_module(f"{{__name__}}.{{name}}")
            fast = getattr(kernel, "ModelNew", kernel.Model)(*init)
            if set(fast.state_dict()) != {{"layer." + k for k in module.state_dict()}}:
                raise RuntimeError(f"okgit: the kernel for {{path}} does not hold the module's parameters as layer")
            fast.layer = module  # the model's own parameters, not the kernel module's fresh ones
            module.forward = fast.forward

    cls.__init__ = __init__
    return cls
'''


def model_hook(campaign_id: str, package: str) -> str:
    """The lines appended to the user's model file."""
    return (f"\n\n# okgit campaign {campaign_id}: faster kernels for some modules' forward ({package}/).\n"
            f"try:  # the model imported from a package, or run as a script\n"
            f"    from .{package} import swap_in as _okgit_swap_in  # noqa: E402\n"
            f"except ImportError:\n"
            f"    from {package} import swap_in as _okgit_swap_in  # noqa: E402\n\n"
            f"Model = _okgit_swap_in(Model)\n")
