"""A capture (okgit.inductor.capture) made into a standalone op file: pure text, nothing run.

What the file holds, before the model class:
- each Triton kernel as Inductor wrote it, with `@triton.jit` only (no autotuner), under the
  comment that says what it fuses, and a launcher `launch_<kernel>` with the launch settings
  Inductor chose and the grid as expressions of the kernel's sizes;
- Inductor's `call(args)` for each module mode, with its private helpers replaced by plain
  torch calls (`torch.empty_strided`, `Tensor.as_strided`, `torch.mm`, `torch.convolution`, ...);
- `fits_<mode>`: whether the arguments are what the code was compiled for: each tensor's
  shape and strides as expressions of the size symbols (read from the arguments), dtype and
  device, the relations between the sizes that tracing and Inductor relied on, and the module
  attributes and globals baked in.

The forward runs the compiled path where the arguments fit, at any size the symbols take, and
the reference's own forward (renamed `forward_reference`) otherwise, with a warning that says
so (once per set of shapes): a fallback is never silent. A specialised file holds a second
capture compiled with every size static, tried first (`fits_<mode>_static`: exactly the
shapes compiled for), for where Inductor's static kernels differ from its dynamic ones.
Buffers are made on the arguments' device, so that a CPU seed called on the meta device (how
okgit's evaluator asks, launches counted and none run, whether the kernels launch at a shape
too large for the interpreter) takes its compiled path there. No torch.compile, dynamo or Inductor
compilation runs: the kernels' only import from torch._inductor is its runtime library of
Triton helper functions (`triton_helpers`, `libdevice`).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from okgit.lower.graph import Unsupported

HEADER = '''# Kernels seeded from torch.compile (Inductor, {mode} mode): Inductor's own Triton kernels with
# the launch settings its autotuning chose, launched explicitly; no torch.compile at run time.
from torch._inductor.runtime import triton_helpers  # Inductor's Triton helper functions (no compilation)
{libdevice}

aten = torch.ops.aten


def empty_strided(device, size, stride, dtype):
    """A buffer on the arguments' device (Inductor's empty_strided_cuda / _cpu)."""
    return torch.empty_strided(size, stride, dtype=dtype, device=device)


def reinterpret_tensor(t, size, stride, offset):
    """A view of t's storage: Inductor's buffer reuse."""
    return t.as_strided(size, stride, t.storage_offset() + offset)


def fits(t, shape, stride, dtype, devices):
    """Whether tensor t has the shape, strides, dtype and device the kernels were compiled for, and
    no gradient is wanted of it (they compute the forward only)."""
    return (t.shape == shape and t.stride() == stride and t.dtype == dtype and t.device.type in devices
            and not (t.requires_grad and torch.is_grad_enabled()))


def reference_forward(model, *args):
    """The reference's own forward, for arguments the kernels were not compiled for; a warning
    says so, once per set of shapes."""
    shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]
    state = "training" if model.training else "eval"
    warnings.warn(f"{type(model).__name__}: okgit's Inductor kernels do not apply to inputs {shapes} ({state} mode); "
                  "running the original forward", stacklevel=3)
    return model.forward_reference(*args)
'''

_DROPPED = re.compile(r"^\s*(assert_size_stride|assert_alignment)\(|^\s*\w+ = get_raw_stream\(|^\s*torch\.cuda\.set_device\(")
_GUARD = re.compile(r"^(\s*)with torch\.cuda\._DeviceGuard\(\d+\):\s*$")
_RUN = re.compile(r"^(\s*)(\w+)\.run\((.*)\)\s*$")
_EMPTY = re.compile(r"\bempty_strided_(?:cpu|cuda)\(")
# the device types a tensor compiled on a device may be on: a CPU seed also on the meta device, where
# okgit's evaluator calls the op file's own shape to count launches without running them (a GPU
# seed is never called there: a launch on data-less tensors would reach the device)
DEVICES = {"cpu": ("cpu", "meta"), "cuda": ("cuda",)}
_ALLOWED_GLOBALS = {"torch", "aten", "extern_kernels", "empty_strided", "reinterpret_tensor",
                    "math", "inf", "nan", "float", "int", "len", "range", "max", "min"}


LIBDEVICE = {
    "cuda": "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math",
    # Triton's interpreter runs tl.math's functions, not libdevice's extern calls
    "cpu": "libdevice = tl_math = tl.math",
}


def standalone_file(reference: str, cap: dict[str, Any], device: str, mode: str = "default",
                    static: dict[str, Any] | None = None) -> str:
    """The reference file with the captured kernels inserted and Model's forward dispatching to
    them; with `static`, a capture of the same reference with every size static, whose kernels
    are taken first where the arguments are exactly the ones it was compiled for."""
    tree = ast.parse(reference)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    model = classes.get("Model")
    if model is None or "ModelNew" in classes:
        raise Unsupported("the Inductor seed rewrites a file whose reference is Model (no ModelNew)")
    fwd = next((f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if fwd is None or fwd.args.vararg or fwd.args.kwarg or fwd.args.kwonlyargs:
        raise Unsupported("Model.forward takes *args, **kwargs or keyword-only arguments")
    names = [a.arg for a in fwd.args.args][1:]
    if names != cap["forward_args"]:
        raise Unsupported("Model.forward's arguments differ from the traced ones")

    header = HEADER.replace("{libdevice}", LIBDEVICE[device]).replace("{mode}", mode)
    paths = ([(f"{g['mode']}_static", g) for g in static["graphs"]] if static else []) + [(g["mode"], g) for g in cap["graphs"]]
    blocks = [header, _externs({**cap["externs"], **(static["externs"] if static else {})},
                               {**cap.get("helpers", {}), **(static.get("helpers", {}) if static else {})})]
    for suffix, graph in paths:
        for k in graph["kernels"]:
            blocks.append(_kernel_text(k, suffix))
        blocks.append(_call_text(graph, suffix))
        blocks.append(_fits_text(graph, suffix, names))
    lines = reference.splitlines()
    start = (fwd.decorator_list[0].lineno if fwd.decorator_list else fwd.lineno) - 1
    end = fwd.end_lineno
    assert end is not None
    original = lines[start:end]
    renamed = [re.sub(r"\bdef forward\(", "def forward_reference(", original[0], count=1), *original[1:]]
    lines[start:end] = _forward_text(paths, names, fwd.col_offset).splitlines() + [""] + renamed
    first = min(c.lineno - len(c.decorator_list) for c in classes.values() if c.name == "Model") - 1
    lines[first:first] = "\n\n\n".join(b.strip("\n") for b in blocks if b).splitlines() + ["", ""]
    imported = {a.asname or a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    wanted = [("import warnings", "warnings"), ("import torch", "torch"), ("import triton", "triton"),
              ("import triton.language as tl", "tl")]
    missing = [line for line, name in wanted if name not in imported]
    after = max((n.end_lineno or 0 for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and (n.end_lineno or 0) <= first), default=0)
    lines[after:after] = missing
    return "\n".join(lines) + "\n"


def _externs(externs: dict[str, str], helpers: dict[str, str]) -> str:
    if not externs:
        return ""
    items = ", ".join(f"{name}={public}" for name, public in sorted(externs.items()))
    own = "".join(f"\n\n# Inductor's own {name}, as it calls it\n{source}\n" for name, source in sorted(helpers.items()))
    return (f"# the vendor calls (cuBLAS, cuDNN) Inductor left to PyTorch\nfrom types import SimpleNamespace  # noqa: E402\n"
            f"{own}\n\nextern_kernels = SimpleNamespace({items})")


def _kernel_text(k: dict[str, Any], suffix: str) -> str:
    """The kernel's helpers and jit function without Inductor's autotuner, and its launcher."""
    tree = ast.parse(k["source"])
    lines = k["source"].splitlines()
    name = k["name"]
    new = f"{name}_{suffix}"
    parts = []
    renames = {name: new}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            renames.setdefault(node.name, f"{new}_{node.name.lstrip('_')}")
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        decorators = [ast.unparse(d) for d in node.decorator_list]
        if decorators[-1:] != ["triton.jit"] or any(not d.startswith("triton_heuristics.") for d in decorators[:-1]):
            raise Unsupported(f"{name}: a kernel function with decorators {decorators}")
        text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
        parts.append("@triton.jit\n" + _rename(text, renames))
    params = [a.arg for a in next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name).args.args]
    positional = [p for p in params if p not in k["kwargs"]]
    grid_args = k.get("grid_args", [])
    settings = ", ".join([f"{key}={v}" for key, v in k["kwargs"].items()] + [f"num_warps={k['num_warps']}", f"num_stages={k['num_stages']}"])
    # the grid inline in the launch when it is one expression, so autotune changes a block size
    # and the grid that derives from it together
    *prefix, last = k["grid"]
    grid = last.removeprefix("grid = ") if not prefix else "grid"
    body = "".join(f"    {line}\n" for line in (k["grid"] if prefix else []))
    launcher = (f"def launch_{new}({', '.join(positional + grid_args)}):\n"
                f"{body}    {new}[{grid}]({', '.join(positional)}, {settings})")
    comment = k["comment"] or f"# {name}"
    return comment + "\n" + "\n\n\n".join(parts + [launcher])


def _rename(text: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    return text


def _call_text(graph: dict[str, Any], suffix: str) -> str:
    """Inductor's call(args) body as a plain function: private guards and stream lookups dropped,
    buffers made on the arguments' device, kernel launches through the launchers."""
    kernels = {k["name"] for k in graph["kernels"]}
    what = graph["assumed"]
    if not what["tensors"]:
        raise Unsupported("a compiled graph without a tensor argument")
    out = [f"    args_device = args[{what['args'].index(what['tensors'][0]['expr'])}].device"]
    lines = graph["body"].splitlines()
    indent0 = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    dedent = 0  # inside a dropped `with` block
    guard_indent = None
    for raw in lines:
        if not raw.strip():
            continue
        level = len(raw) - len(raw.lstrip())
        if guard_indent is not None and level <= guard_indent:
            guard_indent, dedent = None, 0
        if m := _GUARD.match(raw):
            guard_indent, dedent = level, 4
            continue
        if _DROPPED.match(raw):
            continue
        line = raw[indent0 + dedent :] if level >= indent0 + dedent else raw.lstrip()
        if m := _RUN.match(line):
            pre, name, args = m.groups()
            if name not in kernels:
                raise Unsupported(f"the wrapper launches {name}, which it does not define as a Triton kernel")
            call = ast.parse(f"f({args})", mode="eval").body
            assert isinstance(call, ast.Call)
            line = f"{pre}launch_{name}_{suffix}({', '.join(ast.unparse(a) for a in call.args)})"
        out.append("    " + _EMPTY.sub("empty_strided(args_device, ", line))
    text = f"def call_{suffix}(args):\n" + "\n".join(out)
    _check_globals(text, {f"launch_{k}_{suffix}" for k in kernels})
    return text


