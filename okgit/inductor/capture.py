"""What Inductor makes of the reference, captured in a child process (`python -m okgit.inductor`).

The reference is built at its default knobs on the device, exported with torch.export (one
graph per module mode where the modes differ) and compiled by Inductor (default mode, the
evaluator's pinned library flags). What is kept is plain data for okgit.inductor.standalone:
the wrapper's `call` body, each Triton kernel's source with the launch settings Inductor chose
and its grid as expressions of the kernel's sizes, the placeholders in order (parameters and
buffers by name, then the forward's inputs), the shapes, strides and dtypes the code was
specialised to, the module attributes it baked in, and the public torch function behind each
`extern_kernels` call.

On a GPU Inductor's own autotuning chooses among its configs (the compiled graph is run once).
On a CPU Inductor is asked for Triton code (`cpu_backend = "triton"`) that is never compiled:
the first config of each kernel is taken, and the result runs under Triton's interpreter, which
is how the tests check it.
"""

from __future__ import annotations

import ast
import gc
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from okgit.eval.worker.calls import build, init_args, load_op, pin_flags

MODE_NAMES = {True: "train", False: "eval"}
MAX_CONSTANT = 64  # elements of a constant tensor written into the file as a literal


@dataclass
class Kernel:
    name: str
    source: str  # the kernel module's text, as Inductor wrote it
    comment: str  # what it fuses ("Topologically Sorted Source Nodes: ...")
    kwargs: dict[str, int]  # constexpr launch settings (XBLOCK, R0_BLOCK, ...)
    num_warps: int
    num_stages: int
    grid: list[str]  # prefix lines, then "grid = (x, y, z)", in the kernel's size names
    grid_args: list[str] = field(default_factory=list)  # launch arguments that are the grid, not the kernel's


@dataclass
class Graph:
    mode: str  # "train", "eval", or "any" when both modes give the same graph
    body: str  # the wrapper's `call(args)` body, as written
    kernels: list[Kernel]
    placeholders: list[dict[str, Any]]  # {kind: parameter|buffer|input|constant, target[, value, dtype, device]}
    mutations: list[str]  # buffers written back from leading outputs (BUFFER_MUTATION specs)
    specs: list[dict[str, Any]]  # per placeholder: shape, stride, dtype


@dataclass
class Capture:
    graphs: list[Graph]
    externs: dict[str, str]  # extern_kernels.<name> -> public torch function
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)  # module path -> baked scalars
    forward_args: list[str] = field(default_factory=list)


class NotCaptured(Exception):
    """Inductor gave nothing okgit can make a standalone file of (the message says why)."""


def capture(path: str, knobs: dict[str, int], device: str, mode: str = "default") -> dict[str, Any]:
    """What Inductor makes of the reference in torch.compile's `mode` (default, or
    max-autotune-no-cudagraphs: more configs tried, Triton GEMM and convolution templates
    against the vendor's, coordinate descent on the launch settings)."""
    import inspect

    import torch

    pin_flags(torch)
    module = load_op(path, "okgit_reference", knobs)
    model, _ = build(torch, module.Model, init_args(torch, module, 0, device), device)
    torch.manual_seed(0)
    with torch.device(device):
        inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs())
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise NotCaptured("get_inputs returns non-tensor values")
    exports = {}
    for training in (True, False):
        model.train(training)
        exports[MODE_NAMES[training]] = _export(torch, model, inputs)
    same = str(exports["train"].graph_module.code) == str(exports["eval"].graph_module.code)
    modes = {"any": exports["train"]} if same else exports
    externs: dict[str, str] = {}
    graphs = []
    options = torch._inductor.list_mode_options(mode) if mode != "default" else {}
    for module_mode, ep in modes.items():
        model.train(module_mode != "eval")
        with torch._inductor.config.patch(options):
            graphs.append(_compile(torch, model, ep, inputs, device, module_mode, externs))
    model.train(True)
    result = Capture(graphs, externs, _attributes(torch, model), list(inspect.signature(model.forward).parameters))
    return asdict(result)


def _export(torch: Any, model: Any, inputs: tuple) -> Any:
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.export(model, inputs, strict=False)
    except Exception as e:  # noqa: BLE001 - any failure to export means: no seed
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise NotCaptured(f"torch.export failed: {type(e).__name__}: {first}") from None


