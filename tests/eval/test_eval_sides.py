"""The evaluator's trust boundary, as imports (docs/internals.md, the eval rows of the module map).

okgit/eval is split by where code runs: `parent` (okgit's own process), `worker` (a worker
process, beside the op's code: the candidate's worker, and the op-file code the judge shares),
`judge` (the judge process), `protocol` (plain data passed between them) and `modal`. A
candidate can reach whatever its worker imported, so the worker side imports nothing of the
parent's or the judge's; the parent never imports code that runs beside a candidate.
"""

from __future__ import annotations

import ast
import subprocess
import sys

from test_layers import ROOT, runtime_imports

EVAL = "okgit.eval"
SIDES = ("parent", "worker", "judge", "protocol", "modal")
SHARED = {"okgit.eval.base", "okgit.eval.types", "okgit.eval.roofline"}  # leaf modules every side may read
# what each side may import inside okgit.eval, besides itself
MAY_IMPORT = {
    "protocol": set(),
    "worker": {"protocol"},
    "judge": {"protocol", "worker", "shared"},  # the reference runs through the worker's op-file code
    "parent": {"protocol", "shared"},
    "modal": {"protocol", "parent", "shared"},  # the container runs the parent's LocalEvaluator
}


def side(module: str) -> str | None:
    """The side a module of okgit.eval belongs to: a folder's name, "shared", or None (outside)."""
    if module in SHARED:
        return "shared"
    parts = module.split(".")
    if parts[:2] != ["okgit", "eval"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in SIDES else "front"  # registry: the front door, which builds evaluators


def eval_modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted((ROOT / "okgit" / "eval").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        out[module] = ast.parse(path.read_text())
    return out


def test_every_module_of_the_evaluator_is_on_a_side():
    loose = [m for m in eval_modules() if side(m) == "front" and m not in ("okgit.eval", "okgit.eval.registry")]
    assert not loose, f"okgit/eval modules outside the side folders: {loose}"


def test_no_side_imports_another_beyond_the_protocol():
    wrong = []
    for module, tree in eval_modules().items():
        own = side(module)
        if own not in MAY_IMPORT:
            continue
        for target in runtime_imports(tree):
            other = side(target)
            if other is None or other == own:
                continue
            if other not in MAY_IMPORT[own]:
                wrong.append(f"{module} ({own}) -> {target} ({other})")
    assert not wrong, wrong


def test_the_shared_modules_import_no_side():
    wrong = [f"{m} -> {t}" for m, tree in eval_modules().items() if side(m) == "shared"
             for t in runtime_imports(tree) if side(t) not in (None, "shared")]
    assert not wrong, wrong


def test_a_worker_process_loads_nothing_of_the_parent_or_the_judge():
    """Transitively, as Python loads them: every module of the worker side imported in a fresh
    process (what a candidate's worker holds before the job) pulls in no parent or judge module."""
    worker = [m for m in eval_modules() if side(m) == "worker" and not m.endswith("__main__")]
    code = (f"import importlib, sys\nfor m in {worker!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('okgit.eval.parent', 'okgit.eval.judge', "
            "'okgit.eval.modal'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
