"""What Inductor makes of the reference, captured in a child process (`python -m okgit.inductor`).

The reference is built on the device at the knobs asked for and traced by torch.compile's
front end (dynamo, one graph, once per module mode; one graph kept where both modes give the
same code) with the batch and the dims that follow the shape knobs dynamic (okgit.inductor.shapes),
then compiled by Inductor (default mode, or the mode asked for, the evaluator's pinned library
flags): its kernels take their sizes as arguments, so one file serves every shape the op takes;
its convolutions in the layout Inductor chooses at the op's own sizes (okgit.inductor.layout).
What is kept is plain data for okgit.inductor.standalone: the wrapper's `call` body, each Triton
kernel's source with the launch settings Inductor chose and its grid as expressions of the
kernel's sizes, how each argument of `call` is read from the forward's names, what the code
assumed of them (shapes as expressions of size symbols, the relations between those, the
constants it baked in), and the public torch function behind each `extern_kernels` call.

On a GPU Inductor's own autotuning chooses among its configs (the compiled model is run once,
at the knobs asked for), and each kernel keeps the config Inductor launched it with. On a CPU
Inductor is asked for Triton code (`cpu_backend = "triton"`) that is never compiled: the first
config of each kernel is taken, and the result runs under Triton's interpreter, which is how the
tests check it.
"""

from __future__ import annotations

import ast
import contextlib
import re
import textwrap
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from okgit.eval.parent.devices import DeviceHold
from okgit.eval.worker.calls import build, init_args, load_op, mode_dependent, pin_flags
from okgit.inductor.externs import note_externs
from okgit.inductor.layout import as_at_own_sizes
from okgit.inductor.shapes import Assumed, NotAssumable, Reader, assumed, dynamic_dims, mark_dynamic, source_name

MODE_NAMES = {True: "train", False: "eval"}


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
    mode: str  # "train", "eval", or "any" when both modes give the same code
    body: str  # the wrapper's `call(args)` body, as written
    kernels: list[Kernel]
    assumed: Assumed  # its arguments, and what the code assumed of them
    tuple_output: bool  # the forward returns a tuple of the call's outputs (else the one tensor)
    layout: str = ""  # the layout its convolutions run in and why (okgit.inductor.layout), "" without any


@dataclass
class Capture:
    graphs: list[Graph]
    externs: dict[str, str]  # extern_kernels.<name> -> public torch function, or the helper below
    helpers: dict[str, str] = field(default_factory=dict)  # extern_kernels.<name> -> its own function's source
    forward_args: list[str] = field(default_factory=list)
    dynamic: bool = True  # the knob-following dims were compiled dynamic


class NotCaptured(Exception):
    """Inductor gave nothing okgit can make a standalone file of (the message says why)."""


