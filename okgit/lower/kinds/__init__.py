"""The template kinds, one module each (its lowering, tunables, description, origin tag and
template texts beside it), registered in KINDS.

| kind      | module       | covers                                                         |
|-----------|--------------|----------------------------------------------------------------|
| gemm      | gemm.py      | matmul / linear with its elementwise epilogue fused (optional: |
|           |              | the vendor GEMM first)                                         |
| columns   | columns.py   | strided row reductions in the column layout (optional: a       |
|           |              | second candidate, before the row layout)                       |
| conv_cl   | conv_cl.py   | the epilogue of a 2D convolution run channels-last (optional:  |
|           |              | a candidate of its own, after the NCHW ones)                   |
| pointwise | pointwise.py | elementwise chains, parameters and broadcasts included         |
| rows      | rows.py      | reductions / normalisations over some dims, per row            |
| scalar    | scalar.py    | reductions to one value (losses), two-stage, no atomics        |
"""

from __future__ import annotations

from okgit.lower.kinds.base import TemplateKind
from okgit.lower.kinds.columns import COLUMNS
from okgit.lower.kinds.conv_cl import CONV_CL
from okgit.lower.kinds.gemm import GEMM
from okgit.lower.kinds.pointwise import POINTWISE
from okgit.lower.kinds.rows import ROWS
from okgit.lower.kinds.scalar import SCALAR

# A group goes to the first kind here that is on and claims it: the optional kinds first (they
# are alternatives for groups the others lower too); a candidate's note names its optional
# kinds in this order.
KINDS: tuple[TemplateKind, ...] = (GEMM, COLUMNS, CONV_CL, POINTWISE, ROWS, SCALAR)
