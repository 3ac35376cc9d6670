"""Launch settings as a source shows them, found by parsing it (never running it): the module
constants a template writes (`FUSED_ROWS_0_TILE: int = 64`), a launch's keywords
(`kernel[grid](..., BLOCK=128, num_warps=2)`) and the num_warps / num_stages a launch leaves to
Triton's defaults; and a source with one of them changed. What to vary, and in which order, is
okgit.search.proposers.autotune's.

Never a setting: a constant the problem is made of, whatever its name (one that `get_inputs` or
`get_init_inputs` reads: `num_groups = 512` sizes a GroupNorm; on the H200's sweep on 9d7c409
four of L2/75's twelve iterations varied it in the pure-PyTorch reference), and nothing in a
file without a Triton kernel of its own.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace

from okgit.lower.kinds import columns, gemm, grouped_conv, pool, rows

# a template's switch between two paths that is also the size on one of them: its value when switched on
PATHS = {"_ROLL_CHUNK": grouped_conv.ROLL_CHUNK, "_SHARED_ROWS": pool.SHARED_ROWS, "_L2_SHARE": rows.L2_SHARE,
         "_RESIDENT_TILE": columns.RESIDENT_TILE}
BOUND = "_MAX"  # NAME_MAX: the most NAME may be (_constant_sites)
SETTING = re.compile(r"BLOCK|TILE|CHUNK|LANES|WARPS|STAGES|GROUP|PROGRAMS", re.IGNORECASE)
# a GEMM's string settings: the suffix of the name, its control, its values in the order they are tried
CHOICES = {"_PRECISION": ("precision", gemm.TUNED_PRECISIONS), "_STORE": ("store", gemm.STORES)}


@dataclass
class Site:
    """One launch setting in the source and where to write a new value."""

    name: str  # "FUSED_ROWS_0_TILE" or "kernel.BLOCK_SIZE"
    control: str  # what the value sets: block | warps | stages | group | programs | path | switch | precision | store
    value: int | str
    spans: list[tuple[int, int]]  # source offsets holding the value (grid literals included)
    insert_at: int | None = None  # absent keyword: where ", name=value" goes
    keyword: str = ""
    kernel: str = ""
    most: int | None = None  # the source's NAME_MAX beside it: a value above it would run as it anyway
    read_by: frozenset[str] = frozenset()  # a module constant's: the kernels whose launches it sets (_readers)


def control_of(name: str) -> str | None:
    up = name.upper()
    if up.endswith(tuple(PATHS)):  # a template's switch between two paths as well as a size (0: the other path;
        # a long row's persistent grid sized by its share of L2, 0: one program per row block)
        return "path"
    if up.endswith("_PERSISTENT"):  # a GEMM's grid: one program per tile (0) or one per SM walking the tiles (1)
        return "switch"
    if "WARPS" in up:
        return "warps"
    if "STAGES" in up:
        return "stages"
    if "GROUP" in up:
        return "group"
    if "PROGRAMS" in up:
        return "programs"
    if SETTING.search(up):
        return "block"
    return None


class _Offsets:
    """ast (line, byte column) positions to string offsets."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def __call__(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    def span(self, node: ast.expr) -> tuple[int, int]:
        return self(node.lineno, node.col_offset), self.end(node)

    def end(self, node: ast.expr) -> int:
        assert node.end_lineno is not None and node.end_col_offset is not None  # ast.parse sets both
        return self(node.end_lineno, node.end_col_offset)


