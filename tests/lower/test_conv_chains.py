"""okgit's convolution with okgit's kernels after it (okgit/search/proposers/templates.py, `made`):
the conv kinds' candidate turns on the kinds of the first candidate too (pooling, batch norm),
so no PyTorch call is left beside it, and a global average pool is a mean (okgit/lower/aten.py).
The candidates' files against float64 under the Triton interpreter; the chains are the
development set's level-2 classes (a convolution, then pooling, batch norm, a spatial mean)."""

from __future__ import annotations

import re

import pytest
from oprun import run_ops

from okgit.eval.types import Reference
from okgit.lower.capture import capture
from okgit.lower.fusion import Group
from okgit.problem import load_problem
from okgit.search.proposers.templates import Made, made, plan
from okgit.search.types import Context

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def chain(init: str, forward: str, inputs: str) -> str:
    """An op file whose __init__ holds the lines `init` and forward the lines `forward`."""
    body = "\n".join(" " * 8 + line for line in init.splitlines())
    steps = "\n".join(" " * 8 + line for line in forward.splitlines())
    return HEADER + f"""class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
{body}

    def forward(self, x):
{steps}


batch = 2
cin = 8
cout = 16


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return [cin, cout]
"""


CHAINS = {
    # the kinds each conv candidate turns on, beside conv itself
    "conv2d, hardswish, max pool, mish": (chain(
        "self.conv = nn.Conv2d(cin, cout, 3)",
        "x = F.hardswish(self.conv(x) - 0.5)\nreturn F.mish(F.max_pool2d(x, 2))",
        "torch.randn(batch, cin, 11, 10)"), {"pool"}),
    "transposed conv3d, batch norm, spatial mean subtracted": (chain(
        "self.conv = nn.ConvTranspose3d(cin, cout, 3, stride=2, padding=1, bias=False)\n"
        "self.bn = nn.BatchNorm3d(cout)",
        "x = self.bn(self.conv(x))\nreturn x - torch.mean(x, dim=(2, 3, 4), keepdim=True)",
        "torch.randn(batch, cin, 3, 4, 4)"), {"batchnorm"}),
    "conv3d, max pool, logsumexp over channels": (chain(
        "self.conv = nn.Conv3d(cin, cout, 3, padding=1)",
        "x = F.max_pool3d(self.conv(x), 2)\nreturn torch.relu(torch.logsumexp(x, dim=1, keepdim=True))",
        "torch.randn(batch, cin, 4, 6, 6)"), {"pool"}),
    "conv2d, gelu, global average pool": (chain(
        "self.conv = nn.Conv2d(cin, cout, 3)",
        "x = F.gelu(self.conv(x))\nreturn F.adaptive_avg_pool2d(x, 1).squeeze(-1).squeeze(-1)",
        "torch.randn(batch, cin, 9, 12)"), set()),
}


def _write(tmp_path, name: str) -> str:
    path = tmp_path / (re.sub(r"\W+", "_", name) + ".py")
    path.write_text(CHAINS[name][0])
    return str(path)


@pytest.mark.parametrize("name", list(CHAINS))
def test_a_convolution_of_okgits_own_comes_with_okgits_kernels_after_it(tmp_path, name):
    path = _write(tmp_path, name)
    graph = capture(load_problem(path))
    ours = [m for m in made(graph, CHAINS[name][0], "cuda") if isinstance(m, Made)
            and {"conv", "conv_tf32"} & {k.name for k in m.turned_on}]
    assert [m.low.origin().split("+")[0] for m in ours] == ["template:conv", "template:conv_tf32"]
    for m in ours:
        assert {k.name for k in m.turned_on} - {"conv", "conv_tf32", "columns"} == CHAINS[name][1], m.low.origin()
        left = [n.op for n in m.items if not isinstance(n, Group) and n.kind == "extern"]
        assert left == [], (m.low.origin(), left)  # no PyTorch call beside okgit's kernels


def test_a_channels_last_convolution_that_cannot_come_with_the_pooling_comes_alone(tmp_path):
    """okgit's max pool reads the convolution's output itself (its pointwise epilogue fused in
    front of the window), which the channels-last convolution's epilogue kernel cannot be: that
    candidate comes without the pooling kind, as before."""
    path = _write(tmp_path, "conv2d, hardswish, max pool, mish")
    notes: list[str] = []
    ctx = Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                  device="cuda", log=lambda type, **f: notes.append(f.get("message", "")))
    origins = [p.origin for p in plan(ctx)]
    assert origins[-1] == "template:vendor_conv_cl+pointwise+vendor_pool", origins
    others = [n for n in notes if "direct convolution (fp32)): 8 input channels" not in n]  # its decline: 8 > 4
    assert "template:conv+pool" in origins and not others, notes


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_each_chain_matches_float64(tmp_path):
    jobs, names = [], []
    for name in CHAINS:
        path = _write(tmp_path, name)
        ctx = Context(problem=load_problem(path), reference=Reference(device="cpu", timed=False), backend="triton",
                      device="cpu", log=lambda type, **f: None)
        found = [p for p in plan(ctx) if p.origin.split("+")[0] == "template:conv"]  # a folded mean: "template:conv"
        assert len(found) == 1, [p.origin for p in plan(ctx)]
        jobs.append((path, found[0].source, {}))
        names.append(f"{name} ({found[0].origin})")
    results = run_ops(jobs, timeout=900)
    bad = [(n, r["why"]) for n, r in zip(names, results, strict=True) if not r["ok"]]
    assert not bad, bad