def capture(path: str, knobs: dict[str, int], device: str, mode: str = "default", dynamic: bool = True,
            hold: DeviceHold | None = None, own_layout: bool = True) -> dict[str, Any]:
    """What Inductor makes of the reference in torch.compile's `mode` (default, or
    max-autotune-no-cudagraphs: more configs tried, Triton GEMM and convolution templates
    against the vendor's, coordinate descent on the launch settings); `dynamic=False` compiles
    every size static, as torch.compile does by default. A reference whose behaviour cannot
    depend on its module mode (okgit.eval.worker.calls.mode_dependent, the evaluator's own test)
    is compiled once, for both modes. `hold`: the device's lock, held shared while the model is
    built and the compiled graph runs (okgit.inductor.locking holds it alone for benchmarks).
    `own_layout`: convolutions in the layout Inductor chooses at the op's own sizes
    (okgit.inductor.layout; False: its dynamic compile's, for comparison)."""
    import inspect
    from pathlib import Path

    import torch

    pin_flags(torch)
    hold = hold or DeviceHold(None, "seed")
    module = load_op(path, "okgit_reference", knobs)
    with hold.region("shared"):
        model, _ = build(torch, module.Model, init_args(torch, module, 0, device), device)
        torch.manual_seed(0)
        with torch.device(device):
            inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs())
        _synchronize(torch, device)
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise NotCaptured("get_inputs returns non-tensor values")
    forward_args = list(inspect.signature(model.forward).parameters)
    if len(forward_args) != len(inputs):
        raise NotCaptured(f"get_inputs gives {len(inputs)} values for forward's {len(forward_args)} arguments")
    if dynamic:
        mark_dynamic(torch, model, inputs, dynamic_dims(path, knobs))
    reader = Reader(model, forward_args, inputs, vars(module))
    externs: dict[str, str] = {}
    helpers: dict[str, str] = {}
    options = torch._inductor.list_mode_options(mode) if mode != "default" else {}
    graphs = {}
    both = mode_dependent(torch, model, Path(path).read_text())
    for training in (True, False) if both else (True,):
        model.train(training)
        with torch._inductor.config.patch(options):
            graphs[MODE_NAMES[training]] = _compile(torch, model, inputs, device, MODE_NAMES[training], externs, helpers,
                                                    reader, hold, own_layout)
    model.train(True)
    train = graphs["train"]
    eval_ = graphs.get("eval")
    if eval_ is None:
        kept = [_for_either_mode(train)]
    else:
        kept = [_merged(train, eval_)] if _same_code(train, eval_) else [train, eval_]
    return asdict(Capture(kept, externs, helpers, forward_args, dynamic))


def _for_either_mode(graph: Graph) -> Graph:
    """A graph compiled in training mode for a reference that does not depend on its mode: the
    same code in both; the training flags dynamo read are not something it depends on."""
    constants = {k: v for k, v in graph.assumed.constants.items() if not k.endswith(".training")}
    kept = Assumed(graph.assumed.args, graph.assumed.symbols, graph.assumed.tensors, graph.assumed.relations, constants)
    return Graph("any", graph.body, graph.kernels, kept, graph.tuple_output, graph.layout)


def _synchronize(torch: Any, device: str) -> None:
    """The GPU work queued so far done, before the region that holds the device for it ends."""
    if device == "cuda":
        torch.cuda.synchronize()


def _same_code(a: Graph, b: Graph) -> bool:
    return (a.body, a.kernels, a.tuple_output) == (b.body, b.kernels, b.tuple_output) and (
        a.assumed.args, a.assumed.symbols, a.assumed.tensors, a.assumed.relations) == (
        b.assumed.args, b.assumed.symbols, b.assumed.tensors, b.assumed.relations)


def _merged(a: Graph, b: Graph) -> Graph:
    """The one graph for both modes: the constants either mode baked in, less those the modes
    disagree on (the training flags), which the same code shows it does not depend on."""
    constants = {**a.assumed.constants, **b.assumed.constants}
    for key in set(a.assumed.constants) & set(b.assumed.constants):
        if a.assumed.constants[key] != b.assumed.constants[key]:
            del constants[key]
    kept = Assumed(a.assumed.args, a.assumed.symbols, a.assumed.tensors, a.assumed.relations, constants)
    return Graph("any", a.body, a.kernels, kept, a.tuple_output, a.layout)


@contextlib.contextmanager
def _dynamic_config(torch: Any) -> Iterator[None]:
    """Dynamo's settings for the seed: only the dims marked dynamic are (parameters' and buffers'
    too), and two sizes that happen to be equal are not taken for one (no duck sizing)."""
    import torch.fx.experimental._config as fx_config

    wanted = {"force_parameter_static_shapes": False, "force_nn_module_property_static_shapes": False,
              "assume_static_by_default": True, "automatic_dynamic_shapes": False}
    with torch._dynamo.config.patch({k: v for k, v in wanted.items() if hasattr(torch._dynamo.config, k)}), \
            fx_config.patch(use_duck_shape=False):  # type: ignore[attr-defined]
        yield


