"""Why torch.compile beats okgit's vendor-convolution candidates: the convolution's layout.

    python3 bench/convlayout.py [--problems 17,18,20]

For each example op with a Conv2d: do_bench medians (CUDA events, L2 cleared) of eager,
torch.compile (default mode), the convolution alone in NCHW (what okgit's vendor-conv
templates call), the convolution alone in channels_last with input and weight already
converted, the same with the input's conversion included, and the conversion of the
output back to NCHW. PyTorch's default precision flags (TF32 allowed in cuDNN). Exploration
figures, not okgit's claims.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from space import build, load, numbers  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="17,18,20")
    args = parser.parse_args()
    import torch
    import triton.testing

    if not torch.cuda.is_available():
        print("no CUDA GPU", file=sys.stderr)
        return 3
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1000.0  # noqa: E731
    examples = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
    print("| op | eager | torch.compile | conv NCHW | conv channels_last | + input to channels_last | output back to NCHW |")
    print("|---|---|---|---|---|---|---|")
    for i in numbers(args.problems):
        path = examples[i - 1]
        model, inputs = build(load(path.read_text(), "conv"), "cuda", False)
        conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
        x = inputs[0]
        w, b = conv.weight, conv.bias
        xc, wc = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            compiled = torch.compile(model)
            compiled(*inputs)
            yc = conv._conv_forward(xc, wc, b)
            row = [bench(lambda: model(*inputs)), bench(lambda: compiled(*inputs)),
                   bench(lambda: conv._conv_forward(x, w, b)), bench(lambda: conv._conv_forward(xc, wc, b)),
                   bench(lambda: conv._conv_forward(x.contiguous(memory_format=torch.channels_last), wc, b)),
                   bench(lambda: yc.contiguous())]
            torch._dynamo.reset()
        print(f"| {path.stem} | " + " | ".join(f"{us:.1f} us" for us in row) + " |", flush=True)
    print(f"\n{torch.cuda.get_device_name(0)}, torch {torch.__version__}, cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
