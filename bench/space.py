"""The launch settings of the template kernels, explored on this GPU against eager and torch.compile.

    python3 bench/space.py [--problems 4-11] [--time-limit S] [--smoke]

For each example op, every template candidate (`plan()`, as `okgit optimize` proposes them) is
rendered with its default launch settings (the module constants `*_TILE`, `*_NUM_WARPS`, ...),
then each setting is walked over a fixed ladder of values while the others keep their best so
far (coordinate descent, two sweeps). Every variant is checked against the reference's eager
output before it is timed. This is where the templates' defaults come from: a class of
kernels (rows of 4096-8192 fp32, strided columns, ...) gets the settings that win here, never
one op by name.

Timing: triton.testing.do_bench (CUDA events, L2 cleared before each call, median of ~100 ms
of calls), the same for eager and torch.compile (default mode) in this one process. These are
exploration figures, not okgit's claims (those come from the evaluator and the sweep): the
table says so. Writes $OUT/space.json when OUT is set.

--smoke: CPU, Triton interpreter, problem 1 unless --problems, tiny shapes, one variant per setting, nothing
timed: the plumbing only. --defaults times each candidate as proposed, without the walk.
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

LADDERS = {  # by the suffix of the constant's name
    "NUM_WARPS": (2, 4, 8, 16, 32),
    "TILE": (1024, 2048, 4096, 8192, 16384, 32768),
    "BLOCK_N_MAX": (2048, 4096, 8192, 16384),
    "CHUNK": (512, 1024, 2048, 4096, 8192),
    "BLOCK_J": (16, 32, 64, 128, 256),
    "BLOCK_R": (4, 8, 16, 32, 64, 128),
    "BLOCK": (256, 512, 1024, 2048, 4096, 8192),
    "PROGRAMS": (132, 264, 528, 1056, 2112),
}
CONSTANT = re.compile(r"^([A-Z0-9_]+): int = (\d+)$", re.MULTILINE)


def ladder(name: str) -> tuple[int, ...]:
    for suffix in sorted(LADDERS, key=len, reverse=True):
        if name.endswith(suffix):
            return LADDERS[suffix]
    return ()


def with_settings(source: str, settings: dict[str, int]) -> str:
    return CONSTANT.sub(lambda m: f"{m[1]}: int = {settings.get(m[1], int(m[2]))}", source)


def load(source: str, name: str) -> types.ModuleType:
    # Triton's JIT reads kernel source with inspect: the module must live in a real file
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"okgit_space_{name}_{abs(hash(source))}.py"
    path.write_text(source)
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    sys.modules[path.stem] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def build(module: types.ModuleType, device: str, shrink: bool):
    import torch

    if shrink:  # smoke: the op's knobs at small values
        for k, v in list(vars(module).items()):
            if isinstance(v, int) and not isinstance(v, bool) and k.islower() and v > 8:
                setattr(module, k, 8)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to(device).eval()
    torch.manual_seed(1)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    return model, inputs


def leaves(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def agrees(got, want) -> bool:
    import torch

    g, w = leaves(got), leaves(want)
    return len(g) == len(w) and all(
        a.shape == b.shape and (torch.equal(a, b) if not a.is_floating_point()
                                else torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-4, equal_nan=True))
        for a, b in zip(g, w))


def timer(smoke: bool):
    if smoke:
        return lambda fn: (fn(), None)[1]
    import triton.testing

    return lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1000.0


def explore(source: str, tag: str, reference, inputs, want, bench, device: str, shrink: bool, deadline: float,
            walk: bool = True) -> dict:
    import torch

    defaults = {k: int(v) for k, v in CONSTANT.findall(source)}
    tried: dict[tuple, float | None] = {}

    def measure(settings: dict[str, int]) -> float | None:
        key = tuple(sorted(settings.items()))
        if key not in tried:
            try:
                model, _ = build(load(with_settings(source, settings), tag), device, shrink)
                model.load_state_dict(reference.state_dict())
                with torch.no_grad():
                    ok = agrees(model(*inputs), want)
                    tried[key] = (bench(lambda: model(*inputs)) if ok else None)
                if not ok:
                    print(f"    {tag} {settings}: DISAGREES with eager, not timed", flush=True)
            except Exception as e:  # noqa: BLE001 -- a setting the kernel cannot take (e.g. shared memory)
                print(f"    {tag} {settings}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}", flush=True)
                tried[key] = None
        return tried[key]

    best, best_us = dict(defaults), measure(defaults)
    default_us = best_us
    for _ in range(2 if walk else 0):
        for name in defaults:
            for value in ladder(name)[: 1 if shrink else None]:
                if time.monotonic() > deadline:
                    break
                us = measure({**best, name: value})
                if us is not None and (best_us is None or us < best_us):
                    best, best_us = {**best, name: value}, us
    ranked = sorted(((us, dict(k)) for k, us in tried.items() if us is not None), key=lambda t: t[0])
    return {"defaults": defaults, "default_us": default_us, "best": best, "best_us": best_us,
            "variants": len(tried), "top": [{"us": us, "settings": s} for us, s in ranked[:5]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", help="example numbers in file-name order, in the order to explore them, "
                                           "e.g. 11,5-8 (default 4-11; smoke: 1)")
    parser.add_argument("--time-limit", type=float, default=400.0)
    parser.add_argument("--defaults", action="store_true", help="time each candidate's default settings only")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        from okgit.backends.triton import interpret_on_cpu

        interpret_on_cpu()
    import torch

    from okgit.eval.types import Reference
    from okgit.problem import load_problem
    from okgit.search.proposers.templates import plan
    from okgit.search.types import Context

    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU: run with --smoke on a CPU", file=sys.stderr)
        return 3
    examples = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
    chosen = [examples[i - 1] for i in numbers(args.problems or ("1" if args.smoke else "4-11"))]
    bench = timer(args.smoke)
    deadline = time.monotonic() + args.time_limit
    rows = []
    for path in chosen:
        if time.monotonic() > deadline:
            print(f"time limit: {path.stem} and later not explored", flush=True)
            break
        problem = load_problem(path)
        proposals = plan(Context(problem=problem, reference=Reference(device=device, timed=False),
                                 backend="triton", device=device))
        ref_module = load(path.read_text(), "ref")
        reference, inputs = build(ref_module, device, args.smoke)
        with torch.no_grad():
            want = reference(*inputs)
            eager_us = bench(lambda: reference(*inputs))
            compiled = torch.compile(reference) if not args.smoke else None
            compile_us = bench(lambda: compiled(*inputs)) if compiled is not None else None
            if compiled is not None:
                torch._dynamo.reset()
        print(f"{path.stem}: eager {fmt(eager_us)}, torch.compile {fmt(compile_us)}, "
              f"{len(proposals)} template candidate(s)", flush=True)
        for p in proposals:
            found = explore(p.source, path.stem[:2], reference, inputs, want, bench, device, args.smoke, deadline,
                            walk=not args.defaults)
            rows.append({"op": path.stem, "origin": p.origin, "eager_us": eager_us, "compile_us": compile_us, **found})
            print(f"  {p.origin}: default {fmt(found['default_us'])} -> best {fmt(found['best_us'])} "
                  f"over {found['variants']} variants; best {changed(found)}", flush=True)
    print("\n| op | candidate | eager | torch.compile | default | best | best vs compile | changed settings |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        vs = f"{r['compile_us'] / r['best_us']:.2f}x" if r["compile_us"] and r["best_us"] else "-"
        print(f"| {r['op']} | {r['origin']} | {fmt(r['eager_us'])} | {fmt(r['compile_us'])} | {fmt(r['default_us'])} "
              f"| {fmt(r['best_us'])} | {vs} | {changed(r)} |")
    print("\nexploration figures (do_bench medians, one process), not okgit's claims"
          + ("; smoke: CPU, nothing timed" if args.smoke else f"; {torch.cuda.get_device_name(0)}"))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "space.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def numbers(spec: str) -> list[int]:
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def fmt(us: float | None) -> str:
    return f"{us:.1f} us" if us is not None else "-"


def changed(r: dict) -> str:
    return ", ".join(f"{k.split('_', 3)[-1]}={v}" for k, v in r["best"].items() if r["defaults"][k] != v) or "defaults"


if __name__ == "__main__":
    sys.exit(main())
