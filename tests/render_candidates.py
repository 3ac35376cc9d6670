"""Render every template candidate of every op file under examples/,
tests/ops and tests/kb_fixture, to check that a
refactor of okgit.lower leaves the generated files byte-identical.

    python tests/render_candidates.py save DIR      # before the change
    python tests/render_candidates.py compare DIR   # after it: exit 1 and the differences, if any

Each op gives DIR/<op>.json: its candidates (source, origin, intent, meta) and the notes the
templates proposer logged. Nothing runs a kernel; the capture runs on the meta device.
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

from okgit.eval.types import Reference
from okgit.problem import load_problem, top_level_names
from okgit.search.proposers.templates import plan
from okgit.search.types import Context

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted([*ROOT.glob("examples/*.py"), *ROOT.glob("tests/ops/**/*.py"), *ROOT.glob("tests/kb_fixture/KernelBench/**/*.py")])
OPS = [p for p in FILES if {"Model", "get_inputs", "get_init_inputs"} <= top_level_names(p.read_text())]  # not candidates


def render(path: Path) -> dict:
    notes: list[dict] = []
    ctx = Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                  device="cpu", log=lambda type, **fields: notes.append({"type": type, **fields}))
    candidates = [{"source": p.source, "origin": p.origin, "intent": p.intent, "meta": p.meta} for p in plan(ctx)]
    return {"candidates": candidates, "notes": notes}


def name_of(path: Path) -> str:
    return str(path.relative_to(ROOT)).replace("/", "__").removesuffix(".py")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("save", "compare"):
        print(__doc__.strip().splitlines()[3:5], file=sys.stderr)
        return 2
    mode, out = argv[0], Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    differ = new = 0
    for path in OPS:
        got = json.dumps(render(path), indent=1, sort_keys=True, default=str)
        file = out / f"{name_of(path)}.json"
        if mode == "save":
            file.write_text(got)
            continue
        if not file.exists():
            new += 1  # an op file the saved set predates
            continue
        want = file.read_text()
        if got != want:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(file), "now"))
    n = len(OPS)
    print(f"{mode}: {n} ops" + (f", {differ} differ, {new} not saved before" if mode == "compare" else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