def _is_jit(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "jit" or isinstance(target, ast.Name) and target.id == "jit":
            return True
    return False


def _is_autotuned(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "autotune" for d in fn.decorator_list)


def _constexprs(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def find_sites(source: str) -> list[Site]:
    """Every launch setting the source exposes: its module constants other than those the
    problem is made of, then each launch's keywords and the num_warps / num_stages a launch
    leaves to Triton's defaults; none where the file has no Triton kernel."""
    tree = ast.parse(source)
    if not any(isinstance(fn, ast.FunctionDef) and _is_jit(fn) for fn in ast.walk(tree)):
        return []
    at = _Offsets(source)
    problem = _problem_names(tree)
    kernels = {fn.name: fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and _is_jit(fn) and not _is_autotuned(fn)}
    launches = _launches(tree, kernels)
    read = _readers(launches)
    sites = [replace(s, read_by=read.get(s.name, frozenset())) for s in _constant_sites(tree, at) if s.name not in problem]
    for fn, call, label in launches:
        sub = call.func
        assert isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name)  # _launches found kernel[grid](...)
        kernel = kernels[sub.value.id]
        sites += _keyword_sites(call, label, kernel, _grid_exprs(fn, sub.slice, call), at)
        sites += _default_sites(call, label, kernel, at)
    return sites


def _readers(launches: list[tuple[ast.FunctionDef, ast.Call, str]]) -> dict[str, frozenset[str]]:
    """Each name's kernels: those whose launch reads it (its arguments, keywords or grid, or a
    local name assigned from it before the launch), else every kernel launched by a function that
    reads it (a GEMM's precision, read by its plan)."""
    direct: dict[str, set[str]] = {}
    within: dict[str, set[str]] = {}
    for fn, call, _ in launches:
        sub = call.func
        assert isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name)  # _launches found kernel[grid](...)
        read = _names(call)
        read |= {name for n in ast.walk(fn) if isinstance(n, ast.Assign) and n.lineno < call.lineno
                 and any(isinstance(t, ast.Name) and t.id in read for t in n.targets) for name in _names(n.value)}
        for name in read:
            direct.setdefault(name, set()).add(sub.value.id)
        for name in _names(fn):
            within.setdefault(name, set()).add(sub.value.id)
    return {name: frozenset(direct.get(name) or kernels) for name, kernels in within.items()}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _problem_names(tree: ast.Module) -> set[str]:
    """The module's names the problem is made of: those `get_inputs` and `get_init_inputs` read,
    and those the module's assignments of such names read in turn (`bias_shape = (out_features, 1)`)."""
    makers = [fn for fn in tree.body if isinstance(fn, ast.FunctionDef) and fn.name in ("get_inputs", "get_init_inputs")]
    names = {name for fn in makers for name in _names(fn)}
    assigned = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    todo = list(names)
    while todo:
        value = assigned.get(todo.pop())
        for n in _names(value) if value is not None else ():
            if n not in names:
                names.add(n)
                todo.append(n)
    return names


def constants(tree: ast.Module) -> list[tuple[str, ast.Constant]]:
    """The module's `NAME = literal` (or `NAME: type = literal`) assignments."""
    found: list[tuple[str, ast.Constant]] = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
            found.append((target.id, node.value))
    return found


def _constant_sites(tree: ast.Module, at: _Offsets) -> list[Site]:
    """Module constants that are launch settings; `NAME_MAX` beside a constant NAME is not one but
    bounds NAME (a template's cap that its launcher applies, such as a window row's lanes: a value
    above it would compile the same kernel again under another name). Without a NAME beside it,
    a `*_MAX` is a setting like any other (the rows kind's BLOCK_N_MAX, the widest row kept whole)."""
    sites = []
    found = constants(tree)
    names = {name for name, _ in found}
    bounds = {name[: -len(BOUND)]: _int(node) for name, node in found
              if name.endswith(BOUND) and name[: -len(BOUND)] in names}
    for name, node in found:
        value, control = _int(node), control_of(name)
        choice = next((c for suffix, c in CHOICES.items() if name.endswith(suffix)), None)
        if name.endswith(BOUND) and name[: -len(BOUND)] in bounds:
            continue
        if value is not None and control is not None and (value > 0 or control in ("path", "switch")):
            sites.append(Site(name, control, value, [at.span(node)], most=bounds.get(name)))
        elif choice is not None and node.value in choice[1]:
            sites.append(Site(name, choice[0], node.value, [at.span(node)]))
    return sites


def _launches(tree: ast.Module, kernels: dict[str, ast.FunctionDef]) -> list[tuple[ast.FunctionDef, ast.Call, str]]:
    """Each `kernel[grid](...)` call of a kernel in `kernels`, in the function that makes it,
    labelled by the kernel's name (`name#2` for its second launch)."""
    seen: dict[str, int] = {}
    found = []
    for fn in (f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)):
        for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call)):
            sub = call.func
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id in kernels:
                kernel = sub.value.id
                seen[kernel] = seen.get(kernel, 0) + 1
                found.append((fn, call, kernel if seen[kernel] == 1 else f"{kernel}#{seen[kernel]}"))
    return found


