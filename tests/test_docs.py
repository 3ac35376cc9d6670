"""The docs match the tree: docs/internals.md's module map names every module on disk and
nothing that is not there, and the docs' references to modules, files and design.md's sections
resolve. Fast and static; .ci/run runs it before the suite."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def module_map() -> list[str]:
    """The paths the module map's rows name: `okgit/a/b.py`, a folder `okgit/tui/`, or a sibling
    named after a path in the same cell (`okgit/lower/translate.py`, `aten.py`)."""
    text = (ROOT / "docs" / "internals.md").read_text()
    section = text.split("## Modules\n", 1)[1].split("\n## ", 1)[0]
    named = []
    for row in re.findall(r"^\| ([^|]+) \|", section, re.MULTILINE):
        folder = None
        for token in re.findall(r"`([^`]+)`", row):
            if token.startswith("okgit/"):
                folder = token if token.endswith("/") else token.rsplit("/", 1)[0] + "/"
                named.append(token)
            elif folder is not None and re.fullmatch(r"[\w*]+\.\w+", token):
                named.append(folder + token)
    return named


def modules_on_disk() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / "okgit").rglob("*.py")
            if p.name != "__main__.py" and (p.name != "__init__.py" or p.parent == ROOT / "okgit")}


def test_the_module_map_names_what_is_on_disk():
    named = module_map()
    missing = [n for n in named if not list(ROOT.glob(n))]
    assert not missing, f"docs/internals.md names paths that do not exist: {missing}"
    folders = [n for n in named if n.endswith("/")]
    uncovered = sorted(m for m in modules_on_disk() if m not in named and not any(m.startswith(f) for f in folders))
    assert not uncovered, f"modules docs/internals.md's module map does not name: {uncovered}"


def test_module_references_in_the_docs_resolve():
    """`okgit.a.b` (a module, or a name in one) and `okgit/a/b.py` in any doc exist."""
    # not modules: the config file, and the registries' entry-point groups
    groups = {g for p in (ROOT / "okgit").rglob("*.py") for g in re.findall(r'Registry\("[^"]*", "(okgit\.\w+)"', p.read_text())}
    assert "okgit.proposers" in groups
    broken = []
    for doc in DOCS:
        text = doc.read_text()
        for path in set(re.findall(r"(?<![\w/.])okgit/[\w/]+\.(?:py|tmpl|txt|json)\b", text)):
            if not (ROOT / path).exists():
                broken.append(f"{doc.name}: {path}")
        for dotted in set(re.findall(r"`(okgit(?:\.\w+)+)", text)):
            parts = dotted.split(".")
            # the longest prefix that is a module or package; what follows it is a name in it
            found = any((ROOT / Path(*parts[:k])).with_suffix(".py").exists() or (ROOT / Path(*parts[:k])).is_dir()
                        for k in range(len(parts), 1, -1))
            if not found and dotted not in groups | {"okgit.toml"}:
                broken.append(f"{doc.name}: {dotted}")
    assert not broken, broken


def test_design_section_references_resolve():
    """A reference `docs/design.md, "Title"` (in code or docs) names a heading design.md has."""
    headings = {re.sub(r"^\d+\.\s*", "", h).strip() for h in
                re.findall(r"^#+ (.+)$", (ROOT / "docs" / "design.md").read_text(), re.MULTILINE)}
    sources = [*DOCS, *(ROOT / "okgit").rglob("*.py")]
    cited = {(p.name, " ".join(title.replace("#", " ").split()))
             for p in sources for title in re.findall(r'design\.md, "([^"]+)"', p.read_text())}
    # a title cited in full or by its first words ("Module modes" for "Module modes and state")
    broken = sorted(c for c in cited if not any(h == c[1] or h.startswith(c[1] + " ") for h in headings))
    assert not broken, broken
