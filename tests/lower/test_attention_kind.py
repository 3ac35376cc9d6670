"""The attention template kind: scaled dot-product attention, as the call or written out, lowered
to okgit's own flash-attention kernel, checked under Triton's interpreter against PyTorch in
float64 at small sizes (tiny blocks, so that the sequence, the head dim and the value columns
each take several tiles), causal or not, with boolean, additive or masked_fill masks, a scale,
head dims past 128, and an epilogue on the output."""

from __future__ import annotations

import re

import pytest
from oprun import run_ops
from test_templates import ctx_for, op

from okgit.lower.capture import capture
from okgit.lower.kinds.attention import Attention
from okgit.problem import load_problem
from okgit.search.proposers.templates import plan

SDPA_CAUSAL = """
class Model(nn.Module):
    def forward(self, Q, K, V):
        return F.scaled_dot_product_attention(Q, K, V, is_causal=True) * 2.0 + 1.0

batch_size = 2
num_heads = 3
seq_len = 20
head_dim = 24

def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]

def get_init_inputs():
    return []
"""

SDPA_BOOL_MASK = """
class Model(nn.Module):
    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.3)

batch_size = 2
seq_q = 12
seq_k = 21
dim = 20

def get_inputs():
    keep = torch.rand(seq_q, seq_k) > 0.4
    keep[3] = False  # a row with every key masked: SDPA gives 0 there
    return [torch.randn(batch_size, seq_q, dim), torch.randn(batch_size, seq_k, dim), torch.randn(batch_size, seq_k, dim), keep]

def get_init_inputs():
    return []
"""

SDPA_ADDITIVE_WIDE = """
class Model(nn.Module):
    def forward(self, q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

batch_size = 2
heads = 2
seq_len = 9
qk_dim = 160
v_dim = 144

def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, qk_dim), torch.randn(batch_size, heads, seq_len, qk_dim),
            torch.randn(batch_size, heads, seq_len, v_dim), torch.randn(batch_size, 1, seq_len, seq_len)]

def get_init_inputs():
    return []
"""

WRITTEN_CAUSAL = """
class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.register_buffer("tril", torch.tril(torch.ones(seq_len, seq_len)))

    def forward(self, Q, K, V):
        att = (Q @ K.transpose(-2, -1)) * self.scale
        att = att.masked_fill(self.tril == 0, float("-inf"))
        return torch.softmax(att, dim=-1) @ V

batch_size = 2
heads = 2
seq_len = 18
head_dim = 20

def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]

def get_init_inputs():
    return [0.2]
"""

WRITTEN_ADDITIVE = """
class Model(nn.Module):
    def forward(self, q, k, v, bias):
        scores = torch.bmm(q, k.transpose(1, 2)) / 4.0 + bias
        return torch.bmm(torch.softmax(scores, dim=-1), v)

batch_size = 3
seq_len = 17
dim = 24

def get_inputs():
    return [torch.randn(batch_size, seq_len, dim), torch.randn(batch_size, seq_len, dim),
            torch.randn(batch_size, seq_len, dim), torch.randn(batch_size, seq_len, seq_len)]

def get_init_inputs():
    return []
"""

OPS = {"sdpa_causal": SDPA_CAUSAL, "sdpa_bool_mask": SDPA_BOOL_MASK, "sdpa_additive_wide": SDPA_ADDITIVE_WIDE,
       "written_causal": WRITTEN_CAUSAL, "written_additive": WRITTEN_ADDITIVE}
SMALL = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_E": 16, "BLOCK_DV": 16}


def small_tiles(source: str) -> str:
    return re.sub(r"^(FUSED_ATTENTION_\d+_)(BLOCK_\w+): int = \d+", lambda m: f"{m.group(1)}{m.group(2)}: int = {SMALL[m.group(2)]}",
                  source, flags=re.MULTILINE)


def attention_candidate(path: str) -> str:
    proposals = plan(ctx_for(path))
    chosen = [p for p in proposals if "attention" in p.origin.split(":")[1].split("+")]
    assert chosen, [p.origin for p in proposals]
    return chosen[0].source


def test_the_written_out_pattern_is_recognised_only_where_its_scores_are_used_nowhere_else(tmp_path) -> None:
    graph = capture(load_problem(op(tmp_path, "written", WRITTEN_CAUSAL)))
    assert Attention().offered(graph)
    rewritten = Attention().rewrite(graph)
    assert [n.op for n in rewritten.nodes if n.kind == "extern"][-1] == "attention"
    assert not any(n.kind == "reduce" for n in rewritten.nodes)  # the softmax went into the call
    leaked = WRITTEN_ADDITIVE.replace("return torch.bmm(torch.softmax(scores, dim=-1), v)",
                                      "return torch.bmm(torch.softmax(scores, dim=-1), v), scores")
    graph = capture(load_problem(op(tmp_path, "leaked", leaked)))
    assert not Attention().offered(graph) and Attention().rewrite(graph) is graph


@pytest.mark.slow  # candidates under the interpreter (oprun)
@pytest.mark.timeout(900)
def test_the_attention_kernel_matches_pytorch_in_every_form(tmp_path) -> None:
    jobs = []
    for name, body in OPS.items():
        path = op(tmp_path, name, body)
        source = attention_candidate(path)
        assert re.search(r"^def fused_attention_\d+_kernel\(", source, re.M), name
        jobs.append((path, source, {}))
        if name != "sdpa_additive_wide":  # the head dims past 128 take their own tiling at the default settings
            jobs.append((path, small_tiles(source), {}))
    results = run_ops(jobs, timeout=800)
    bad = [(job[0], r["why"][-800:]) for job, r in zip(jobs, results) if not r["ok"]]
    assert not bad, bad