@contextlib.contextmanager
def _generated_afresh(torch: Any) -> Iterator[None]:
    """Every graph compiled here generated, none served from Inductor's graph cache: a served
    graph is never generated, so the patched codegen would see no code (on the H200 the
    eval-mode graph, the same as the training-mode one compiled just before, came from the FX
    graph cache and every seed failed with "Inductor generated no code"). The cache's lookups
    miss, but what is generated is still saved, under the key Inductor gives the graph (the graph,
    its inputs' sizes and types, the configuration, the versions: nothing here changes the
    configuration), so torch.compile of the same graph in another process (the sweep's baseline,
    okgit.kernelbench.baselines) is served the code a cold compile makes. The autograd cache,
    which would skip Inductor altogether, is off. Where this torch keeps no such lookup, the graph
    caches are off altogether."""
    import torch._functorch.config as functorch_config
    from torch._inductor.codecache import FxGraphCache

    functorch = {k: False for k in ("enable_autograd_cache", "enable_remote_autograd_cache")
                 if hasattr(functorch_config, k)}
    lookup = FxGraphCache.__dict__.get("_lookup_graph")
    if not isinstance(lookup, staticmethod):
        off = {k: False for k in ("fx_graph_cache", "fx_graph_remote_cache", "autotune_remote_cache")
               if hasattr(torch._inductor.config, k)}
        with torch._inductor.config.patch(off), functorch_config.patch(functorch):
            yield
        return

    def miss(*args: Any, **kwargs: Any) -> tuple[None, dict[str, Any]]:
        return None, {}  # (no graph, no cache facts): load_with_key counts a miss and the caller saves

    FxGraphCache._lookup_graph = staticmethod(miss)  # type: ignore[method-assign,assignment]
    try:
        with functorch_config.patch(functorch):
            yield
    finally:
        FxGraphCache._lookup_graph = lookup  # type: ignore[method-assign]


def _compile(torch: Any, model: Any, inputs: tuple, device: str, mode: str, externs: dict[str, str],
             helpers: dict[str, str], reader: Reader, hold: DeviceHold, own_layout: bool) -> Graph:
    from torch._inductor import graph as inductor_graph
    from torch._inductor.compile_fx import compile_fx

    codes: list[str] = []
    layouts: dict[int, str] = {}  # id of a graph module -> the layout of its convolutions
    notes: list[str] = []  # the layout note of each graph generated, as `codes`
    seen: dict[str, Any] = {}
    original = inductor_graph.GraphLowering.codegen

    def codegen(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        code: Any = result[0]
        codes.append(str(getattr(code, "value", code)))  # a ValueWithLineMap in newer versions
        notes.append(layouts.get(id(self.module), ""))
        if device == "cpu":
            raise _Generated()  # a CPU has no Triton backend to compile it with: the text is all we need
        return result

    def backend(gm: Any, example_inputs: list[Any]) -> Any:
        nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
        seen["placeholders"] = [(source_name(n.meta["grapharg"].source), n.meta["example_value"]) for n in nodes]
        seen["outputs"] = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])
        fake = torch._guards.detect_fake_mode([v for _, v in seen["placeholders"]])
        seen["shape_env"] = fake.shape_env if fake is not None else None
        try:
            graph_fn: Any = compile_fx(gm, example_inputs)  # on the CPU, its benchmarks aside: nothing held
        except Exception:
            if device == "cpu" and codes:
                return gm.forward  # the code was captured; the call runs eagerly
            raise

        def run(*args: Any) -> Any:  # the compiled graph on the device (autotuning at its first launch)
            with hold.region("shared"):
                out = graph_fn(*args)
                _synchronize(torch, device)
                return out

        run._boxed_call = getattr(graph_fn, "_boxed_call", False)  # type: ignore[attr-defined]  # dynamo's calling convention
        return run

    guards: list[tuple[str, str]] = []

    def export(found: Any) -> None:
        guards.extend((g.name, getattr(g.create_fn, "func", g.create_fn).__name__) for g in found)

    torch._dynamo.reset()
    chosen: dict[str, Any] = {}  # kernel name -> the config Inductor launched it with
    inductor_graph.GraphLowering.codegen = codegen  # type: ignore[method-assign]
    try:
        with torch.no_grad(), _cpu_triton(device), _dynamic_config(torch), _generated_afresh(torch), \
                as_at_own_sizes(torch, layouts, own_layout), _launched_configs(chosen), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch._dynamo.optimize(backend, nopython=True, guard_export_fn=export)(model)
            result = compiled(*inputs)  # compiles; on a GPU Inductor autotunes here
    except Exception as e:  # noqa: BLE001 - whatever torch.compile raises, the seed is not made
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise NotCaptured(f"torch.compile failed: {type(e).__name__}: {first}") from None
    finally:
        inductor_graph.GraphLowering.codegen = original  # type: ignore[method-assign]
    if not codes:
        raise NotCaptured("Inductor generated no code")
    code = codes[-1]
    kernels = [_kernel(name, src, comment, chosen.get(name)) for name, src, comment in _kernel_sources(code)]
    body = _call_body(code)
    try:
        note_externs(body, externs, helpers)
    except ValueError as e:
        raise NotCaptured(str(e)) from None
    try:
        what = assumed(torch, seen["shape_env"], seen["placeholders"], guards, reader)
    except NotAssumable as e:
        raise NotCaptured(str(e)) from None
    tuple_output = _check_outputs(torch, body, seen, result)
    return Graph(mode, body, kernels, what, tuple_output, notes[-1])


