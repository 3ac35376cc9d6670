"""How the split-precision GEMM is tuned: how much shared memory a configuration takes (against
what Triton asked for on the H200), and the precisions and tiles autotune tries. Where its plan
splits the operands ahead is test_gemm_kind.py's plan test."""

from __future__ import annotations

import json
import re
from pathlib import Path

from okgit.lower.kinds import gemm
from okgit.search.proposers.autotune import variants
from okgit.search.proposers.sites import apply

ROOT = Path(__file__).resolve().parents[2]
H200_LOG = ROOT / "bench" / "results" / "2026-12-02-h200-kernels" / "gemm.log"
DEFAULTS = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "NUM_STAGES": 3, "PRECISION": "tf32x3-split", "PERSISTENT": 0}


def _h200_configurations() -> list[tuple[dict, int | None]]:
    """The configurations bench/gemm.py ran at 4096^3 on the H200 (settings changed from the defaults
    of then, which were these), and the shared memory Triton asked for where it refused one."""
    out = []
    for line in H200_LOG.read_text().split("4096^3 matmul, zero-mean")[0].splitlines()[1:]:
        m = re.match(r"  (\S.*?)\s+(?:OutOfResources:.*Required: (\d+)|[\d.]+ us)", line)
        if m is None:
            continue
        settings = dict(DEFAULTS)
        for item in m[1].split(", ") if m[1] != "defaults" else []:
            key, value = item.split("=")
            settings[key.upper()] = int(value) if value.isdigit() else value
        out.append((settings, int(m[2]) if m[2] else None))
    return out


def test_shared_bytes_is_what_triton_asked_for_on_the_h200():
    """Every configuration Triton refused at 4096^3 for want of shared memory needed what the kind
    counts (barriers aside) and more than the limit; every one that ran fits."""
    runs = _h200_configurations()
    refused = [(s, need) for s, need in runs if need is not None]
    assert len(refused) == 5 and len(runs) == 16
    for settings, need in refused:
        assert 0 <= need - gemm.shared_bytes(settings) < 100 and gemm.shared_bytes(settings) > gemm.SHARED_LIMIT, settings
    for settings, _ in (r for r in runs if r[1] is None):
        assert gemm.shared_bytes(settings) <= gemm.SHARED_LIMIT, settings


def _stand_ins(**settings) -> str:
    source = "import torch\nimport triton\nimport triton.language as tl\n\n" + gemm.vendor_stand_ins()
    for name, value in settings.items():
        source, n = re.subn(rf"^(SPLIT_GEMM_{name}: \w+) = .*$", lambda m, v=value: f"{m[1]} = {json.dumps(v)}", source,
                            flags=re.MULTILINE)
        assert n == 1, name
    return source


def _proposed(source: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for site, value in variants(source, 1 << 24, 8192):
        out.setdefault(site.name.removeprefix("SPLIT_GEMM_"), []).append(value)
    return out


def test_autotune_tries_the_precisions_first_and_only_tiles_that_fit():
    source = _stand_ins()
    first_site, first_value = variants(source, 1 << 24, 8192)[0]
    assert (first_site.name, first_value) == ("SPLIT_GEMM_PRECISION", "bf16x3")
    assert 'SPLIT_GEMM_PRECISION: str = "bf16x3"' in apply(source, first_site, first_value)
    proposed = _proposed(source)
    assert proposed["PRECISION"] == ["bf16x3", "bf16x6"]
    # split operands: 3 stages of 128x128x32 take 192 KiB; a wider tile or a fourth stage does not fit
    assert 256 not in proposed["BLOCK_N"] and 4 not in proposed.get("NUM_STAGES", [])
    # operands split inside the kernel stage once: there the wider tile fits
    assert 256 in _proposed(_stand_ins(PRECISION="bf16x3"))["BLOCK_N"]
    # a persistent kernel keeps its epilogue's tile beside the stages: two of them at most
    assert 3 not in _proposed(_stand_ins(PERSISTENT=1, NUM_STAGES=2)).get("NUM_STAGES", [])
