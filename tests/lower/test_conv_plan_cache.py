"""The implicit-GEMM convolution's layout kept per key (conv_plan.py.tmpl's _CONV_LAYOUTS): what
depends on shapes, strides, settings and the device alone is built once, the input's copy and
the weight's packing every call. The generated launchers run under Triton's interpreter at tiny
sizes: a warm cache gives the fresh cache's output bit for bit, a call at the same key adds
nothing, another batch size or other strides add one entry (strides matter: an input read in
place has the layout's offsets), and a weight changed in place between calls is used as it is.

The checks run in one subprocess that sets TRITON_INTERPRET before Triton is imported (Triton's
own jit functions, tl.cdiv among them, are interpreted only then), each check's outcome sent
back; the candidates are rendered here, as a run proposes them on a GPU."""

from __future__ import annotations

import json
import os
import traceback
import types
from pathlib import Path

import pytest
import torch
from scriptrun import run_script
from test_conv_kind import ctx_for, form

from okgit.search.proposers.templates import plan

# name: (op file text, the convolution's torch function and settings, input shape)
FORMS = {
    "2d, padded": (form("nn.Conv2d(cin, cout, 3, padding=1)", "y", "torch.rand(batch, cin, 5, 6)", 12, 10, 2),
                   (torch.nn.functional.conv2d, {"padding": 1}), (2, 12, 5, 6)),
    "2d, unpadded": (form("nn.Conv2d(cin, cout, 3)", "y", "torch.rand(batch, cin, 5, 6)", 8, 6, 2),
                     (torch.nn.functional.conv2d, {}), (2, 8, 5, 6)),
    "transposed, stride 2": (
        form("nn.ConvTranspose2d(cin, cout, 3, stride=2, padding=1, output_padding=1)", "y",
             "torch.rand(batch, cin, 3, 4)", 8, 6, 2),
        (torch.nn.functional.conv_transpose2d, {"stride": 2, "padding": 1, "output_padding": 1}), (2, 8, 3, 4)),
    "grouped": (form("nn.Conv2d(cin, cout, 3, padding=1, groups=2)", "y", "torch.rand(batch, cin, 4, 5)", 24, 8, 2),
                (torch.nn.functional.conv2d, {"padding": 1, "groups": 2}), (2, 24, 4, 5)),
}
RUNNER = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path[:0] = [{here!r}, {tests!r}]
import test_conv_plan_cache
test_conv_plan_cache.run_checks(sys.argv[1])
"""


class Launchers:
    """Per form its candidate module (loaded in the subprocess) and the launcher's name."""

    def __init__(self, paths: dict[str, str]):
        self.found = {}
        for name, path in paths.items():
            mod = types.ModuleType("cand")
            exec(compile(Path(path).read_text(), path, "exec"), mod.__dict__)
            self.found[name] = (mod, next(k for k in vars(mod) if k.startswith("fused_conv_") and k[-1].isdigit()))

    def layouts(self, name: str) -> dict:
        return self.found[name][0]._CONV_LAYOUTS

    def call(self, name: str, x: torch.Tensor, w: torch.Tensor, *, fresh: bool = False) -> torch.Tensor:
        """The form's launcher on x and w (a zero bias), its cache emptied first where `fresh`."""
        mod, fn = self.found[name]
        if fresh:
            mod._CONV_LAYOUTS.clear()
        return getattr(mod, fn)(x, w, torch.zeros(w.shape[1] if "transposed" in name else w.shape[0]))

    def operands(self, name: str, batch: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Random x (at `batch` where given) and the form's model's weight."""
        mod, _ = self.found[name]
        shape = FORMS[name][2]
        torch.manual_seed(0)
        x = torch.rand((batch or shape[0], *shape[1:]))
        return x, mod.Model(*mod.get_init_inputs()).conv.weight.detach().clone()


def reference(name: str, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    conv, settings = FORMS[name][1]
    return conv(x.double(), w.double(), **settings).float()


def close(got: torch.Tensor, name: str, x: torch.Tensor, w: torch.Tensor) -> None:
    torch.testing.assert_close(got, reference(name, x, w), rtol=1e-4, atol=1e-4)


def check_warm(run: Launchers, name: str) -> None:
    x, w = run.operands(name)
    fresh = run.call(name, x, w, fresh=True)
    [kept] = run.layouts(name).values()
    warm = run.call(name, x, w)
    assert len(run.layouts(name)) == 1 and next(iter(run.layouts(name).values())) is kept
    assert torch.equal(fresh, warm)
    close(warm, name, x, w)
    if "transposed" in name:  # several phases, each its own launch from the kept layout
        assert len(next(iter(run.layouts(name).values())).launches) == 4


def check_keys(run: Launchers) -> None:
    name = "2d, padded"
    x, w = run.operands(name)
    run.call(name, x, w, fresh=True)
    x3, _ = run.operands(name, batch=3)
    warm = run.call(name, x3, w)
    close(warm, name, x3, w)
    assert len(run.layouts(name)) == 2
    assert torch.equal(warm, run.call(name, x3, w, fresh=True))
    run.call(name, x, w)
    # the same values in another layout (w fastest, then h, c, n): copied and padded as x is
    strided = x.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    assert not strided.is_contiguous() and torch.equal(strided, x)
    warm = run.call(name, strided, w)
    close(warm, name, x, w)
    assert len(run.layouts(name)) == 2 + 1
    assert torch.equal(warm, run.call(name, strided, w, fresh=True))


def check_in_place(run: Launchers) -> None:
    """Without padding and with the copy off, the kernel reads x as it is: NCHW and channels-last
    inputs of one shape have different offsets (and runs), so one kept layout cannot serve both."""
    name = "2d, unpadded"
    mod, fn = run.found[name]
    setattr(mod, f"{fn.upper()}_INPUT_COPY", 0)
    x, w = run.operands(name)
    cl = x.contiguous(memory_format=torch.channels_last)
    first = run.call(name, x, w, fresh=True)
    second = run.call(name, cl, w)
    layouts = list(run.layouts(name).values())
    close(first, name, x, w)
    close(second, name, x, w)
    assert len(layouts) == 2
    assert layouts[0].switches["RUN"] == 1 and layouts[1].switches["RUN"] == 8  # strided channels, contiguous ones
    assert torch.equal(second, run.call(name, cl, w, fresh=True))


def check_weight(run: Launchers) -> None:
    name = "transposed, stride 2"
    x, w = run.operands(name)
    before = run.call(name, x, w, fresh=True)
    w.mul_(-2.0).add_(0.25)
    after = run.call(name, x, w)
    assert len(run.layouts(name)) == 1
    assert not torch.allclose(before, after)
    close(after, name, x, w)
    assert torch.equal(after, run.call(name, x, w, fresh=True))


CHECKS = {
    **{f"warm, {name}": (lambda run, name=name: check_warm(run, name))
       for name in ("2d, padded", "transposed, stride 2", "grouped")},
    "keys": check_keys, "in place": check_in_place, "weight": check_weight,
}


def run_checks(paths_json: str) -> None:
    """In the subprocess: every check, its outcome ("ok" or the failed assertion's traceback)
    printed as JSON; any other error ends the process (the fixture shows its stderr)."""
    run = Launchers(json.loads(paths_json))
    outcomes = {}
    for name, check in CHECKS.items():
        try:
            check(run)
            outcomes[name] = "ok"
        except AssertionError:
            outcomes[name] = traceback.format_exc()
    print("OUTCOMES " + json.dumps(outcomes))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("conv_cache")
    paths = {}
    for i, (name, (text, _, _)) in enumerate(FORMS.items()):
        op = tmp / f"op_{i}.py"
        op.write_text(text)
        paths[name] = str(tmp / f"candidate_{i}.py")
        Path(paths[name]).write_text(next(p.source for p in plan(ctx_for(op, "cuda")) if p.origin == "template:conv"))
    here = Path(__file__).resolve().parent
    proc = run_script(RUNNER.format(here=str(here), tests=str(here.parent)), [json.dumps(paths)],
                      {**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("OUTCOMES ")]
    assert lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("OUTCOMES "):])


@pytest.mark.slow  # convolutions under the interpreter, in a subprocess
@pytest.mark.parametrize("check", CHECKS)
def test_the_kept_layout(outcomes, check):
    """warm: a warm cache gives the fresh output bit for bit (a 2D convolution, a transposed one of
    stride 2 (four phases), a grouped one) and adds no entry; keys: another batch size, and the
    same values in other strides, add one entry each, their outputs right; in place: NCHW and
    channels-last inputs read in place are two entries, both right; weight: a weight changed in
    place between calls gives the new result."""
    assert outcomes[check] == "ok", outcomes[check]