def _placeholders(torch: Any, model: Any, ep: Any, inputs: tuple) -> tuple[list[dict[str, Any]], list[Any], list[str]]:
    kinds = {"PARAMETER": "parameter", "BUFFER": "buffer", "USER_INPUT": "input", "CONSTANT_TENSOR": "constant"}
    specs: list[dict[str, Any]] = []
    flat = []
    user = iter(inputs)
    for spec in ep.graph_signature.input_specs:
        kind = kinds.get(spec.kind.name)
        if kind is None:
            raise NotCaptured(f"the exported graph takes a {spec.kind.name.lower()} ({spec.arg.name})")
        if kind == "constant":  # a tensor the forward makes from constants (torch.tensor(self.value))
            value = ep.constants[spec.target]
            if value.numel() > MAX_CONSTANT:
                raise NotCaptured(f"the forward makes a constant tensor of {value.numel()} elements")
            specs.append({"kind": kind, "target": spec.target, "value": value.tolist(), "dtype": str(value.dtype),
                          "device": value.device.type})
        elif kind == "input":
            value = next(user)
            specs.append({"kind": kind, "target": spec.arg.name})
        else:
            value = model.get_parameter(spec.target) if kind == "parameter" else model.get_buffer(spec.target)
            specs.append({"kind": kind, "target": spec.target})
        flat.append(value)
    mutations = [s.target for s in ep.graph_signature.output_specs if s.kind.name == "BUFFER_MUTATION"]
    if any(s.kind.name not in ("BUFFER_MUTATION", "USER_OUTPUT") for s in ep.graph_signature.output_specs):
        raise NotCaptured("the exported graph mutates an input or returns a gradient")
    return specs, flat, mutations


