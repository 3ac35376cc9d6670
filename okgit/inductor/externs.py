"""The vendor calls Inductor leaves to PyTorch (`extern_kernels.<name>` in its wrapper): each as
the public torch function it is, or, where Inductor calls a function of its own, that function's
source for the standalone file, where it reads no global but torch. A call that is neither
raises ValueError, which says why.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any


def note_externs(body: str, externs: dict[str, str], helpers: dict[str, str]) -> None:
    """The public torch function behind each extern_kernels.<name> the body calls, or, where Inductor
    calls a function of its own, that function's source (`helpers`) where it reads no global but
    torch (max-autotune's bias_addmm: torch.addmm given a broadcast bias as 1D, L2/75 on 9d7c409)."""
    import torch
    from torch._inductor.select_algorithm import extern_kernels

    for name in sorted(set(re.findall(r"\bextern_kernels\.(\w+)\(", body))):
        fn = getattr(extern_kernels, name, None)
        public = next((f"torch.{attr}" for attr in (name, getattr(fn, "__name__", ""))
                       if fn is not None and attr and getattr(torch, attr, None) is fn), None)
        if public is None:
            public = f"_extern_{name}"
            helpers[name] = _own_function(name, fn, public)
        externs[name] = public


def _own_function(extern: str, fn: Any, name: str) -> str:
    """`fn`'s source as a function called `name`; ValueError unless its only global is torch."""
    import builtins
    import inspect

    try:
        (tree,) = ast.parse(textwrap.dedent(inspect.getsource(fn))).body
    except (OSError, TypeError, SyntaxError, ValueError):
        tree = None
    if not isinstance(tree, ast.FunctionDef) or tree.decorator_list:
        raise ValueError(f"extern kernel {extern} has no public torch function")
    bound = {a.arg for a in ast.walk(tree.args) if isinstance(a, ast.arg)}
    bound |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    free = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound - set(dir(builtins))
    if free - {"torch"}:
        raise ValueError(f"extern kernel {extern} reads {', '.join(sorted(free - {'torch'}))} besides torch")
    tree.name = name
    return ast.unparse(tree)
