"""Static checks on a candidate's source, run in the parent before any of it executes.

They name obvious cheats early (status `rejected`): changing torch, timers or comparison
functions under the evaluator, threads and processes that outlive a call, tensor subclasses
and dispatch hooks, reaching into the evaluator's frames or files. They are a first line
only: the runtime gates do not trust them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

FORBIDDEN_MODULES = {
    "threading": "starts threads",
    "_thread": "starts threads",
    "multiprocessing": "starts processes",
    "concurrent": "starts threads or processes",
    "subprocess": "starts processes",
    "ctypes": "calls native code outside a kernel backend",
    "cffi": "calls native code outside a kernel backend",
    "socket": "opens network connections",
    "http": "opens network connections",
    "urllib": "opens network connections",
    "requests": "opens network connections",
    "signal": "installs signal handlers",
    "atexit": "runs code at the worker's exit",
    "gc": "walks the evaluator's objects",
    "inspect": "inspects the evaluator's frames",
    "pickle": "reads serialized objects",
    "shutil": "touches files",
    "pathlib": "touches files",
    "okgit": "imports the evaluator",
}
FORBIDDEN_CALLS = {
    "open": "reads or writes files",
    "eval": "runs generated code",
    "exec": "runs generated code",
    "compile": "compiles generated code",
    "__import__": "imports dynamically",
    "globals": "reaches module globals dynamically",
    "breakpoint": "stops the worker",
}
FORBIDDEN_ATTRS = {
    # os / sys
    "system": "runs shell commands", "popen": "runs shell commands", "fork": "starts processes",
    "kill": "sends signals", "_exit": "exits the worker", "execv": "replaces the worker",
    "execve": "replaces the worker", "execvp": "replaces the worker", "spawnv": "starts processes",
    "_getframe": "inspects the evaluator's frames", "settrace": "traces the evaluator",
    "setprofile": "traces the evaluator",
    # torch
    "__torch_function__": "overrides torch functions", "__torch_dispatch__": "overrides torch dispatch",
    "_python_dispatch": "installs a dispatch mode", "overrides": "overrides torch functions",
    "TorchDispatchMode": "installs a dispatch mode", "TorchFunctionMode": "installs a function mode",
    "as_subclass": "makes tensor subclasses", "_make_subclass": "makes tensor subclasses",
}
_FILE_LOADERS = {"torch", "np", "numpy", "pickle", "json"}


@dataclass(frozen=True)
class StaticFinding:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def static_findings(tree: ast.Module) -> list[StaticFinding]:
    """Every obvious cheat in the module, in source order."""
    imported = _imported_names(tree)
    found: list[StaticFinding] = []

    def add(node: ast.AST, message: str) -> None:
        found.append(StaticFinding(getattr(node, "lineno", 0), message))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for mod in _modules_of(node):
                top = mod.split(".")[0]
                if top in FORBIDDEN_MODULES:
                    add(node, f"imports {mod}: {FORBIDDEN_MODULES[top]}")
                elif mod.startswith("torch.utils._python_dispatch") or mod == "torch.overrides":
                    add(node, f"imports {mod}: overrides torch dispatch")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                for t in _flatten_targets(target):
                    root = _attr_root(t)
                    if root in imported and isinstance(t, (ast.Attribute, ast.Subscript)):
                        add(node, f"assigns to {_dotted(t)}: monkeypatches an imported module")
                    elif root in ("__builtins__", "builtins"):
                        add(node, f"assigns to {_dotted(t)}: changes builtins")
                    elif _dotted(t).startswith("sys.modules"):
                        add(node, "assigns to sys.modules: replaces modules")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
                add(node, f"calls {node.func.id}(): {FORBIDDEN_CALLS[node.func.id]}")
            elif isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") and node.args:
                root = _attr_root(node.args[0])
                if root in imported or root in ("__builtins__", "builtins"):
                    add(node, f"calls {node.func.id}() on {_dotted(node.args[0])}: monkeypatches an imported module")
            elif isinstance(node.func, ast.Attribute) and node.func.attr == "load":
                # torch.load / np.load read files; cpp_extension.load builds a CUDA module (allowed)
                if name.split(".")[0] in _FILE_LOADERS:
                    add(node, f"calls {name}(): reads files")
        elif isinstance(node, ast.Attribute):
            why = FORBIDDEN_ATTRS.get(node.attr)
            if why:
                add(node, f"uses .{node.attr}: {why}")
        elif isinstance(node, ast.Name) and node.id == "__builtins__":
            add(node, "uses __builtins__: changes builtins")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in (
            "__torch_function__", "__torch_dispatch__"
        ):
            add(node, f"defines {node.name}: overrides torch")
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if _dotted(base).split(".")[-1] in ("Tensor", "TorchDispatchMode", "TorchFunctionMode"):
                    add(node, f"class {node.name} subclasses {_dotted(base)}")
    found.sort(key=lambda f: f.line)
    return found


def _imported_names(tree: ast.Module) -> set[str]:
    """Names bound by import statements anywhere: attributes of these are someone else's module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _modules_of(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    # `from torch.utils import _python_dispatch` names the module in the imported name
    return [base] + [f"{base}.{a.name}" for a in node.names if base]


def _flatten_targets(target: ast.AST) -> list[ast.AST]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for elt in target.elts for t in _flatten_targets(elt)]
    return [target]


def _attr_root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Subscript):
        return f"{_dotted(node.value)}[...]"
    if isinstance(node, ast.Call):
        return f"{_dotted(node.func)}()"
    return "<expr>"