def _keyword_sites(call: ast.Call, label: str, kernel: ast.FunctionDef, grid: list[ast.AST], at: _Offsets) -> list[Site]:
    """The launch's integer keywords that set num_warps, num_stages or a power-of-two constexpr."""
    constexprs = _constexprs(kernel)
    sites = []
    for kw in call.keywords:
        value = _int(kw.value)
        if value is None or kw.arg is None:
            continue
        control = {"num_warps": "warps", "num_stages": "stages"}.get(kw.arg) or (
            control_of(kw.arg) if kw.arg in constexprs and value & (value - 1) == 0 else None
        )
        if control is None:
            continue
        spans = [at.span(kw.value)]
        if control == "block":  # the same literal in the grid moves with it
            literals = _grid_literals(call, kw.arg, value, grid)
            if literals is None:
                continue
            spans += [at.span(c) for c in literals]
        sites.append(Site(f"{label}.{kw.arg}", control, value, spans, kernel=kernel.name))
    return sites


def _grid_literals(call: ast.Call, keyword: str, value: int, grid: list[ast.AST]) -> list[ast.Constant] | None:
    """The grid's literals equal to block `keyword`'s `value`, which move with it; None where they
    cannot be told from another block's of the same value. Inductor's launchers size each grid
    dim by its own block (`-((xnumel) // -(32)), -((ynumel) // -(32))` for XBLOCK=32, YBLOCK=32):
    a dim naming an axis's numel belongs to that axis's block (XBLOCK: xnumel), so a change of
    one block never moves another's grid dim (which left half an output unwritten, or a grid
    past an unmasked kernel's end: L2/87 on the H200's sweep on 9d7c409)."""
    axis = keyword[0].lower() + "numel" if re.fullmatch(r"[XYZ]BLOCK", keyword) else None
    twins = [kw.arg for kw in call.keywords if kw.arg and kw.arg != keyword and _int(kw.value) == value
             and control_of(kw.arg) == "block"]
    dims = [d for g in grid for d in (g.elts if isinstance(g, ast.Tuple) else [g])]
    found: list[ast.Constant] = []
    for dim in dims:
        literals = [c for c in ast.walk(dim) if isinstance(c, ast.Constant) and _int(c) == value]
        if not literals:
            continue
        numels = {n.id for n in ast.walk(dim) if isinstance(n, ast.Name) and re.fullmatch(r"[xyz]numel", n.id)}
        if numels:  # the dim names its axis: its block's alone (a reduction's R0_BLOCK sizes no dim)
            if axis in numels:
                found += literals
        elif twins:
            return None  # whose literal it is cannot be told
        else:
            found += literals
    return found


def _default_sites(call: ast.Call, label: str, kernel: ast.FunctionDef, at: _Offsets) -> list[Site]:
    """num_warps, and num_stages where the kernel loops, when the launch leaves them to Triton:
    inserted after its last argument."""
    last = (call.keywords[-1].value if call.keywords else call.args[-1]) if (call.keywords or call.args) else None
    if last is None:
        return []
    present = {kw.arg for kw in call.keywords}
    pipelined = any(isinstance(n, ast.For) for n in ast.walk(kernel))
    return [Site(f"{label}.{setting}", control, default, [], insert_at=at.end(last), keyword=setting, kernel=kernel.name)
            for setting, control, default in (("num_warps", "warps", 4), ("num_stages", "stages", 3))
            if setting not in present and (control == "warps" or pipelined)]


def _grid_exprs(fn: ast.FunctionDef, grid: ast.AST, call: ast.Call) -> list[ast.AST]:
    """The grid expression of a launch, following a local name to its last assignment."""
    if isinstance(grid, ast.Name):
        assigns: list[ast.AST] = [
            n.value for n in ast.walk(fn)
            if isinstance(n, ast.Assign) and n.lineno < call.lineno and any(isinstance(t, ast.Name) and t.id == grid.id for t in n.targets)
        ]
        return assigns[-1:]
    return [grid]


def apply(source: str, site: Site, value: int | str) -> str:
    if site.insert_at is not None:
        return source[: site.insert_at] + f", {site.keyword}={value}" + source[site.insert_at :]
    out = source
    text = f'"{value}"' if isinstance(value, str) else str(value)
    for start, end in sorted(site.spans, reverse=True):
        out = out[:start] + text + out[end:]
    return out
