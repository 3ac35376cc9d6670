"""Getting usable things out of model replies: a candidate file, a patch, a JSON value.

Models wrap code in fences inconsistently (a language tag or none, several blocks, a last
fence never closed, prose around a bare file), so extraction tries the likely readings in
order and checks each by parsing it. Nothing here raises on a bad reply: it returns None or
a PatchError the caller turns into feedback for the next prompt.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S)
CODE_START = re.compile(r"^(import |from \S+ import |class |def |@|#!|\"\"\"|[A-Za-z_]\w* = )", re.M)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block; an unterminated last fence runs to the end."""
    return [(m.group(2).lower(), m.group(3)) for m in FENCE.finditer(text)]


def _defined(code: str) -> set[str] | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    return {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}


def extract_code(reply: str, entry: str = "Model") -> str | None:
    """The candidate op file in a reply, or None when there is no plausible one.

    Only code that parses and defines Model or ModelNew counts. Preference: defines `entry`,
    then more of the contract (get_inputs, get_init_inputs), then length, then order.
    """
    candidates = [body for lang, body in fenced_blocks(reply) if lang not in ("diff", "patch", "json", "cpp", "c++", "cuda", "c")]
    if not candidates:
        m = CODE_START.search(reply)
        if m:
            # Unfenced: the code runs from its first line to wherever prose resumes.
            lines = reply[m.start():].splitlines()
            candidates = ["\n".join(lines[:n]) for n in range(len(lines), max(len(lines) - 30, 0), -1)]
    scored = []
    for i, code in enumerate(candidates):
        names = _defined(code)
        if names is None or not names & {"Model", "ModelNew"}:
            continue  # not an op file: a snippet, or not Python
        contract = sum(n in names for n in (entry, "get_inputs", "get_init_inputs"))
        scored.append((entry in names, contract, len(code), -i, code))
    if not scored:
        return None
    return max(scored)[4].strip("\n") + "\n"


def extract_json(reply: str) -> Any:
    """The JSON value in a reply, repaired where models commonly break it; None if hopeless."""
    texts = [body for lang, body in fenced_blocks(reply) if lang in ("json", "", "json5", "javascript")] + [reply]
    for text in texts:
        for chunk in _json_chunks(text):
            value = _loads_lenient(chunk)
            if value is not None:
                return value
    return None


def _json_chunks(text: str) -> list[str]:
    """The text itself, then from an opening bracket to the last closer of its kind, the
    earliest opener first: it is the outermost value."""
    spans = []
    for open_, close in (("{", "}"), ("[", "]")):
        start, end = text.find(open_), text.rfind(close)
        if 0 <= start < end:
            spans.append((start, text[start : end + 1]))
    return [text.strip()] + [chunk for _, chunk in sorted(spans)]


