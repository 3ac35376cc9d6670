"""When the seed offers its specialised file (okgit.inductor.__main__._differs): where Inductor's
static kernels differ from its dynamic ones in kind, and also where they are the same kernels
with the sizes as constants (the index arithmetic then divides by constants: 1.7x on the
development set's batch norm), never where they are the same."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from okgit.inductor.__main__ import _differs

DYNAMIC = json.loads((Path(__file__).parent / "bn_min_softmax.capture.json").read_text())  # a real capture


def _static(edit) -> dict:
    cap = copy.deepcopy(DYNAMIC)
    edit(cap["graphs"][0]["kernels"])
    return cap


def test_the_same_kernels_are_not_specialised():
    assert _differs(copy.deepcopy(DYNAMIC), DYNAMIC) == ""


def test_the_same_kernels_with_constant_sizes_or_other_settings_are():
    def constants(kernels):
        kernels[0]["source"] = kernels[0]["source"].replace("ks0", "4096")

    def settings(kernels):
        kernels[0]["num_warps"] = kernels[0]["num_warps"] * 2

    assert _differs(_static(constants), DYNAMIC) == "the same kernels, with the sizes as constants or other launch settings"
    assert _differs(_static(settings), DYNAMIC) == "the same kernels, with the sizes as constants or other launch settings"


def test_kernels_of_another_kind_are_named():
    def persistent(kernels):
        kernels[0]["name"] = "triton_per_fused_other_0"

    said = _differs(_static(persistent), DYNAMIC)
    assert said.startswith("static: triton_per_fused_other;") and DYNAMIC["graphs"][0]["kernels"][0]["name"][:-2] in said