def _compile(torch: Any, model: Any, ep: Any, inputs: tuple, device: str, mode: str, externs: dict[str, str]) -> Graph:
    from torch._inductor import graph as inductor_graph

    placeholders, flat, mutations = _placeholders(torch, model, ep, inputs)
    codes: list[str] = []
    original = inductor_graph.GraphLowering.codegen

    def codegen(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        code: Any = result[0]
        codes.append(str(getattr(code, "value", code)))  # a ValueWithLineMap in newer versions
        if device == "cpu":
            raise _Generated()  # a CPU has no Triton backend to compile it with: the text is all we need
        return result

    before = {id(o) for o in _autotuners()} if device == "cuda" else set()
    inductor_graph.GraphLowering.codegen = codegen  # type: ignore[method-assign]
    try:
        with torch.no_grad(), _cpu_triton(device):
            compiled = torch._inductor.compile(ep.graph_module, flat)
            if device == "cuda":
                compiled(*[x.clone() if x.dtype.is_floating_point else x for x in flat])  # autotunes
                torch.cuda.synchronize()
    except _Generated:
        pass
    except Exception as e:  # noqa: BLE001 - whatever Inductor raises, the seed is not made
        if not codes:
            raise NotCaptured(f"Inductor failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:160]}") from None
    finally:
        inductor_graph.GraphLowering.codegen = original  # type: ignore[method-assign]
    if not codes:
        raise NotCaptured("Inductor generated no code")
    code = codes[-1]
    chosen = {_name(o): o for o in _autotuners() if id(o) not in before} if device == "cuda" else {}
    kernels = [_kernel(name, src, comment, chosen.get(name)) for name, src, comment in _kernel_sources(code)]
    body = _call_body(code)
    _note_externs(body, externs)
    specs = [{"shape": list(x.shape), "stride": list(x.stride()), "dtype": str(x.dtype)} for x in flat]
    return Graph(mode, body, kernels, placeholders, mutations, specs)


class _Generated(Exception):
    """Raised from the patched codegen on a CPU, once the code is written."""


class _cpu_triton:
    """On a CPU: Inductor writes Triton (not C++) kernels, and hashes no backend it cannot load."""

    def __init__(self, device: str) -> None:
        self.device = device

    def __enter__(self) -> None:
        if self.device != "cpu":
            return
        import torch._inductor.config as config
        import torch.utils._triton as triton_utils

        self.saved = (config.cpu_backend, triton_utils.triton_hash_with_backend)
        config.cpu_backend = "triton"
        triton_utils.triton_hash_with_backend = lambda: "0" * 64  # type: ignore[assignment]

    def __exit__(self, *exc: Any) -> None:
        if self.device != "cpu":
            return
        import torch._inductor.config as config
        import torch.utils._triton as triton_utils

        config.cpu_backend, triton_utils.triton_hash_with_backend = self.saved


def _autotuners() -> list[Any]:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    return [o for o in gc.get_objects() if isinstance(o, CachingAutotuner)]


def _name(autotuner: Any) -> str:
    return str(autotuner.inductor_meta.get("kernel_name") or autotuner.fn.__name__)


_KERNEL = re.compile(r"^(\w+) = async_compile\.triton\('(\w+)', '''\n(.*?)''', device_str='\w+'\)$", re.S | re.M)


def _kernel_sources(code: str) -> list[tuple[str, str, str]]:
    """(name, source, comment) of each Triton kernel in the wrapper module, in order."""
    out = []
    for m in _KERNEL.finditer(code):
        if m.group(1) != m.group(2):
            raise NotCaptured(f"kernel {m.group(2)} bound as {m.group(1)}")
        above = code[: m.start()].rsplit("\n\n", 1)[-1]
        comment = "\n".join(line for line in above.splitlines() if line.startswith("# Topologically Sorted"))
        out.append((m.group(1), m.group(3), comment))
    rest = _KERNEL.sub("", code)
    if "async_compile." in rest.replace("async_compile.wait(globals())", "").replace("async_compile = AsyncCompile()", ""):
        raise NotCaptured("the wrapper compiles something other than Triton kernels (a C++ or CUDA template)")
    return out


def _kernel(name: str, source: str, comment: str, chosen: Any) -> Kernel:
    """The kernel with the config Inductor chose on a GPU, else its first config."""
    from torch._inductor.runtime.triton_heuristics import GridExpr

    autotuner = _load_kernel(name, source)
    configs = list(autotuner.configs)
    if chosen is not None and getattr(chosen, "launchers", None):
        config = chosen.launchers[0].config
    elif configs:
        config = configs[0]
    else:
        raise NotCaptured(f"{name} has no launch config")
    grid = GridExpr.from_meta(autotuner.inductor_meta, config)
    lines = list(grid.prefix) + [f"grid = ({grid.x_grid}, {grid.y_grid}, {grid.z_grid})"]
    kwargs = {k: int(v) for k, v in config.kwargs.items()}
    grid_args = list(autotuner.inductor_meta.get("extra_launcher_args", []))  # a FixedGrid's three sizes
    return Kernel(name, source, comment, kwargs, int(config.num_warps), int(config.num_stages), lines, grid_args)


def _load_kernel(name: str, source: str) -> Any:
    """Inductor's autotuner object for one kernel source, built without compiling anything."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.py"
        path.write_text(source)
        ns: dict[str, Any] = {"__file__": str(path), "__name__": name}
        exec(compile(source, str(path), "exec"), ns)
    return ns[name]


def _call_body(code: str) -> str:
    """The text of `call(args)`'s body (a method of `Runner` in newer versions), comments kept."""
    tree = ast.parse(code)
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "call"]
    if len(funcs) != 1:
        raise NotCaptured("the wrapper has no single call(args)")
    fn = funcs[0]
    lines = code.splitlines()
    return "\n".join(lines[fn.body[0].lineno - 1 : fn.end_lineno])


def _note_externs(body: str, externs: dict[str, str]) -> None:
    """The public torch function behind each extern_kernels.<name> the body calls."""
    import torch
    from torch._inductor.select_algorithm import extern_kernels

    for name in sorted(set(re.findall(r"\bextern_kernels\.(\w+)\(", body))):
        fn = getattr(extern_kernels, name, None)
        public = next((f"torch.{attr}" for attr in (name, getattr(fn, "__name__", "")) if attr and getattr(torch, attr, None) is fn), None)
        if public is None:
            raise NotCaptured(f"extern kernel {name} has no public torch function")
        externs[name] = public


def _attributes(torch: Any, model: Any) -> dict[str, dict[str, Any]]:
    """The scalar attributes of every submodule (floats, ints, bools and tuples of them): Inductor
    bakes them into the code, so the standalone file runs its kernels only while they hold."""
    out: dict[str, dict[str, Any]] = {}
    for path, sub in model.named_modules():
        kept = {k: v for k, v in vars(sub).items() if k != "training" and not k.startswith("_") and _scalar(v)}
        if kept:
            out[path] = kept
    return out


def _scalar(v: Any) -> bool:
    if isinstance(v, (bool, int, float)):
        return True
    return isinstance(v, tuple) and all(isinstance(x, (bool, int, float)) for x in v)
