"""Attention as GEMMs (okgit/lower/kinds/attention_gemms.py): an fp32 SDPA call written out so
that its products run on the split-precision GEMM and its softmax is a rows kernel. Its
candidates run under Triton's interpreter against PyTorch in float64 at tiny sizes, causal or
not, with a boolean or additive mask (a fully masked row among them), an explicit scale and the
default one at another head dim; and the proposer offers it where a vendor call is, beside the
flash kind's candidate and never merged with it."""

from __future__ import annotations

import re

import pytest
from oprun import run_ops
from test_attention_kind import OPS
from test_templates import ctx_for, op

from okgit.lower.capture import capture
from okgit.lower.fusion import partition
from okgit.lower.kinds import kinds
from okgit.lower.opfile import lowered_file
from okgit.problem import load_problem
from okgit.search.proposers.templates import candidates, plan

KINDS = {k.name: k for k in kinds()}
GEMMS = KINDS["attention_gemms"]
# the flash kind's test ops: SDPA causal with an epilogue; with a boolean mask, a fully masked row
# and a scale; with an additive mask and head dims past 128; written out with a masked_fill and
# a scale from an attribute; written out with an additive mask
SDPA = ("sdpa_causal", "sdpa_bool_mask", "sdpa_additive_wide")
WRITTEN = ("written_causal", "written_additive")

# a batch of 1, an additive mask broadcast over the heads with a row of -inf, and a linear after
# the attention (so the gemm kind is offered too: both on, it lowers the attention's products)
FLOAT_MASK = """
class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.out = nn.Linear(dim, dim)

    def forward(self, q, k, v, bias):
        return self.out(F.scaled_dot_product_attention(q, k, v, attn_mask=bias))

heads = 2
seq_len = 9
dim = 32

def get_inputs():
    bias = torch.randn(1, 1, seq_len, seq_len)
    bias[0, 0, 5] = float("-inf")
    shape = (1, heads, seq_len, dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape), bias]

def get_init_inputs():
    return [dim]
"""

# Q computed in the forward: the default scale's head dim is read through the product and the
# transpose, from the forward's argument
COMPUTED_Q = """
class Model(nn.Module):
    def forward(self, x, k, v):
        return F.scaled_dot_product_attention((x * 0.5).transpose(1, 2), k, v)

heads = 2
seq_len = 11
head_dim = 20

def get_inputs():
    shape = (1, heads, seq_len, head_dim)
    return [torch.randn(1, seq_len, heads, head_dim), torch.randn(shape), torch.randn(shape)]

def get_init_inputs():
    return []
"""


def parts(origin: str) -> list[str]:
    return origin.split(":")[1].split("+")


def kernels(source: str) -> list[str]:
    return re.findall(r"^def (fused_[a-z_]+)_\d+_kernel\(", source, re.M)


def gemms_candidate(path: str) -> str:
    """The candidate with this kind on and the flash kind off, as the proposer makes it."""
    chosen = [p for p in plan(ctx_for(path)) if "attention_gemms" in parts(p.origin)]
    assert len(chosen) == 1, [p.origin for p in plan(ctx_for(path))]
    return chosen[0].source


def gemm_form(path: str) -> str:
    """A written-out attention's candidate with the gemm kind on and the flash kind off."""
    found = [p.source for p in plan(ctx_for(path)) if kernels(p.source).count("fused_gemm") == 2]
    assert len(found) == 1
    return found[0]


def small_tiles(source: str, **more: int) -> str:
    """The GEMMs at 16 x 16 x 16 tiles (a causal one then skips work: several tiles each side of
    the diagonal), with `more` of their settings (SPLIT_K) or of the plan's (GEMM_SPLIT_AHEAD_MIN)."""
    settings = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, **more}
    source = re.sub(r"^(FUSED_ATTENTION_GEMMS_\d+_)(\w+): int = \d+",
                    lambda m: f"{m.group(1)}{m.group(2)}: int = {settings.get(m.group(2), m.group(0).split()[-1])}",
                    source, flags=re.M)
    return re.sub(r"^(GEMM_SPLIT_AHEAD_MIN): int = \d+", lambda m: f"{m.group(1)}: int = {settings.get(m.group(1), 160)}",
                  source, flags=re.M)


def with_gemm_kind(path: str) -> str:
    """The candidate with the gemm kind and this one on (and not the flash kind)."""
    on = (KINDS["gemm"], GEMMS)
    graph = capture(load_problem(path))
    assert on in candidates(graph, "cpu")
    shaped = GEMMS.rewrite(graph)
    return lowered_file(load_problem(path).source, shaped, partition(shaped, seeding=on), on)[0]


