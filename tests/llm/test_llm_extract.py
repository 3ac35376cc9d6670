"""Reading model replies: code, JSON, patches, toolchain look-ups, the critic's diagnosis."""

from __future__ import annotations

import pytest

from okgit.search import extract
from okgit.search.critic import parse_diagnosis
from okgit.search.extract import PatchError, apply_patch, extract_code, extract_json, extract_patch, lookup_symbols

FILE = "import torch\n\n\nclass Model:\n    pass\n\n\ndef get_inputs():\n    return []\n\n\ndef get_init_inputs():\n    return []\n"


def test_code_from_a_python_fence():
    assert extract_code(f"Here it is:\n```python\n{FILE}```\nEnjoy.") == FILE


def test_several_blocks_pick_the_op_file():
    reply = f"Helper:\n```python\ndef helper():\n    return 1\n```\nFile:\n```py\n{FILE}```\nUsage:\n```\nmodel = Model()\n```"
    assert extract_code(reply) == FILE


def test_prefers_the_entry_class():
    new = FILE.replace("class Model:", "class ModelNew:")
    assert extract_code(f"```python\n{FILE}```\n```python\n{new}```", entry="ModelNew") == new


def test_unterminated_fence_and_unfenced_code():
    assert extract_code(f"```python\n{FILE}") == FILE
    assert extract_code(f"Sure, the file:\n{FILE}That is all, it should be faster.") == FILE


def test_no_usable_code_is_none():
    assert extract_code("I cannot do that.") is None
    assert extract_code("```python\ndef f(:\n```") is None  # does not parse
    assert extract_code("```python\nx = 1\n```") is None  # parses, but is no op file


def test_json_repairs():
    assert extract_json('```json\n{"a": 1, "b": [1, 2,],}\n```') == {"a": 1, "b": [1, 2]}
    assert extract_json("The plan: [{'x': true, 'y': null}] done") == [{"x": True, "y": None}]
    assert extract_json('{"u": "http://x", // a comment\n "v": 2}') == {"u": "http://x", "v": 2}
    assert extract_json("no json here") is None


SOURCE = "a = 1\nb = 2\n\nc = 3\nd = 4\n"


def test_patch_applies_with_wrong_hunk_counts_and_invented_paths():
    diff = "--- a/some/where.py\n+++ b/some/where.py\n@@ -1,9 +1,9 @@\n a = 1\n-b = 2\n+b = 20\n\n c = 3\n"
    assert extract_patch(f"Change:\n```diff\n{diff}```") == diff
    assert apply_patch(SOURCE, diff) == "a = 1\nb = 20\n\nc = 3\nd = 4\n"


def test_patch_that_does_not_apply_says_why():
    with pytest.raises(PatchError, match="does not apply"):
        apply_patch(SOURCE, "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 7\n+b = 8\n")
    with pytest.raises(PatchError, match="exactly one file"):
        two = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
        apply_patch(SOURCE, two)
    assert extract_patch("no diff here") is None


def test_triton_symbol_lookup():
    found = lookup_symbols("AttributeError: module 'triton.language' has no attribute 'maxmium'", "triton")
    assert "tl.maxmium does not exist" in found and "tl.maximum(" in found
    assert lookup_symbols("error in tl.dot(a, b)", "triton").startswith("tl.dot(")


def test_cuda_identifier_lookup_in_headers(tmp_path, monkeypatch):
    (tmp_path / "sm_30_intrinsics.h").write_text("static __device__ int __shfl_down_sync(unsigned mask, int var, unsigned delta);\n")
    monkeypatch.setattr(extract, "CUDA_INCLUDE", tmp_path)
    found = lookup_symbols('kernel.cu(12): error: identifier "__shfl_down_sync" is undefined', "cuda")
    assert "__shfl_down_sync(unsigned mask" in found
    missing = lookup_symbols('error: identifier "__nope" is undefined', "cuda")
    assert "not declared" in missing


def test_diagnosis_repair_and_coercion():
    d = parse_diagnosis('```json\n{"bottleneck_type": "Memory-bound", "roofline_position": "35%", "specific_issue": "two passes",'
                        ' "recommendation": "fuse", "estimated_headroom": "2x", "confidence": "high",}\n```')
    assert d is not None
    assert (d.bottleneck_type, d.roofline_position, d.estimated_headroom, d.confidence) == ("memory", 0.35, 2.0, 0.8)
    assert parse_diagnosis("the kernel is slow") is None
    assert parse_diagnosis('{"bottleneck_type": "memory"}') is None  # no issue, no recommendation
