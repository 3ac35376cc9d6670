"""The op-file contract (README.md, "The op file"), checked statically; nothing here runs user code.

An op file is a KernelBench-style module: `Model(nn.Module)`, `get_inputs()`,
`get_init_inputs()`. If it also defines `ModelNew`, that is the implementation under
optimization and `Model` the reference. A candidate file is evaluated through `ModelNew`
when it defines one, else through `Model`; inputs always come from the reference.
"""

from __future__ import annotations

import ast
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from okgit.errors import OkgitError
from okgit.registry import Registry

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
# A candidate must hold for every Model(...), not only the default one: the evaluator's
# init_inputs case builds both models from constructor floats times this, and the lowering
# checks that every constant it binds follows them (README.md, "The op file").
INIT_FLOAT_FACTOR = 1.5


@dataclass(frozen=True)
class Problem:
    path: str  # as the user knows it (repository-relative in a run)
    source: str  # the reference, frozen at the base
    root: str | None = None  # directory put on sys.path for the reference's own imports
    candidate_root: str | None = None  # the same for candidates, when their siblings differ (verify)
    knobs: dict[str, int] = field(default_factory=dict)  # module-level integer globals
    atol: float | None = None  # tolerance overrides from okgit.toml; None = per-dtype rules
    rtol: float | None = None
    extra_shapes: tuple[tuple[tuple[str, int], ...], ...] | None = None

    @property
    def name(self) -> str:
        return Path(self.path).stem


def top_level_names(source: str, path: str = "<op>") -> set[str]:
    tree = _parse(source, path)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def shape_knobs(source: str, path: str = "<op>") -> dict[str, int]:
    """Module-level `name = <int>` assignments: the knobs that set the problem's shapes."""
    knobs: dict[str, int] = {}
    for name, node in _knob_assignments(_parse(source, path)):
        value = node.value  # _knob_assignments keeps integer constants only
        assert isinstance(value, ast.Constant) and isinstance(value.value, int)
        knobs[name] = value.value
    return knobs


def with_knobs(source: str, path: str, knobs: dict[str, int]) -> ast.Module:
    """The op file's syntax tree with its knob assignments set to `knobs`: executed, every global
    derived from a knob (`bias_shape = (out_channels, 1, 1)`) follows it."""
    tree = _parse(source, path)
    for name, node in _knob_assignments(tree):
        if name in knobs:
            node.value = ast.copy_location(ast.Constant(knobs[name]), node.value)
    return tree


def _knob_assignments(tree: ast.Module) -> list[tuple[str, ast.Assign]]:
    return [
        (node.targets[0].id, node)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
        and type(node.value.value) is int
    ]


def load_problem(path: str | Path, source: str | None = None, root: str | None = None) -> Problem:
    """Read and statically check an op file; one clear OkgitError if it breaks the contract."""
    p = Path(path)
    if source is None:
        if not p.is_file():
            raise OkgitError(f"{path}: no such file")
        source = p.read_text()
    names = top_level_names(source, str(path))
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        raise OkgitError(f"{path}: not an op file: missing {', '.join(missing)} (see README.md, 'The op file')")
    return Problem(path=str(path), source=source, root=root, knobs=shape_knobs(source, str(path)))


_AST_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, one thread at a time: CPython 3.11 can fail with "SystemError: AST constructor
    recursion depth mismatch" when threads parse at once (its AST state's depth counter is shared:
    python/cpython#106905), as a PoolEvaluator's slots do; CI saw it in tests/eval/test_pool.py."""
    with _AST_LOCK:
        return ast.parse(source, filename=filename)


def _parse(source: str, path: str) -> ast.Module:
    try:
        return parse_python(source, path)
    except SyntaxError as e:
        raise OkgitError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None


def perturb_floats(init: list[Any], names: list[str] | None = None) -> tuple[list[Any], list[str]]:
    """The constructor arguments of the evaluator's init_inputs case, and the ones the lowering
    checks its bindings against (okgit.lower.binding): every float (a Python float or a
    subclass such as numpy.float64, top level and inside lists/tuples) times INIT_FLOAT_FACTOR;
    ints, bools, tensors and strings unchanged (ints are usually sizes, which the shape knobs
    already vary). Returns (new arguments, one line per
    changed value, e.g. 'temperature=1.05 (was 0.7)'); no lines: nothing to perturb."""
    changes: list[str] = []

    def walk(obj: Any, where: str) -> Any:
        if isinstance(obj, float):
            new = obj * INIT_FLOAT_FACTOR
            if math.isfinite(obj) and new != obj:  # 0.0, inf and nan stay what they are
                changes.append(f"{where}={_short(new)} (was {_short(obj)})")
            return new
        if type(obj) in (list, tuple):  # not a namedtuple or other subclass: rebuilt as it was
            return type(obj)(walk(o, f"{where}[{j}]") for j, o in enumerate(obj))
        return obj

    names = names or []
    out = [walk(x, names[i] if i < len(names) else f"argument {i}") for i, x in enumerate(init)]
    return out, changes


def _short(x: float) -> str:
    return repr(float(f"{x:.6g}"))


# The op's work: the fewest FLOPs it needs, by the exact rewrites the registered work models know
# (the roofline floor's, docs/evaluation.md "The op's work"). Declared here, below both the judge
# that reads it and the lowering that fills it (okgit.lower.work, its built-in, imported when the
# registry is first read): the evaluator never imports the lowering.
WorkModel = Callable[[str, dict[str, int], float], "tuple[float, list[str]]"]
WORK_MODELS: Registry[WorkModel] = Registry("work model", "okgit.work_models", builtins="okgit.lower.work")


def least_work(source: str, knobs: dict[str, int], counted: float) -> tuple[float, list[str]]:
    """The fewest FLOPs the op at these knobs needs, from its `counted` ones (torch's count of the
    reference as written), and the rewrites that give it: the least over the work models."""
    best, names = counted, []
    for entry in WORK_MODELS.entries():
        flops, rewrites = entry.factory(source, knobs, counted)
        if flops < best:
            best, names = flops, rewrites
    return best, names