def test_an_sdpa_call_gets_two_gemms_and_a_softmax_beside_the_flash_candidate(tmp_path) -> None:
    path = op(tmp_path, "sdpa_causal", OPS["sdpa_causal"])
    proposals = plan(ctx_for(path))
    origins = [parts(p.origin) for p in proposals]
    assert origins[0] == ["attention"]  # the flash kind's first
    assert sum("attention_gemms" in o for o in origins) == 1
    assert not any("attention" in o and "attention_gemms" in o for o in origins)  # never both in one file
    assert len({p.source for p in proposals}) == len(proposals)
    source = gemms_candidate(path)
    assert kernels(source) == ["fused_attention_gemms", "fused_rows", "fused_attention_gemms"]
    assert "scaled_dot_product_attention" not in source.split("class Model")[1]
    assert "math.sqrt(Q.shape[3])" in source  # the default scale follows the head dim at run time
    assert len(re.findall(r"^        k_hi = (tl.where|min\(k_hi)", source, re.M)) == 2  # the causal GEMMs skip work
    assert "GEMM_SPLIT_AHEAD_MIN: int = 0" in small_tiles(source, GEMM_SPLIT_AHEAD_MIN=0)
    assert small_tiles(source).count("_BLOCK_M: int = 16") == 2


def test_the_default_scale_reads_the_head_dim_where_the_forward_has_it(tmp_path) -> None:
    assert "float(1.0 / math.sqrt(x.shape[3]))" in gemms_candidate(op(tmp_path, "computed_q", COMPUTED_Q))


def test_with_the_gemm_kind_on_too_it_lowers_the_products(tmp_path) -> None:
    source = with_gemm_kind(op(tmp_path, "float_mask", FLOAT_MASK))
    assert kernels(source) == ["fused_gemm", "fused_rows", "fused_gemm", "fused_gemm"]
    assert "scaled_dot_product_attention" not in source.split("class Model")[1]


def test_where_it_is_offered(tmp_path) -> None:
    """Not without a vendor call (a written-out attention's products are the gemm kind's
    already, its GEMM form the gemm kind's candidate), not at half precision (the split GEMM is
    fp32's), not with dropout, and not beside a plain matmul."""
    written = op(tmp_path, "written_causal", OPS["written_causal"])
    assert not GEMMS.offered(capture(load_problem(written))) and KINDS["attention"].offered(capture(load_problem(written)))
    assert "fused_rows" in kernels(gemm_form(written)) and "fused_attention" not in kernels(gemm_form(written))
    sdpa = OPS["sdpa_causal"]
    half = sdpa.replace("torch.randn(shape)", "torch.randn(shape, dtype=torch.float16)")
    assert not GEMMS.offered(capture(load_problem(op(tmp_path, "half", half))))
    dropout = sdpa.replace("is_causal=True", "is_causal=True, dropout_p=0.1")
    assert not GEMMS.offered(capture(load_problem(op(tmp_path, "dropout", dropout))))
    relu = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x) @ x\n\n" \
           "def get_inputs():\n    return [torch.randn(8, 8)]\n\ndef get_init_inputs():\n    return []\n"
    graph = capture(load_problem(op(tmp_path, "plain", relu)))
    assert not GEMMS.offered(graph) and not any(GEMMS in c for c in candidates(graph, "cpu"))


@pytest.mark.slow  # candidates under the interpreter (oprun)
@pytest.mark.timeout(900)
def test_the_written_out_form_matches_pytorch(tmp_path) -> None:
    paths = {name: op(tmp_path, name, OPS[name]) for name in SDPA + WRITTEN}
    jobs = [(paths[name], gemms_candidate(paths[name]), {}) for name in SDPA]
    jobs.append((paths["sdpa_causal"], jobs[0][1], {"head_dim": 16, "seq_len": 9}))  # the default scale at another E
    # causal, tiles skipped above the diagonal: K in ranges, and the operands split ahead of the GEMM
    jobs += [(paths["sdpa_causal"], small_tiles(jobs[0][1], **more), {}) for more in ({}, {"SPLIT_K": 2, "GEMM_SPLIT_AHEAD_MIN": 0})]
    jobs += [(paths[name], gemm_form(paths[name]), {}) for name in WRITTEN]
    computed_q = op(tmp_path, "computed_q", COMPUTED_Q)
    jobs += [(computed_q, gemms_candidate(computed_q), knobs) for knobs in ({}, {"head_dim": 12})]
    float_mask = op(tmp_path, "float_mask", FLOAT_MASK)
    jobs += [(float_mask, gemms_candidate(float_mask), {}), (float_mask, with_gemm_kind(float_mask), {})]
    results = run_ops(jobs, timeout=800)
    bad = [(job[0], job[2], r["why"][-800:]) for job, r in zip(jobs, results) if not r["ok"]]
    assert not bad, bad