def _loads_lenient(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    fixed = re.sub(r'(^|\s)//[^"\n]*$', r"\1", text, flags=re.M)  # // comments (none inside strings)
    fixed = re.sub(r",\s*([}\]])", r"\1", fixed)  # trailing commas
    try:
        return json.loads(fixed)
    except json.JSONDecodeError:
        pass
    # Single quotes and Python literals: read it as a Python literal instead.
    pythonic = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", fixed)))
    try:
        value = ast.literal_eval(pythonic)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


# ---- patch mode ----------------------------------------------------------------------------


class PatchError(Exception):
    """A reply's diff cannot be used; the message goes back to the model."""


def extract_patch(reply: str) -> str | None:
    """The unified diff in a reply: a diff/patch block, else any block or text with hunks."""
    blocks = fenced_blocks(reply)
    ordered = [b for lang, b in blocks if lang in ("diff", "patch")] + [b for lang, b in blocks if lang not in ("diff", "patch")] + [reply]
    for text in ordered:
        if re.search(r"^@@ ", text, re.M) and re.search(r"^(---|\+\+\+) ", text, re.M):
            start = re.search(r"^--- ", text, re.M)
            return text[start.start():] if start else None
    return None


def apply_patch(source: str, diff: str, filename: str = "op.py") -> str:
    """Apply a one-file unified diff to `source`; the patched text, or PatchError saying why.

    The diff is parsed with unidiff, re-headed to one known file name (models invent paths),
    then checked and applied by `git apply --recount` in a scratch directory: --recount
    because models rarely count hunk lines right, while context lines must still match.
    """
    from unidiff import PatchSet
    from unidiff.errors import UnidiffParseError

    try:
        patch = PatchSet(_recount_headers(diff))
    except UnidiffParseError as e:
        raise PatchError(f"not a valid unified diff: {e}") from None
    if len(patch) != 1:
        raise PatchError(f"the diff must change exactly one file (the op file), it changes {len(patch)}")
    hunks = "".join(str(h) for h in patch[0])
    body = f"--- a/{filename}\n+++ b/{filename}\n{hunks}"
    with tempfile.TemporaryDirectory(prefix="okgit-patch-") as tmp:
        target = Path(tmp) / filename
        target.write_text(source)
        (Path(tmp) / "change.diff").write_text(body)
        for args in (["--check"], []):
            done = subprocess.run(
                ["git", "apply", "--recount", "--whitespace=nowarn", *args, "change.diff"],
                cwd=tmp, capture_output=True, text=True, timeout=30,
            )
            if done.returncode != 0:
                detail = " ".join(done.stderr.split())[:300]
                raise PatchError(f"the diff does not apply to the current file: {detail}")
        return target.read_text()


def _recount_headers(diff: str) -> str:
    """Rewrite each hunk header's line counts from its body, so unidiff can parse it."""
    lines = diff.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$", lines[i].rstrip("\n"))
        if not m:
            out.append(lines[i])
            i += 1
            continue
        j, old, new = i + 1, 0, 0
        while j < len(lines) and not lines[j].startswith(("@@ ", "--- ", "diff ")):
            tag = lines[j][:1]
            if tag in (" ", "\n"):
                old, new = old + 1, new + 1
            elif tag == "-":
                old += 1
            elif tag == "+":
                new += 1
            elif tag != "\\":
                break
            j += 1
        # A blank line inside a hunk is a context line whose leading space was lost.
        body = [" \n" if line == "\n" else line for line in lines[i + 1 : j]]
        out += [f"@@ -{m.group(1)},{old} +{m.group(2)},{new} @@{m.group(3)}\n", *body]
        i = j
    return "".join(out)


# ---- toolchain look-ups for compile errors ---------------------------------------------------

CUDA_INCLUDE = Path("/usr/local/cuda/include")


def lookup_symbols(error: str, backend: str, limit: int = 3) -> str:
    """What the installed toolchain says about the identifiers a compile error names.

    For Triton, the signature and first docstring lines of `tl.<name>` (or the closest real
    names when it does not exist); for CUDA, the declaring lines in the toolkit's headers.
    """
    names = _triton_names(error) if backend == "triton" else _cuda_names(error)
    notes = [n for n in (_describe_triton(x) if backend == "triton" else _describe_cuda(x) for x in names[:limit]) if n]
    return "\n".join(notes)


def _triton_names(error: str) -> list[str]:
    found = re.findall(r"has no attribute '(\w+)'", error) + re.findall(r"\b(?:tl|triton\.language)\.(\w+)", error)
    return list(dict.fromkeys(found))


def _describe_triton(name: str) -> str:
    try:
        import triton.language as tl
    except ImportError:
        return ""
    obj = getattr(tl, name, None)
    if obj is None:
        public = [n for n in dir(tl) if not n.startswith("_")]
        close = difflib.get_close_matches(name, public, n=4, cutoff=0.5)
        if not close:
            return f"tl.{name} does not exist in the installed triton."
        # The likeliest intended name, described in full, usually answers the question.
        return (f"tl.{name} does not exist in the installed triton. Close names: {', '.join('tl.' + c for c in close)}.\n"
                + _describe_triton(close[0]))
    target = getattr(obj, "fn", obj)  # builtins are wrapped; the signature is the wrapped function's
    try:
        sig = str(inspect.signature(target))
    except (TypeError, ValueError):
        sig = "(...)"
    sig = re.sub(r",?\s*_(semantic|builder|generator)=None", "", sig)
    doc = [line.strip() for line in (inspect.getdoc(obj) or "").splitlines() if line.strip()][:4]
    return f"tl.{name}{sig}" + ("".join(f"\n    {line}" for line in doc))


def _cuda_names(error: str) -> list[str]:
    found = re.findall(r'identifier "(\w+)" is undefined', error)
    found += re.findall(r"no instance of (?:overloaded )?function \"(\w+)\"", error)
    found += re.findall(r"'(\w+)' was not declared", error)
    return list(dict.fromkeys(found))


def _describe_cuda(name: str) -> str:
    if not CUDA_INCLUDE.is_dir():
        return ""
    try:
        done = subprocess.run(
            ["grep", "-rhw", "-m", "2", "--include=*.h", "--include=*.hpp", "--include=*.cuh", name, str(CUDA_INCLUDE)],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    hits = [" ".join(line.split()) for line in done.stdout.splitlines() if "(" in line][:3]
    if not hits:
        return f"{name} is not declared in the CUDA toolkit headers ({CUDA_INCLUDE})."
    return f"{name} in the CUDA headers:\n" + "\n".join(f"    {h[:200]}" for h in hits)
