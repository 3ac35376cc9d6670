"""Pooling and grouped convolutions on this GPU: okgit's direct kernels against eager and torch.compile.

    python3 bench/pool_conv.py KB [--cases A,B] [--configs compact|full] [--no-compile] [--time-limit S] [--smoke]

KB holds level1/ and level2/ (a KernelBench checkout's KernelBench/ folder, or the checkout
itself; the lead's copy is `.kb/`). Every problem there whose reference the pooling or the grouped-convolution kind takes
(okgit/lower/kinds/pool.py, grouped_conv.py: recognised as `okgit optimize` does, never by
name) runs at its real size, then four synthetic cases (3D max-pool window 3, 2D max-pool with
dilation, 3D average pool with padding, depthwise 3D convolution). Per case:

- correctness: eager (PyTorch's default flags) and okgit's candidate against the reference
  computed with TF32 off; the candidate passes when its error is within max(2 x eager's,
  1e-4 x max|ref|) (okgit's rule: no worse than the reference itself);
- times (triton.testing.do_bench: CUDA events, L2 cleared before each call, warm-up, median):
  eager, torch.compile (default mode), the candidate over a set of launch settings of its
  pooling / convolution kernels (tiles of BLOCK_ROWS output rows by BLOCK_W outputs,
  ROW_LANES taps of a window row across lanes, NUM_WARPS; for a convolution ROLL_CHUNK, the
  outputs per program along the outermost window dim on its rolled path, 0 for its direct path,
  as set: the launcher keeps the direct path where that dim's stride or dilation is not 1; the
  rolled path's tile is ROLL_BLOCK = BLOCK_ROWS x BLOCK_W outputs, shaped by its launcher; a
  pooling's output rows each read their own input rows, SHARED_ROWS 0: bench/pool_speed.py
  times the shared rows),
  and that kernel alone (its launcher on the inputs the forward gave it);
- the copy-bandwidth floor: bytes in + out (inputs, parameters, outputs; for the kernel alone
  its operands and outputs) over --bandwidth (4.18 TB/s, docs MEASURED), and each time's
  fraction of it.

Prints one table, writes $OUT/pool_conv.json (OUT defaults to /tmp/out) after every case, and
stops starting cases after --time-limit seconds (the cases left are listed). Exploration figures
for setting the kinds' defaults over classes of problems, not okgit's claims.

--smoke: CPU, Triton interpreter, knobs halved to tiny inputs, two settings (a convolution's
rolled path a third), no torch.compile, nothing timed: the plumbing only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("pool", "grouped_conv")
SETTING = re.compile(r"^(FUSED_(?:POOL|GROUPED_CONV)_\d+)_(BLOCK_ROWS|BLOCK_W|ROW_LANES|NUM_WARPS|ROLL_CHUNK|ROLL_BLOCK): int = (\d+)$",
                     re.MULTILINE)
LAUNCHER = re.compile(r"^def (fused_(?:pool|grouped_conv)_\d+)\(", re.MULTILINE)
# (BLOCK_ROWS, BLOCK_W, ROW_LANES, NUM_WARPS, ROLL_CHUNK); ROW_LANES is capped by the window row in the
# launcher; ROLL_CHUNK (grouped convolutions only) > 0 takes the rolled path where the window allows,
# its tile ROLL_BLOCK = BLOCK_ROWS x BLOCK_W outputs (shaped by the launcher within one output plane)
CONFIGS = {
    "compact": [(4, 64, 1, 4, 0), (4, 64, 16, 4, 0), (1, 256, 1, 8, 0), (8, 64, 4, 8, 0),
                (1, 512, 1, 4, 16), (1, 256, 1, 4, 16), (1, 1024, 1, 8, 16), (1, 512, 1, 2, 16), (1, 512, 1, 4, 32)],
    "full": [(r, b, lanes, w, 0) for r in (1, 4) for b in (64, 256) for lanes in (1, 4, 16) for w in (4, 8)]
    + [(1, b, 1, w, run) for b in (256, 512, 1024, 2048) for w in (2, 4, 8) for run in (16, 32)],
}
SYNTHETIC = {  # name -> (module, input shape, knobs); sizes of KernelBench's level-1 classes
    "synthetic_max_pool3d_k3": ("nn.MaxPool3d(k, stride=2, padding=1)", "batch, channels, dim, dim, dim",
                                {"batch": 16, "channels": 32, "dim": 128, "k": 3}),
    "synthetic_max_pool2d_dilated": ("nn.MaxPool2d(k, stride=1, padding=1, dilation=2)", "batch, channels, dim, dim",
                                     {"batch": 32, "channels": 64, "dim": 512, "k": 3}),
    "synthetic_avg_pool3d_padded": ("nn.AvgPool3d(k, stride=2, padding=1)", "batch, channels, dim, dim, dim",
                                    {"batch": 16, "channels": 32, "dim": 128, "k": 3}),
    "synthetic_depthwise_conv3d": ("nn.Conv3d(channels, channels, k, padding=1, groups=channels)",
                                   "batch, channels, dim // 2, dim, dim", {"batch": 16, "channels": 64, "dim": 64, "k": 3}),
}


def synthetic_source(module: str, shape: str, knobs: dict[str, int]) -> str:
    """An op file of one synthetic case: its sizes are knobs, as in KernelBench."""
    lines = [
        "import torch", "import torch.nn as nn", "", "",
        "class Model(nn.Module):",
        "    def __init__(self, channels, k):",
        "        super().__init__()",
        f"        self.op = {module}",
        "",
        "    def forward(self, x):",
        "        return self.op(x)",
        "", "",
        *(f"{k} = {v}" for k, v in knobs.items()),
        "", "",
        "def get_inputs():",
        f"    return [torch.rand({shape})]",
        "", "",
        "def get_init_inputs():",
        "    return [channels, k]",
    ]
    return "\n".join(lines) + "\n"


def load(source: str, name: str, knobs: dict[str, int]) -> types.ModuleType:
    """The op file as a module with `knobs` set (Triton's JIT reads kernels from a real file)."""
    from okgit.problem import with_knobs

    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"okgit_poolconv_{name}_{abs(hash(source)) % 10**12}.py"
    path.write_text(source)
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    sys.modules[path.stem] = module
    exec(compile(with_knobs(source, str(path), knobs), str(path), "exec"), module.__dict__)
    return module


def tiny_knobs(source: str) -> dict[str, int]:
    """--smoke: knobs >= 8 halved until the inputs hold <= 12k elements (the interpreter runs a program at a time)."""
    from okgit.lower.trace import instantiate
    from okgit.problem import shape_knobs

    knobs = shape_knobs(source)
    while True:
        _, _, inputs = instantiate(source, knobs)
        big = {k: v // 2 for k, v in knobs.items() if v >= 8}
        if sum(t.numel() for t in inputs) <= 12_000 or not big:
            return knobs
        knobs.update(big)


def candidate(source: str, path: str, kinds: tuple[str, ...] = KINDS) -> tuple[str | None, str]:
    """okgit's first template candidate that uses one of `kinds`, and its origin (or why none)."""
    from okgit.eval.types import Reference
    from okgit.problem import load_problem
    from okgit.search.proposers.templates import plan
    from okgit.search.types import Context

    notes: list[str] = []
    ctx = Context(problem=load_problem(path, source=source), reference=Reference(device="cpu", timed=False),
                  backend="triton", device="cpu", log=lambda type, **f: notes.append(str(f.get("message"))))
    for p in plan(ctx):
        parts = p.origin.split(":")[1].split("+")
        if any(k in parts for k in kinds):
            return p.source, p.origin
    return None, "; ".join(notes) or "no candidate"


def cases(kb: Path, wanted: list[str]) -> list[tuple[str, str, str]]:
    """(name, source, path) of the dev-set problems with a pooling or grouped convolution, then
    the synthetic ones; only those whose name holds one of `wanted` when given."""
    if not (kb / "level1").is_dir() and (kb / "KernelBench" / "level1").is_dir():
        kb = kb / "KernelBench"  # a checkout's root
    out = []
    for level in ("level1", "level2"):
        for path in sorted((kb / level).glob("*.py"), key=lambda p: int(p.name.split("_")[0])):
            text = path.read_text()
            if re.search(r"Pool|pool|groups", text):
                out.append((f"{level}/{path.stem}", text, str(path)))
    for name, spec in SYNTHETIC.items():
        out.append((name, synthetic_source(*spec), f"{name}.py"))
    return [c for c in out if not wanted or any(w in c[0] for w in wanted)]


def built(source: str, cand: str, knobs: dict[str, int], device: str) -> tuple:
    """The op file and its candidate loaded with `knobs` on `device`: the candidate's module, the
    reference model, the candidate's (its weights), the inputs, the candidate's launchers by name
    and `calls`, where each launcher now records what the forward hands it."""
    import torch

    ref_mod, cand_mod = load(source, "ref", knobs), load(cand, "cand", knobs)
    torch.manual_seed(0)
    init = ref_mod.get_init_inputs()
    with torch.device(device):
        torch.manual_seed(1)
        model = ref_mod.Model(*init)
        torch.manual_seed(2)
        inputs = list(ref_mod.get_inputs())
    mine = (getattr(cand_mod, "ModelNew", None) or cand_mod.Model)(*init).to(device)
    mine.load_state_dict(model.state_dict())
    launchers = {n: getattr(cand_mod, n) for n in LAUNCHER.findall(cand)}
    calls: dict[str, tuple] = {}
    for n, fn in launchers.items():
        setattr(cand_mod, n, lambda *a, _n=n, _fn=fn: (calls.setdefault(_n, a), _fn(*a))[1])
    return cand_mod, model, mine, inputs, launchers, calls


def leaves(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def max_err(got, want) -> float:
    errs = [(g.double() - w.double()).abs().nan_to_num(0.0).max().item() for g, w in zip(leaves(got), leaves(want))]
    return max(errs, default=0.0)


def nbytes(tensors) -> int:
    import torch

    seen, total = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.nbytes
    return total


def run_case(name: str, source: str, path: str, args, bench, device: str, deadline: float) -> dict:
    import torch

    row: dict = {"case": name}
    cand, origin = candidate(source, path)
    row["origin"] = origin
    if cand is None:
        row["skipped"] = origin
        return row
    knobs = tiny_knobs(source) if args.smoke else {}
    row["knobs"] = knobs
    cand_mod, model, mine, inputs, launchers, calls = built(source, cand, knobs, device)
    with torch.no_grad():
        flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        want = model(*inputs)
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags
        out = model(*inputs)
        row["eager_err"] = max_err(out, want)
        scale = max((w.abs().nan_to_num(0.0).max().item() for w in leaves(want)), default=0.0)
        row["bytes"] = nbytes(list(inputs) + list(model.state_dict().values()) + leaves(out))
        row["floor_us"] = None if args.smoke else row["bytes"] / args.bandwidth * 1e6
        del out
        row["eager_us"] = None if args.smoke else bench(lambda: model(*inputs))
        names = sorted({m[0] for m in SETTING.findall(cand)})
        row["configs"] = []
        seen = set()
        rolls = any(f"{n}_ROLL_CHUNK: int" in cand for n in names)
        settings = CONFIGS["compact"] if args.smoke else CONFIGS[args.configs]
        if args.smoke:  # two settings of the direct path, one of the rolled path
            settings = settings[:2] + [next(c for c in settings if c[4])]
        for rows, block, lanes, warps, run in settings:
            if time.monotonic() > deadline:
                row["configs_cut"] = True
                break
            if run and not rolls:
                continue  # a pooling has no rolled path
            for n in names:
                setattr(cand_mod, f"{n}_BLOCK_ROWS", rows)
                setattr(cand_mod, f"{n}_BLOCK_W", block)
                setattr(cand_mod, f"{n}_ROW_LANES", lanes)
                setattr(cand_mod, f"{n}_NUM_WARPS", warps)
                setattr(cand_mod, f"{n}_ROLL_CHUNK", run)
                setattr(cand_mod, f"{n}_ROLL_BLOCK", rows * block)
                setattr(cand_mod, f"{n}_SHARED_ROWS", 0)  # a pooling's rows on their own (bench/pool_speed.py times both)
            calls.clear()
            got = mine(*inputs)
            lanes_used = _row_lanes(cand_mod, names, calls, lanes)
            if (rows, block, lanes_used, warps, run) in seen:
                continue  # the window row caps the lanes: the same kernel as one timed already
            seen.add((rows, block, lanes_used, warps, run))
            err = max_err(got, want)
            ok = err <= max(2 * row["eager_err"], 1e-4 * scale)
            del got
            conf = {"block_rows": rows, "block_w": block, "row_lanes": lanes_used, "num_warps": warps, "roll_chunk": run,
                    "err": err, "correct": ok}
            if ok:
                kernel = [(launchers[n], a) for n, a in calls.items()]
                outs = [fn(*a) for fn, a in kernel]
                conf["kernel_bytes"] = nbytes([t for _, a in kernel for t in a] + [t for o in outs for t in leaves(o)])
                del outs
                # the smoke times nothing: each call under the interpreter once is the plumbing
                conf["us"] = None if args.smoke else bench(lambda: mine(*inputs))
                conf["kernel_us"] = None if args.smoke else bench(lambda: [fn(*a) for fn, a in kernel])
            row["configs"].append(conf)
        timed = [c for c in row["configs"] if c.get("us") is not None]
        row["best"] = min(timed, key=lambda c: c["us"]) if timed else None
        row["correct"] = bool(row["configs"]) and all(c["correct"] for c in row["configs"])
        if not (args.no_compile or args.smoke) and time.monotonic() < deadline:
            compiled = torch.compile(model)
            got = compiled(*inputs)
            row["compile_err"] = max_err(got, want)
            del got
            row["compile_us"] = bench(lambda: compiled(*inputs))
            torch._dynamo.reset()
    return row


def _row_lanes(module, names: list[str], calls: dict, lanes: int) -> int:
    """The ROW_LANES a launch used: capped by the window row's width (next power of two)."""
    width = 1
    for n, a in calls.items():
        ks = a[1]  # every launcher's second argument is its window (pooling) or weight (convolution)
        if hasattr(ks, "shape"):
            k = int(ks.shape[-1])
        else:
            k = ks if isinstance(ks, int) else int(list(ks)[-1])
        width = max(width, 1 << max(0, (k - 1).bit_length()))
    return min(lanes, width)


def device_for(smoke: bool) -> str | None:
    """'cpu' under Triton's interpreter (`smoke`; set before triton is imported), else 'cuda',
    or None where there is no GPU."""
    if smoke:
        from okgit.backends.triton import interpret_on_cpu

        interpret_on_cpu()
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else None


def timer(smoke: bool):
    """A function that times a call in us: do_bench's median (CUDA events, L2 cleared before each
    call, warm-up); with `smoke` it runs the call once and gives None."""
    if smoke:
        def run_once(fn):
            fn()
            return None
        return run_once
    import triton.testing

    def bench(fn):
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1000.0
    return bench


def fmt(us) -> str:
    return "-" if us is None else f"{us:.0f}"


def ratio(a, b) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}"


def table(rows: list[dict]) -> str:
    lines = ["| case | origin | floor us | eager us | compile us | okgit us (ROWSxW/LANES/WARPS/RUN) | okgit/eager | "
             "okgit/compile | floor frac | kernel us | kernel floor frac | err eager / okgit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['case']} | skipped: {r['skipped'][:80]} |" + " |" * 10)
            continue
        b = r.get("best") or {}
        conf = f"{fmt(b.get('us'))} ({b['block_rows']}x{b['block_w']}/{b['row_lanes']}/{b['num_warps']}/{b['roll_chunk']})" if b else "-"
        kfloor = b.get("kernel_bytes", 0) / ARGS.bandwidth * 1e6 if b.get("kernel_us") else None
        errs = f"{r['eager_err']:.1e} / " + ("/".join(f"{c['err']:.1e}" for c in r["configs"][:1]) or "-")
        lines.append(
            f"| {r['case']} | {r['origin'].replace('template:', '')} | {fmt(r['floor_us'])} | {fmt(r['eager_us'])} | "
            f"{fmt(r.get('compile_us'))} | {conf}{'' if r['correct'] else ' INCORRECT'} | {ratio(r['eager_us'], b.get('us'))} | "
            f"{ratio(r.get('compile_us'), b.get('us'))} | {ratio(r['floor_us'], b.get('us'))} | {fmt(b.get('kernel_us'))} | "
            f"{ratio(kfloor, b.get('kernel_us'))} | {errs} |")
    return "\n".join(lines)


ARGS: argparse.Namespace


def main() -> int:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", type=Path, help="a folder with level1/ and level2/ (KernelBench/)")
    parser.add_argument("--cases", default="", help="comma-separated substrings of case names (default: all)")
    parser.add_argument("--configs", choices=sorted(CONFIGS), default="compact")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--time-limit", type=float, default=220.0, help="start no case after this many seconds")
    parser.add_argument("--bandwidth", type=float, default=4.18e12, help="copy bandwidth, bytes per second")
    parser.add_argument("--smoke", action="store_true")
    ARGS = args = parser.parse_args()
    device = device_for(args.smoke)
    if device is None:
        print("no CUDA GPU (--smoke runs on the CPU)", file=sys.stderr)
        return 3
    import torch

    bench = timer(args.smoke)
    start = time.monotonic()
    deadline = start + args.time_limit
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = cases(args.kb, [w for w in args.cases.split(",") if w])
    rows: list[dict] = []
    left: list[str] = []
    meta = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
            "smoke": args.smoke, "configs": args.configs, "bandwidth": args.bandwidth}
    for name, source, path in todo:
        if time.monotonic() > deadline:
            left.append(name)
            continue
        t0 = time.monotonic()
        try:
            row = run_case(name, source, path, args, bench, device, deadline)
        except Exception as e:  # noqa: BLE001 - one case's failure is its row, the others still run
            row = {"case": name, "origin": "", "skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
        row["wall_s"] = round(time.monotonic() - t0, 1)
        rows.append(row)
        print(f"{name}: {row.get('origin') or row.get('skipped')} ({row['wall_s']} s)", flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        (out_dir / "pool_conv.json").write_text(json.dumps({**meta, "rows": rows, "left": left}, indent=1))
    print()
    print(table(rows))
    if left:
        print(f"\nnot started (--time-limit {args.time_limit:.0f} s): {', '.join(left)}")
    print(f"\n{meta['device']}, torch {torch.__version__}, {time.monotonic() - start:.0f} s"
          + ("; smoke run: no time is claimed" if args.smoke else ""))
    (out_dir / "pool_conv.json").write_text(json.dumps({**meta, "rows": rows, "left": left}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