def _check_globals(text: str, launchers: set[str]) -> None:
    """Every name the body reads is its own, a launcher or one the header defines."""
    fn = ast.parse(text).body[0]
    assert isinstance(fn, ast.FunctionDef)
    stored = {a.arg for a in fn.args.args}
    stored |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    loaded = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unknown = loaded - stored - launchers - _ALLOWED_GLOBALS
    if unknown:
        raise Unsupported(f"the wrapper uses {', '.join(sorted(unknown))}, which a standalone file lacks")


def _forward_text(paths: list[tuple[str, dict[str, Any]]], names: list[str], col: int) -> str:
    """The forward: the first compiled path whose arguments fit, in each module mode."""
    pad = " " * col
    params = ", ".join(["self", *names])
    lines = [f"def forward({params}):",
             '    """The kernels above where the arguments fit what they were compiled for; the reference\'s',
             '    own forward otherwise, said in a warning."""']
    if all(g["mode"] == "any" for _, g in paths):
        lines += _dispatch(paths, params, "    ")
    else:
        for branch, test in (("train", "if self.training:"), ("eval", "else:")):
            lines.append(f"    {test}")
            lines += _dispatch([(s, g) for s, g in paths if g["mode"] in (branch, "any")], params, "        ")
    lines.append(f"    return reference_forward({params})")
    return "\n".join(pad + line if line else line for line in lines)


