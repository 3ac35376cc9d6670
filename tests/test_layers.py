"""Imports go one way (docs/design.md, "Seams"): a module imports only its own layer and the
layers below it. Static (the source's import statements, `if TYPE_CHECKING:` blocks aside)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# lowest first; a module's layer is that of its longest listed prefix
LAYERS = [
    {"okgit.errors", "okgit.fmt", "okgit.paths", "okgit.locks", "okgit.status", "okgit.registry", "okgit.config",
     "okgit.problem", "okgit.journal"},
    {"okgit.git"},
    {"okgit.lower", "okgit.eval", "okgit.backends", "okgit.llm", "okgit.prompts", "okgit.inductor"},
    {"okgit.search"},
    {"okgit.views"},  # how runs and results read: above what they render, below the commands
    {"okgit.run", "okgit.final_gate", "okgit.verify", "okgit.doctor", "okgit.kernelbench", "okgit.tui"},
    {"okgit.campaign"},  # each problem a run, a model's patch verified
    {"okgit.cli", "okgit.__main__", "okgit"},
]
# Siblings that must not see each other: the evaluator never imports the lowering or the search.
APART = [("okgit.eval", "okgit.lower"), ("okgit.lower", "okgit.eval"), ("okgit.eval", "okgit.search"),
         ("okgit.lower", "okgit.search")]


def layer(module: str) -> int:
    best = max((p for group in LAYERS for p in group if module == p or module.startswith(p + ".")), key=len)
    return next(i for i, group in enumerate(LAYERS) if best in group)


def runtime_imports(tree: ast.Module) -> list[str]:
    """okgit modules a file imports when it runs (a TYPE_CHECKING block only names types)."""
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.ImportFrom) and child.module == "okgit":  # from okgit import llm
                out.extend(f"okgit.{a.name}" for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and (child.module or "").startswith("okgit"):
                out.append(child.module or "")
            elif isinstance(child, ast.Import):
                out.extend(a.name for a in child.names if a.name.startswith("okgit"))
            visit(child)

    visit(tree)
    return out


def test_no_import_goes_up_a_layer():
    wrong = []
    for path in sorted((ROOT / "okgit").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for target in runtime_imports(ast.parse(path.read_text())):
            if layer(target) > layer(module):
                wrong.append(f"{module} -> {target}")
            wrong += [f"{module} -> {target} (kept apart)" for a, b in APART
                      if module.startswith(a + ".") and (target == b or target.startswith(b + "."))]
    assert not wrong, wrong
