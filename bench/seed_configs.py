"""Why a static seed's kernel can run slower than the same-named kernel of torch.compile (GPU).

On the H200 (2026-12-04) L2/87's pointwise kernel took 2119 us in the static seed against 1274 us
in torch.compile, L2/91's softmax kernel 2329 against 967: same source, same sizes. This captures
the op static (okgit.inductor.capture, as the specialised seed does) and prints per kernel: the
config Inductor launched it with (None where it was not launched: the seed takes its first config), the
configs it had, the times its own benchmark gave each (ms), and the config the seed launches.
Then the seed file made of the capture and torch.compile of the reference are run under
torch.profiler: each kernel's device time in both.

    python bench/seed_configs.py OP.py [OP.py ...]

Writes seed_configs.json under $OUT (default /tmp/out).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch._inductor.runtime import triton_heuristics  # noqa: E402

from okgit.inductor import capture as cap_mod  # noqa: E402
from okgit.inductor.standalone import standalone_file  # noqa: E402

TIMINGS: dict[str, dict[str, float]] = {}


def _record_benchmarks() -> None:
    original = triton_heuristics.CachingAutotuner.benchmark_all_configs

    def bench(self: Any, *args: Any, **kwargs: Any) -> Any:
        timings = original(self, *args, **kwargs)
        TIMINGS[cap_mod._name(self)] = {str(launcher.config): float(t) for launcher, t in timings.items()}
        return timings

    triton_heuristics.CachingAutotuner.benchmark_all_configs = bench


def _kernel_times(fn: Any, inputs: list[Any]) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        for _ in range(3):
            fn(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn(*inputs)
            torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.key_averages():
        if e.device_time_total > 0:
            out[e.key[:90]] = round(e.device_time_total / 5, 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:6])


def one(path: Path) -> dict[str, Any]:
    records = []
    original = cap_mod._kernel

    def kernel(name: str, source: str, comment: str, chosen: Any) -> Any:
        k = original(name, source, comment, chosen)
        auto = cap_mod._load_kernel(name, source)
        records.append({"name": name, "launched_with": str(chosen) if chosen is not None else None,
                        "configs": [str(c) for c in auto.configs],
                        "seed_takes": {**k.kwargs, "num_warps": k.num_warps, "num_stages": k.num_stages},
                        "inductor_ms": TIMINGS.get(name)})
        return k

    cap_mod._kernel = kernel
    try:
        cap = cap_mod.capture(str(path), {}, "cuda", "default", dynamic=False)
    finally:
        cap_mod._kernel = original
    with tempfile.TemporaryDirectory() as tmp:
        seed = Path(tmp) / f"seed_{path.stem}.py"
        seed.write_text(standalone_file(path.read_text(), cap, "cuda"))
        spec = importlib.util.spec_from_file_location("seed_mod", seed)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).cuda()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
        ref_spec = importlib.util.spec_from_file_location("ref_mod", path)
        assert ref_spec and ref_spec.loader
        ref = importlib.util.module_from_spec(ref_spec)
        ref_spec.loader.exec_module(ref)
        torch.manual_seed(0)
        reference = ref.Model(*ref.get_init_inputs()).cuda()
        times = {"seed": _kernel_times(model, inputs), "compile": _kernel_times(torch.compile(reference), inputs)}
    return {"op": path.stem, "kernels": records, "times": times}


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    _record_benchmarks()
    rows = []
    for arg in sys.argv[1:]:
        try:
            row = one(Path(arg))
        except Exception as e:  # noqa: BLE001 - one op's failure is a row
            row = {"op": Path(arg).stem, "error": f"{type(e).__name__}: {e}"[:400]}
        rows.append(row)
        print(json.dumps(row, indent=1), flush=True)
        (out / "seed_configs.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