def _dispatch(paths: list[tuple[str, dict[str, Any]]], params: str, pad: str) -> list[str]:
    out = []
    for suffix, graph in paths:
        args = ", ".join(graph["assumed"]["args"])
        ret = "tuple(outs)" if graph["tuple_output"] else "outs[0]"
        out += [f"{pad}if fits_{suffix}({params}):", f"{pad}    outs = call_{suffix}([{args}])", f"{pad}    return {ret}"]
    return out


def _fits_text(graph: dict[str, Any], suffix: str, names: list[str]) -> str:
    """`fits_<mode>`: the arguments' ranks, then the size symbols read from them, then every
    tensor's shape, strides, dtype and device, the relations between the sizes and the constants."""
    what = graph["assumed"]
    params = ", ".join(["self", *names])
    ranks = ", ".join(f"({t['expr']}, {t['ndim']})" for t in what["tensors"])
    lines = [f"def fits_{suffix}({params}):",
             f'    """Whether call_{suffix} applies: the shapes, strides, dtypes and devices it was compiled for,',
             '    its sizes free where the relations Inductor relied on hold, and the constants it baked in."""',
             f"    if not all(isinstance(t, torch.Tensor) and t.dim() == n for t, n in ({ranks}{',' if len(what['tensors']) == 1 else ''})):",
             "        return False"]
    lines += [f"    {sym} = {expr}" for sym, expr in what["symbols"].items()]
    checks = [f"fits({t['expr']}, {_tuple(t['shape'])}, {_tuple(t['stride'])}, {t['dtype']}, {DEVICES.get(t['device'], (t['device'],))!r})"
              for t in what["tensors"]]
    checks += what["relations"]
    checks += [f"{expr} == {_tuples(value)!r}" for expr, value in what["constants"].items()]
    lines.append("    return (")
    lines += [f"        {'and ' if j else ''}{c}" for j, c in enumerate(checks)] or ["        True"]
    lines.append("    )")
    return "\n".join(lines)


def _tuples(value: Any) -> Any:
    """JSON's lists back to the tuples module attributes hold (a stride of (1, 1) is a tuple)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
