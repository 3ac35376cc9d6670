"""Host time of the implicit-GEMM convolution's launcher plan (conv_plan.py.tmpl's _ConvPlan) per
call, at real sizes of the development set's convolutions: the template as a git revision has it
(`--before`, default the commit before the layout was kept per key) against the working tree's,
the latter with its kept layouts cleared before each call (cold: a first call) and kept (warm:
every later call at the same shapes).

    python3 bench/conv_plan_host.py [--before REV] [--repeat 20]

Each construction is timed with time.perf_counter (median of --repeat); on a GPU after a
synchronize, so the figure is the host's own time per call (the launches it enqueues run
asynchronously). Without a GPU the input's copy, a Triton kernel, cannot run at these sizes (the
interpreter would take hours), so the plan's _conv_input is replaced by what it returns without
the copy: the view of x, or an empty tensor of the padded copy's shape (on a GPU its launch
costs tens of microseconds of host time); and the weight's packing (a pad and an index_select
per phase, a GPU's asynchronous launches) is CPU work here, in one thread: a copy of the weight
per phase, milliseconds for VGG19's 9 MB weight. No kernel runs: host time, not a speed claim.
Prints a table; writes conv_plan_host.json under $OUT (default /tmp/out).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import statistics
import subprocess
import tempfile
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = "okgit/lower/kinds/conv_plan.py.tmpl"
GEMM_PLAN = "okgit/lower/kinds/gemm_plan.py.tmpl"  # the GEMM kind's helpers it uses: _tma_device, TensorDescriptor
HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"
# (problem, x's shape, w's shape, block_n as the conv kind picks it, settings): from the files
SHAPES = [
    ("level1/72 transposed 3D, grouped", (8, 32, 12, 24, 48), (32, 8, 3, 5, 7), 16,
     {"stride": (2, 2, 2), "padding": (1, 2, 3), "dilation": (1, 1, 1), "groups": 4, "transposed": True,
      "output_padding": (1, 1, 1)}),
    ("level2/43 3D", (4, 32, 32, 128, 128), (64, 32, 3, 3, 3), 64,
     {"stride": (1, 1, 1), "padding": (1, 1, 1), "dilation": (1, 1, 1), "groups": 1, "transposed": False,
      "output_padding": (0, 0, 0)}),
    ("level2/3 transposed 3D", (32, 32, 16, 32, 32), (32, 64, 3, 3, 3), 64,
     {"stride": (2, 2, 2), "padding": (1, 1, 1), "dilation": (1, 1, 1), "groups": 1, "transposed": True,
      "output_padding": (1, 1, 1)}),
    ("level3/12 VGG19 512->512 3x3", (10, 512, 14, 14), (512, 512, 3, 3), 128,
     {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1, "transposed": False,
      "output_padding": (0, 0)}),
]


def plan_module(text: str, name: str, folder: Path, device: torch.device) -> types.ModuleType:
    """The plan's template as a module (from a file: Triton reads its kernels' source); without a
    GPU its input copy stubbed (see the docstring)."""
    path = folder / f"{name}.py"
    path.write_text(HEADER + (ROOT / GEMM_PLAN).read_text() + "\n\n" + text)  # as a candidate carries both
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if device.type != "cuda":
        mod._conv_input = _input_without_copy
    return mod


def _input_without_copy(x, pads, copy, channels=None, tf32=False):
    """What _conv_input returns, without the copy's kernel (its values are never read here);
    `channels`: the copy's, where the template pads them (the "before" revision may not)."""
    if not any(lo or hi for lo, hi in pads) and (not copy or x.permute(0, 2, 3, 4, 1).is_contiguous()):
        return x.permute(0, 2, 3, 4, 1)
    return torch.empty((x.shape[0], *(s + lo + hi for s, (lo, hi) in zip(x.shape[2:], pads)), channels or x.shape[1]),
                       device=x.device)


def host_ms(mod: types.ModuleType, x, w, block_n: int, settings: dict, repeat: int, clear: bool) -> float:
    """Median host milliseconds of one _ConvPlan construction."""
    times = []
    tma = (1,) if "tma" in inspect.signature(mod._ConvPlan).parameters else ()  # a setting since the TMA path
    for _ in range(repeat + 1):  # the first one warms up (and fills the kept layouts)
        if clear and hasattr(mod, "_CONV_LAYOUTS"):
            mod._CONV_LAYOUTS.clear()
        if x.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        mod._ConvPlan(x, w, 128, block_n, 32, "tf32x3", 1, *tma, **settings)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="5f58155", help="git revision of the template to compare against")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":  # the weight's packing runs here: one thread, no waits on a shared CPU's pool
        torch.set_num_threads(1)
    shown = subprocess.run(["git", "show", f"{args.before}:{TEMPLATE}"], cwd=ROOT, capture_output=True, text=True,
                           check=False)
    folder = Path(tempfile.mkdtemp())
    # without git's history (a copy of the tree) no "before": cold is the same work per call
    before = plan_module(shown.stdout, "conv_plan_before", folder, device) if shown.returncode == 0 else None
    after = plan_module((ROOT / TEMPLATE).read_text(), "conv_plan_after", folder, device)
    rows = []
    print(f"host ms per _ConvPlan construction on {device} (median of {args.repeat})"
          + ("" if before else f"; no template at {args.before}: {shown.stderr.strip()}"))
    print(f"{'problem':36} {'before':>8} {'cold':>8} {'warm':>8}")
    for name, xs, ws, block_n, settings in SHAPES:
        x = torch.rand(xs, device=device)
        w = torch.rand(ws, device=device)
        row = {"problem": name, "x": xs, "w": ws,
               "before_ms": before and host_ms(before, x, w, block_n, settings, args.repeat, clear=False),
               "cold_ms": host_ms(after, x, w, block_n, settings, args.repeat, clear=True),
               "warm_ms": host_ms(after, x, w, block_n, settings, args.repeat, clear=False)}
        rows.append(row)
        was = f"{row['before_ms']:8.2f}" if before else f"{'-':>8}"
        print(f"{name:36} {was} {row['cold_ms']:8.2f} {row['warm_ms']:8.2f}")
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "conv_plan_host.json").write_text(json.dumps({"device": str(device), "repeat": args.repeat, "rows": rows},
                                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
