"""The suite's own rules (docs/internals.md, "Tests"): every slow test says why it is slow, and
the real evaluator comes from the one shared fixture of tests/conftest.py."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SLOW = re.compile(r"pytest\.mark\.slow\b")


def _test_sources() -> list[Path]:
    """Test modules in every folder, and the helpers beside conftest.py (not the op files and
    candidates the tests read)."""
    return [p for p in sorted(TESTS.rglob("*.py")) if p.name.startswith("test_") or p.parent == TESTS]


def test_every_slow_mark_says_why() -> None:
    bare = [f"{p.relative_to(TESTS)}:{n}" for p in _test_sources()
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if SLOW.search(line) and "#" not in line and "reason=" not in line]
    assert not bare, f"slow marks without a reason (a comment on the mark's line): {bare}"


def test_the_real_evaluator_is_one_shared_fixture() -> None:
    own = [str(p.relative_to(TESTS)) for p in _test_sources()
           if p.name != "conftest.py" and re.search(r"^def (gpu_)?evaluator\(", p.read_text(), re.MULTILINE)]
    assert not own, f"modules with an evaluator fixture of their own (tests/conftest.py has the one): {own}"
