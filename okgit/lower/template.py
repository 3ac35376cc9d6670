"""Template texts and their rendering.

A template text is a `*.py.tmpl` file beside the module that renders it (a kind's kernels in
okgit/lower/kinds, the kernel code's helpers in okgit/lower), found as package data so that
an installed okgit and a Modal image carry it.
"""

from __future__ import annotations

import re
import sys
from importlib import resources
from string import Template
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable


def template(package: str, name: str) -> Traversable:
    """The template file `name` of `package` (a module's `__package__`)."""
    return resources.files(package) / name


def fill(text: Traversable, **params: str) -> str:
    """A template with its $params; a placeholder alone on a line takes a block, indented."""
    out: list[str] = []
    for line in text.read_text().splitlines():
        m = re.fullmatch(r"(\s*)\$\{?(\w+)\}?", line)
        if m and m.group(2) in params:
            out.extend(m.group(1) + b if b else b for b in params[m.group(2)].splitlines())
        else:
            out.append(Template(line).substitute(params))
    return "\n".join(out)
