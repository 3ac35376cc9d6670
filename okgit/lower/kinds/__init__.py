"""The template kinds, one module each (its recognition, lowering, tunables, description, origin
tag and template texts beside it), registered in `KINDS` (kinds/base.py) in this order:

| order | kind      | module       | covers                                                      |
|-------|-----------|--------------|-------------------------------------------------------------|
| 0     | gemm      | gemm.py      | matmul / linear / bmm with its elementwise epilogue fused,  |
|       |           |              | split precision on tensor cores (optional: before the       |
|       |           |              | vendor GEMM); persistent with TMA stores where writing C    |
|       |           |              | bounds it                                                   |
| -2    | affine_sum | affine_sum.py | a sum over an affine function of a tensor (a norm's output) |
|       |           |              | taken over the tensor first (optional: a rewrite alone)     |
| -1    | linear_sum | linear_sum.py | a sum over a linear's (or matmul's) output features folded |
|       |           |              | into its weight: the weight's column sums and a dot per row, |
|       |           |              | no GEMM (optional: a rewrite alone, before the plain one)   |
| 2     | pool      | pool.py      | max / average pooling, 1D-3D, epilogue fused (optional:     |
|       |           |              | before the vendor pooling)                                  |
| 4     | grouped_conv | grouped_conv.py | depthwise / grouped convolutions, 1D-3D, few channels per |
|       |           |              | group, bias and epilogue fused (optional: before cuDNN)     |
| 5     | attention | attention.py | scaled dot-product attention, the call or written out,      |
|       |           |              | flash-style (optional: before the vendor's / the matmuls)   |
| 6     | attention_gemms | attention_gemms.py | an fp32 attention call written out: its two       |
|       |           |              | products split-precision GEMMs, the softmax a rows kernel   |
|       |           |              | (optional: before the vendor's)                             |
| 8     | batchnorm | batchnorm.py | batch norm, 1D-3D, training and eval mode: statistics split |
|       |           |              | across programs, running ones updated in the kernel, epilogue |
|       |           |              | fused (optional: before the vendor call)                    |
| 10    | columns   | columns.py   | strided row reductions in the column layout (optional: a    |
|       |           |              | second candidate, before the row layout)                    |
| 14    | conv_direct | conv_direct.py | a convolution of one group, at most 4 input channels  |
|       |           |              | (or transposed with a K of at most 32 a phase) and a short  |
|       |           |              | K (channels x taps reaching an output; 1D-3D, strided,      |
|       |           |              | padded, dilated, transposed) as a direct fp32 kernel, outer |
|       |           |              | products per tap, its epilogue fused (optional: before the  |
|       |           |              | implicit GEMM's)                                            |
| 15    | conv      | conv.py      | a convolution (1D-3D: stride, dilation, groups, transposed) |
|       |           |              | as a Triton implicit GEMM in 3xTF32, its elementwise        |
|       |           |              | epilogue fused (optional: a candidate of its own); a 1x1    |
|       |           |              | one (stride 1, unpadded) a GEMM per sample on x as it is    |
| 16    | conv_tf32 | conv.py      | the same in one TF32 pass, where cuDNN's own error allows   |
|       |           |              | it (optional: a candidate of its own)                       |
| 20    | conv_cl   | conv_cl.py   | the epilogue of a 2D convolution run channels-last          |
|       |           |              | (optional: a candidate of its own, after the NCHW ones)     |
| 30    | pointwise | pointwise.py | elementwise chains, parameters and broadcasts included      |
| 40    | rows      | rows.py      | reductions / normalisations over some dims, per row; a long |
|       |           |              | row read in several passes on a persistent grid sized by L2 |
| 45    | scan      | scan.py      | cumulative sums / products along one dim, reversed too,     |
|       |           |              | elementwise prologue and epilogue fused                     |
| 50    | scalar    | scalar.py    | reductions to one value (losses), two-stage, no atomics     |

window.py is what pool and grouped_conv share (`WindowKind`); base.py is the contract.
"""

from __future__ import annotations

# each built-in kind's module registers it on import
from okgit.lower.kinds import (  # noqa: F401
    affine_sum,
    attention,
    attention_gemms,
    batchnorm,
    columns,
    conv,
    conv_cl,
    conv_direct,
    gemm,
    grouped_conv,
    linear_sum,
    pointwise,
    pool,
    rows,
    scalar,
    scan,
)
from okgit.lower.kinds.base import KINDS, TemplateKind

_made: dict[type[TemplateKind], TemplateKind] = {}


def kinds() -> tuple[TemplateKind, ...]:
    """One instance of each registered kind, in registry order: a group goes to the first kind
    here that is on and claims it (the optional kinds come first: they are alternatives for
    groups the others lower too); a candidate's note names its optional kinds in this order."""
    return tuple(_made.setdefault(e.factory, e.factory()) for e in KINDS.entries())
