"""The dynamic seed's convolutions in the layout Inductor chooses at the op's own sizes
(okgit.inductor.layout): channels-last where Inductor's heuristics say so there, though its
dynamic compile turns the optimisation off; Inductor's own choice where they do not (a grouped
convolution with several channels per group stays NCHW).

On a CPU with mkldnn on Inductor runs every convolution channels-last whatever the sizes, so
these tests take the decision with mkldnn off, where it is the GPU's: the fast test on graphs
traced with symbolic sizes, the slow one in real seeds, run under Triton's interpreter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

OP = Path(__file__).resolve().parents[2] / "bench" / "newuser" / "conv_bias_relu.py"  # 2D convolution, bias, ReLU
KNOBS = {"batch": 2, "c_in": 8, "c_out": 16, "size": 8}  # sizes for the interpreter


def _conv(groups: int):
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = torch.ops.aten.convolution.default(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], groups)
        return torch.relu(y)
    return fn


def _decisions(gm, force: bool) -> tuple[bool, dict[int, str]]:
    from torch._inductor.graph import GraphLowering

    from okgit.inductor.layout import as_at_own_sizes

    notes: dict[int, str] = {}
    with as_at_own_sizes(torch, notes, force):
        decided = GraphLowering.decide_layout_opt(gm, is_inference=True)
    return decided, notes


def test_a_convolution_runs_channels_last_where_inductor_would_at_its_own_sizes() -> None:
    from torch._inductor.graph import GraphLowering  # Inductor imported by the tests that use it only
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import has_free_symbols

    x, bias = torch.randn(2, 8, 8, 8), torch.randn(16)
    plain = make_fx(_conv(1), tracing_mode="symbolic")(x, torch.randn(16, 8, 3, 3), bias)
    grouped = make_fx(_conv(2), tracing_mode="symbolic")(x, torch.randn(16, 4, 3, 3), bias)
    pointwise = make_fx(torch.relu, tracing_mode="symbolic")(x)
    with torch.backends.mkldnn.flags(enabled=False):
        # Inductor's own decision: NCHW for both, the sizes being free
        assert not GraphLowering.decide_layout_opt(plain, is_inference=True)
        assert not GraphLowering.decide_layout_opt(grouped, is_inference=True)
        decided, notes = _decisions(plain, force=True)
        assert decided and notes == {id(plain): "convolutions channels-last (Inductor's choice at the op's own sizes; "
                                                "it turns the layout optimisation off for dynamic sizes)"}
        decided, notes = _decisions(plain, force=False)  # for comparison: Inductor's, with what it would do
        assert not decided and "NCHW (Inductor's dynamic compile; at the op's own sizes it would" in notes[id(plain)]
        decided, notes = _decisions(grouped, force=True)  # its heuristics leave a grouped convolution NCHW
        assert not decided and notes == {id(grouped): "convolutions NCHW (Inductor's choice at the op's own sizes too)"}
        assert _decisions(pointwise, force=True) == (False, {})  # no convolution: nothing to say
    assert GraphLowering.decide_layout_opt.__name__ == "decide_layout_opt"  # Inductor's own again
    x_node = next(n for n in plain.graph.nodes if n.op == "placeholder")
    assert has_free_symbols(x_node.meta["val"])  # the graph's sizes put back as traced


MAKE = '''
import json, sys, torch
from okgit.inductor.capture import capture
from okgit.inductor.standalone import standalone_file

op, out, knobs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
answer = {}
for own in (True, False):
    with torch.backends.mkldnn.flags(enabled=False):
        cap = capture(op, knobs, "cpu", own_layout=own)
    (graph,) = cap["graphs"]
    answer[str(own)] = {"layout": graph["layout"], "body": graph["body"], "dynamic": sorted(graph["assumed"]["symbols"])}
    if own:
        open(out, "w").write(standalone_file(open(op).read(), cap, "cpu"))
print(json.dumps(answer), flush=True)
'''

# run in MAKE's process, after it (one torch, Inductor and Triton start for both): under the
# interpreter, as okgit's own seed process on a CPU is (okgit.eval.parent.sandbox.worker_env)
CHECK = '''
import warnings
from okgit.backends.triton import install_launch_counter
from okgit.eval.worker.calls import load_op

counter = install_launch_counter()
ref, seed = load_op(op, "ref", knobs), load_op(out, "seed", knobs)
torch.manual_seed(0); a = ref.Model(*ref.get_init_inputs())
b = seed.Model(*seed.get_init_inputs()); b.load_state_dict(a.state_dict())
torch.set_grad_enabled(False)
warnings.simplefilter("error")  # the reference's own forward, taken where the kernels do not fit, warns
for shape in ((2, 8, 8, 8), (3, 8, 5, 7)):
    x = torch.randn(*shape)
    counter.reset()
    assert torch.allclose(a(x), b(x), atol=1e-5, rtol=1e-5), shape
    assert counter.total() == 3, counter.total()  # input and weight made channels-last, the ReLU back to NCHW
print("ok")
'''


@pytest.mark.slow  # two Inductor compiles of a convolution, then the interpreter runs the seed
@pytest.mark.timeout(900)
def test_a_dynamic_convolution_seed_runs_channels_last_and_matches(tmp_path: Path) -> None:
    out = tmp_path / "seed.py"
    run = subprocess.run([sys.executable, "-c", MAKE + CHECK, str(OP), str(out), json.dumps(KNOBS)],
                         env={**ENV, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600)
    said = run.stdout.strip().splitlines()
    made = [line for line in said if line.startswith("{")]  # the seed's JSON line, before the check's "ok"
    assert made, run.stderr[-2000:]
    answer = json.loads(made[0])
    own, inductors = answer["True"], answer["False"]
    assert own["dynamic"] and own["dynamic"] == inductors["dynamic"]  # both compiled with free sizes
    assert own["layout"].startswith("convolutions channels-last (Inductor's choice at the op's own sizes")
    assert inductors["layout"].startswith("convolutions NCHW (Inductor's dynamic compile")

    def convolved(body: str) -> str:  # the first argument of the convolution call
        return body.split("extern_kernels.convolution(")[1].split(",")[0]

    assert convolved(inductors["body"]) != convolved(own["body"])  # the input as given, against its copy
    copy = next(line for line in own["body"].splitlines() if f"{convolved(own['body'])} = empty_strided" in line)
    strides = re.search(r"empty_strided_cpu\(\([^)]*\), \(([^)]*)\)", copy)
    assert strides is not None and strides.group(1).split(", ")[1] == "1", copy  # channels-last: C varies fastest
    assert said[-1] == "ok", run.stderr[-2000:]
