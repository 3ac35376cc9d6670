"""The Inductor seed with its vendor GEMMs on tensor cores: a second seed, the first's text with
extern_kernels' mm / addmm / bias_addmm / bmm (cuBLAS, strict fp32 on the CUDA cores under PyTorch's default
flags) pointed at the split-precision GEMM family's stand-ins (okgit.lower.kinds.gemm,
`vendor_stand_ins`: the same arguments, `out=` included, fp32 accuracy); Inductor's own kernels
around them are unchanged. Pure text, nothing run: the evaluator judges it like any candidate,
the precision rule for contractions included, and the search keeps the faster of the two seeds.
"""

from __future__ import annotations

import re

from okgit.lower.kinds.gemm import VENDOR_STAND_INS, vendor_stand_ins

_EXTERNS = re.compile(r"^extern_kernels = SimpleNamespace\((.*)\)$", re.MULTILINE)  # okgit.inductor.standalone's


def split_gemm_seed(seed: str) -> str | None:
    """The seed file with its vendor GEMMs replaced, or None where it calls none."""
    m = _EXTERNS.search(seed)
    if m is None:
        return None
    items = dict(item.split("=", 1) for item in m[1].split(", "))
    if not set(items) & set(VENDOR_STAND_INS):
        return None
    pointed = ", ".join(f"{name}={VENDOR_STAND_INS.get(name, public)}" for name, public in items.items())
    stand_ins = "# the vendor GEMMs on tensor cores at fp32 accuracy (okgit's split-precision GEMM)\n" + vendor_stand_ins()
    return f"{seed[:m.start()]}{stand_ins}\n\n\nextern_kernels = SimpleNamespace({pointed}){seed[m.end():]}"