def _check_outputs(torch: Any, body: str, seen: dict[str, Any], result: Any) -> bool:
    """Whether the forward returns a tuple; the call takes one argument per graph input and returns
    the forward's tensors, in order (not so where aot_autograd merged aliased inputs, or the
    forward returns an input or one tensor twice)."""
    tree = ast.parse("def call(args):\n" + textwrap.indent(textwrap.dedent(body), "    "))
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    unpack = next((n for n in fn.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name) and n.value.id == "args"), None)
    taken = len(unpack.targets[0].elts) if unpack is not None and isinstance(unpack.targets[0], ast.Tuple) else 1 if unpack else 0
    if taken != len(seen["placeholders"]):
        raise NotCaptured(f"Inductor's call takes {taken} arguments for the graph's {len(seen['placeholders'])}")
    returned = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    given = len(returned[-1].value.elts) if returned and isinstance(returned[-1].value, ast.Tuple) else -1
    wanted = 1 if isinstance(result, torch.Tensor) else len(result) if isinstance(result, tuple) and all(
        isinstance(r, torch.Tensor) for r in result) else -1
    if wanted < 0 or not given == seen["outputs"] == wanted:
        raise NotCaptured("the forward's return value is not the compiled graph's tensors in order")
    return isinstance(result, tuple)


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


@contextlib.contextmanager
def _launched_configs(chosen: dict[str, Any]) -> Iterator[None]:
    """Record, by kernel name, the config each of Inductor's kernels is launched with: after its
    autotuning (and coordinate descent in max-autotune) one launcher is left, the one Inductor
    chose. Read at the launch, not afterwards from the autotuner objects: on the H200 (torch 2.11)
    the objects found after the call had no launcher left, every seed took its kernels' first
    config, and L2/87's pointwise kernel ran at 2.06 ms where Inductor's choice took 1.25."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    original = CachingAutotuner.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        if len(self.launchers) == 1:
            chosen[_name(self)] = self.launchers[0].config
        return out

    CachingAutotuner.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        CachingAutotuner.run = original  # type: ignore[method-assign]


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
    """The kernel with the config Inductor launched it with (`chosen`), else its first config."""
    from torch._inductor.runtime.triton_heuristics import GridExpr

    autotuner = _load_kernel(name, source)
    configs = list(autotuner.configs)
    if chosen is not None:
        config = chosen
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
