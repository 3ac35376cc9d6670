"""The static gate: checks on a candidate's source, run in the parent before any of it executes.

They name obvious cheats early (status `rejected`): changing torch, timers or comparison
functions under the evaluator, threads and processes that outlive a call, tensor subclasses
and dispatch hooks, reaching into the evaluator's frames or files. They are a first line
only: the runtime gates do not trust them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from okgit.eval.parent.gates.base import Gate, gate

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
    "importlib": "imports dynamically",
    "pty": "starts processes",
    "runpy": "runs other modules",
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
    **dict.fromkeys(("execl", "execle", "execlp", "execlpe", "execvpe"), "replaces the worker"),
    **dict.fromkeys(("spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnve", "spawnvp", "spawnvpe", "posix_spawn",
                     "posix_spawnp", "forkpty"), "starts processes"),
    # a process of its own session or group outlives the worker's process group, which is killed
    **dict.fromkeys(("setsid", "setpgid", "setpgrp"), "leaves the worker's process group"),
    "killpg": "sends signals", "import_module": "imports dynamically",
    "_getframe": "inspects the evaluator's frames", "settrace": "traces the evaluator",
    "setprofile": "traces the evaluator",
    # torch
    "__torch_function__": "overrides torch functions", "__torch_dispatch__": "overrides torch dispatch",
    "_python_dispatch": "installs a dispatch mode", "overrides": "overrides torch functions",
    "TorchDispatchMode": "installs a dispatch mode", "TorchFunctionMode": "installs a function mode",
    "as_subclass": "makes tensor subclasses", "_make_subclass": "makes tensor subclasses",
}
_FILE_LOADERS = {"torch", "np", "numpy", "pickle", "json"}


@gate(0)
class Static(Gate):
    name = "static"
    rule = ("No import of {modules}; no call of {calls}; no tensor subclasses, dispatch modes or "
            "torch-function overrides; nothing that reaches the evaluator's frames, files or signals.")
    rejects = True
    before_calls = True  # okgit.eval.parent.local runs `static_findings` before any worker

    def rule_text(self) -> str:
        """The forbidden imports and calls listed from the tables the check uses, so the two cannot drift."""
        return self.rule.format(modules=", ".join(sorted(FORBIDDEN_MODULES)),
                                calls=", ".join(f"{c}()" for c in sorted(FORBIDDEN_CALLS)))


@dataclass(frozen=True)
class StaticFinding:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def static_findings(tree: ast.Module) -> list[StaticFinding]:
    """Every obvious cheat in the module, in source order."""
    imported = _imported_names(tree)
    found = [StaticFinding(getattr(node, "lineno", 0), message)
             for node in ast.walk(tree) for message in _node_findings(node, imported)]
    found.sort(key=lambda f: f.line)
    return found


def _node_findings(node: ast.AST, imported: set[str]) -> list[str]:
    """What one node of the tree does that the gate forbids (most nodes: nothing)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return _import_findings(node)
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        return _assignment_findings(node, imported)
    if isinstance(node, ast.Call):
        return _call_findings(node, imported)
    if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRS:
        return [f"uses .{node.attr}: {FORBIDDEN_ATTRS[node.attr]}"]
    if isinstance(node, ast.Name) and node.id == "__builtins__":
        return ["uses __builtins__: changes builtins"]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("__torch_function__",
                                                                                  "__torch_dispatch__"):
        return [f"defines {node.name}: overrides torch"]
    if isinstance(node, ast.ClassDef):
        return [f"class {node.name} subclasses {_dotted(base)}" for base in node.bases
                if _dotted(base).split(".")[-1] in ("Tensor", "TorchDispatchMode", "TorchFunctionMode")]
    return []


def _import_findings(node: ast.Import | ast.ImportFrom) -> list[str]:
    found = []
    for mod in _modules_of(node):
        top = mod.split(".")[0]
        if top in FORBIDDEN_MODULES:
            found.append(f"imports {mod}: {FORBIDDEN_MODULES[top]}")
        elif mod.startswith("torch.utils._python_dispatch") or mod == "torch.overrides":
            found.append(f"imports {mod}: overrides torch dispatch")
    return found


def _assignment_findings(node: ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete, imported: set[str]) -> list[str]:
    targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
    found = []
    for t in (t for target in targets for t in _flatten_targets(target)):
        root = _attr_root(t)
        if root in imported and isinstance(t, (ast.Attribute, ast.Subscript)):
            found.append(f"assigns to {_dotted(t)}: monkeypatches an imported module")
        elif root in ("__builtins__", "builtins"):
            found.append(f"assigns to {_dotted(t)}: changes builtins")
        elif _dotted(t).startswith("sys.modules"):
            found.append("assigns to sys.modules: replaces modules")
    return found


def _call_findings(node: ast.Call, imported: set[str]) -> list[str]:
    func = node.func
    if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
        return [f"calls {func.id}(): {FORBIDDEN_CALLS[func.id]}"]
    if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
        root = _attr_root(node.args[0])
        if root in imported or root in ("__builtins__", "builtins"):
            return [f"calls {func.id}() on {_dotted(node.args[0])}: monkeypatches an imported module"]
    # torch.load / np.load read files; cpp_extension.load builds a CUDA module (allowed)
    elif isinstance(func, ast.Attribute) and func.attr == "load" and _dotted(func).split(".")[0] in _FILE_LOADERS:
        return [f"calls {_dotted(func)}(): reads files"]
    return []


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
