"""A model's leaf modules and fusable chains as KernelBench op files, and the package that swaps
the winners back in.

An op file holds one module, or one chain of modules that run one after another on each other's
output (a Linear and its activation, a convolution, its norm and its activation: found and
checked by okgit.campaign.probe), each rebuilt from the constructor arguments the probe read back,
as `self.layer` (one module) or `self.layer0`, `self.layer1`, ... (a chain) of its `Model`, with
`get_inputs()` drawing the shapes and dtypes of the first module's first call in the model.
Sites of the same classes, arguments and inputs (the blocks of a transformer) are one problem.

The package `okgit_<model>/` holds each winner as it was tagged, the sites, and the runtime of
okgit.campaign.swapin (copied in, so the patched model needs nothing of okgit), which the model
file applies to its `Model` after the model's own constructor.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from okgit.campaign import swapin


def package_name(model_file: str) -> str:
    """`okgit_<stem>`: an importable name even for `44_MiniGPTBlock.py`."""
    return "okgit_" + re.sub(r"\W", "_", Path(model_file).stem)


@dataclass
class Group:
    """Sites that are one problem: each one module, or one chain, of the same classes, constructor
    arguments, dtype and inputs."""

    paths: list[list[str]]  # per site, its module paths (one for a lone module)
    infos: list[dict[str, Any]]  # the first site's modules' probe records
    time_us: float = 0.0  # all of them, per model call
    share: float = 0.0
    rows: list[str] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return re.sub(r"\W", "_", "+".join(self.paths[0])).strip("_") or "module"

    @property
    def label(self) -> str:
        return ", ".join("+".join(site) for site in self.paths)

    @property
    def init(self) -> list[Any]:
        """The op file's constructor arguments: every module's, in order."""
        return [value for info in self.infos for value in info["ctor"]]

    def sites(self) -> list[swapin.Site]:
        return [(self.slug, self.init, [(path, info["class"], info["shapes"]) for path, info in zip(site, self.infos)])
                for site in self.paths]


def groups(found: dict[str, Any]) -> tuple[list[Group], dict[str, str]]:
    """The extractable chains and lone modules, grouped and ranked by their time in the model;
    and the modules and chains that took time but are refused, with why. A module in a chain
    is not offered alone as well: the chain's kernel stands for it."""
    leaves = found["leaves"]
    modules = {r["name"]: r for r in found["rows"] if r["kind"] == "module"}
    total = sum(r["time_us"] for r in found["rows"]) or 1.0
    by_key: dict[str, Group] = {}
    refused: dict[str, str] = {}

    def add(site: list[str], time_us: float) -> None:
        infos = [leaves[p] for p in site]
        key = json.dumps([[i["type"], i["ctor"], i["param_dtype"], i["inputs"]] for i in infos])
        group = by_key.setdefault(key, Group(paths=[], infos=infos))
        group.paths.append(site)
        group.time_us += time_us
        group.share += time_us / total

    chained: set[str] = set()
    for chain in found.get("chains") or []:
        if chain.get("refused"):
            refused["+".join(chain["paths"])] = chain["refused"]
            continue
        # a module's time per call (a shared activation's row holds every call of it)
        add(chain["paths"], sum(modules[p]["time_us"] / max(1, modules[p]["calls"]) for p in chain["paths"] if p in modules))
        chained.update(chain["paths"])
    for name, row in modules.items():
        if name in chained:
            continue
        if leaves[name].get("refused"):
            refused[name] = leaves[name]["refused"]
            continue
        add([name], row["time_us"])
    return sorted(by_key.values(), key=lambda g: -g.time_us), refused


def op_source(group: Group, model: str) -> str:
    count = len(group.infos)
    names = swapin.layer_names(count)
    suffix = [""] if count == 1 else [str(i) for i in range(count)]
    args = [[f"{a}{suffix[i]}" for a in info["ctor_names"] or []] for i, info in enumerate(group.infos)]
    every = ", ".join(a for member in args for a in member)
    params = ", ".join(f"x{i}" for i in range(len(group.infos[0]["inputs"])))
    classes = [info["class"] for info in group.infos]
    what = (f"{classes[0]} module {group.label}" if count == 1 else
            f"{', '.join(classes[:-1])} and {classes[-1]} modules {group.label} (a chain: each runs on the one before's output)")
    lines = [
        f'"""{what} of {model}, as an op file (extracted by okgit).',
        "",
        "The inputs have the shapes and dtypes of its first call in the model; the constructor",
        "arguments are the modules' own. A faster Model here can replace the forward there.",
        '"""',
        "import torch",
        "import torch.nn as nn",
        "",
        "",
        "class Model(nn.Module):",
        f"    def __init__(self{', ' + every if every else ''}):",
        "        super().__init__()",
    ]
    for name, info, member in zip(names, group.infos, args):
        cast = f".to({_dtype(info['param_dtype'])})" if info["param_dtype"] not in (None, "float32") else ""
        given = [f"{n}={a}" if n in info.get("ctor_keywords", []) else a for n, a in zip(info["ctor_names"] or [], member)]
        lines.append(f"        self.{name} = nn.{info['class']}({', '.join(given)}){cast}")
    lines += ["", f"    def forward(self, {params}):"]
    if count == 1:
        lines.append(f"        return self.layer({params})")
    else:
        lines.append(f"        x = self.{names[0]}({params})")
        lines += [f"        x = self.{name}(x)" for name in names[1:]]
        lines.append("        return x")
    lines += [
        "",
        "",
        "def get_inputs():",
        f"    return [{', '.join(_draw(spec) for spec in group.infos[0]['inputs'])}]",
        "",
        "",
        "def get_init_inputs():",
        f"    return {group.init!r}",
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


def package_init(campaign_id: str, model: str, sites: list[swapin.Site]) -> str:
    """`okgit_<model>/__init__.py`: the sites, okgit.campaign.swapin's runtime, and `swap_in`."""
    table = "\n".join(f"    {site!r}," for site in sites)
    runtime = Path(swapin.__file__).read_text()
    runtime = runtime[runtime.index("\nimport ") + 1:]  # its code, without okgit's docstring
    return f'''"""Kernels okgit campaign {campaign_id} found for {model}'s modules; `swap_in` puts them in place.

Each site below keeps its modules' parameters and buffers (the model's state dict does not
change); the first module's forward becomes the kernel module's, which holds the modules as
`layer` (one module) or `layer0`, `layer1`, ... (a chain of modules that run one after another:
the later ones hand the kernel's output back untouched). A site whose classes or parameter
shapes differ from those the kernel was found for is left as it is.
"""

import importlib
{runtime}

# (kernel module, constructor arguments, [(module path, class, parameter and buffer shapes)]) per site
SITES = [
{table}
]


def swap_in(cls):
    """`cls` (the model's class) with the kernels put in place after its own constructor."""
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        install(self, SITES, lambda name: importlib.import_module(f"{{__name__}}.{{name}}"))

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
