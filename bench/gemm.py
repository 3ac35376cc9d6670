"""Split-precision fp32 GEMMs on this GPU: the gemm template's configurations and precision
variants, and the development set's GEMM-bound problems at their real sizes, against cuBLAS fp32
(eager, PyTorch's default flags) and torch.compile (default mode).

    python3 bench/gemm.py --kb .kb/KernelBench [--problems 1:3,6,9,12,15,18,87 2:39,51,55,59,63,75,95,99]
                          [--time-limit 280] [--no-compile] [--family-only | --no-family] [--smoke]

1. The family, on a bare GEMM (the template's own kernel, no epilogue) of each shape class at a
   development problem's size: square (4096^3), a linear (level-2 problem 63), a linear with a
   short side (problem 59's 128 rows), a long K (level-1 problem 6), a batched product (problem
   3), a tall-skinny one (problem 9, K 32) and a 2D operand shared by a batch (problem 87's 1x1
   convolution). Each shape's core configurations first: the defaults, the precisions autotune
   tries (bf16x3, bf16x6) and Triton's own tf32x3, the operands split ahead or inside the kernel
   against what the plan chose; each checked against float64 (max abs error, and the same over
   max|float64|) beside cuBLAS fp32's error, on uniform inputs (KernelBench's) and on zero-mean
   ones, then timed. The plan's choice (operands split ahead, TMA, K ranges) is recorded per run.
2. The problems: each file at its real size; eager (its error against float64 is the reference's
   own, what the evaluator's precision rule compares with), torch.compile, okgit's template
   candidates as `okgit optimize` proposes them (the split-precision GEMM first, then the vendor
   GEMM with its fused epilogue) at their defaults, and the GEMM candidate at bf16x3, autotune's
   first variant. `rule` says whether an arm's error is within 4x the reference's
   (docs/evaluation.md).
3. Then, time left, each family shape's launch settings one or two away from the defaults (tiles,
   stages, warps, persistent, warp-specialised, split-K), those the kind counts as not fitting in
   shared memory (okgit.lower.kinds.gemm.shared_bytes) listed, not run.

Timing: triton.testing.do_bench (CUDA events, L2 cleared before each call, median), in this one
process; TFLOP/s from the FLOPs torch's counter finds in the eager call. Exploration figures,
not okgit's claims. Stops starting new work after --time-limit seconds and reports what
finished (--family-only: parts 1 and 3; --no-family: part 2). Writes $OUT/gemm.json (OUT
defaults to /tmp/out). --smoke: CPU, Triton interpreter, tiny shapes and two problems of its
own, nothing timed: the plumbing only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import multiprocessing
import os
import re
import sys
import tempfile
import textwrap
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_PROBLEMS = "1:3,6,9,12,15,18,87 2:39,51,55,59,63,75,95,99"
RULE_MULTIPLE = 4.0  # okgit.eval.judge.tolerance.REF_ERROR_MULTIPLE
HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"

# name: (forward, input expressions, knobs, smoke knobs, configurations: core, then launch settings)
LINEAR = "torch.rand(m, k), (torch.rand(n, k) * 2 - 1) / k ** 0.5"  # nn.Linear's weight, as its init draws it
SHAPES = {
    "4096^3 matmul": ("torch.matmul(a, b)", "torch.rand(m, k), torch.rand(k, n)",
                      {"m": 4096, "k": 4096, "n": 4096}, {"m": 40, "k": 48, "n": 24}, "square"),
    "L2/63 linear 1024x8192x8192": ("F.linear(a, b)", LINEAR, {"m": 1024, "k": 8192, "n": 8192},
                                    {"m": 24, "k": 64, "n": 40}, "square"),
    "L2/59 linear 128x32768x32768": ("F.linear(a, b)", LINEAR, {"m": 128, "k": 32768, "n": 32768},
                                     {"m": 8, "k": 64, "n": 40}, "short"),
    "L1/6 long K 256x524288x256": ("torch.matmul(a, b)", "torch.rand(m, k), torch.rand(k, n)",
                                   {"m": 256, "k": 524288, "n": 256}, {"m": 16, "k": 512, "n": 16}, "long K"),
    "L1/3 bmm 128x512x1024x2048": ("torch.bmm(a, b)", "torch.rand(z, m, k), torch.rand(z, k, n)",
                                   {"z": 128, "m": 512, "k": 1024, "n": 2048}, {"z": 2, "m": 24, "k": 16, "n": 40},
                                   "batched"),
    "L1/9 tall-skinny 32768x32x32768": ("torch.matmul(a, b)", "torch.rand(m, k), torch.rand(k, n)",
                                        {"m": 32768, "k": 32, "n": 32768}, {"m": 40, "k": 16, "n": 24}, "tall"),
    "L1/87 1x1 conv as GEMM": ("torch.matmul(a, b)", "torch.rand(m, k) - 0.5, torch.rand(z, k, n)",
                               {"z": 16, "m": 128, "k": 64, "n": 1048576}, {"z": 2, "m": 24, "k": 16, "n": 40},
                               "batched"),
}
AHEAD = {"GEMM_SPLIT_AHEAD_MIN": 0, "GEMM_SPLIT_AHEAD_MIN_TMA": 0}  # operands split ahead whatever the shape
# Triton's tf32x3 is the defaults' path where they split inside; autotune tries bf16x3 and bf16x6
PRECISIONS = [{"PRECISION": "bf16x3"}, {"PRECISION": "bf16x6"}, {"PRECISION": "tf32x3"}]
CORE = [{}, *PRECISIONS, AHEAD]  # part 1, on every shape (AHEAD skipped where the defaults split ahead)
TILES = {  # part 3: launch settings per class, each fitting or listed as not fitting
    "square": [{"NUM_WARPS": 4}, {"NUM_WARPS": 16}, {"NUM_STAGES": 2}, {"BLOCK_K": 16, "NUM_STAGES": 4}, {"BLOCK_K": 64, "NUM_STAGES": 1},
               {"BLOCK_N": 256, "NUM_STAGES": 2}, {"BLOCK_M": 256, "NUM_STAGES": 2}, {"BLOCK_M": 64},
               {"BLOCK_M": 64, "NUM_WARPS": 4}, {"GROUP_M": 16}, {"WARP_SPECIALIZE": 1},
               {"PERSISTENT": 1, "NUM_STAGES": 2}, {"PERSISTENT": 1, "WARP_SPECIALIZE": 1, "NUM_STAGES": 2},
               {"PERSISTENT": 1}],
    "short": [{"NUM_WARPS": 4}, {"BLOCK_N": 256, "NUM_STAGES": 2}, {"BLOCK_M": 64}, {"PERSISTENT": 1, "NUM_STAGES": 2}],
    "long K": [{"SPLIT_K": 16}, {"SPLIT_K": 64}, {"SPLIT_K": 128}, {"BLOCK_K": 16, "NUM_STAGES": 4},
               {"PERSISTENT": 1, "NUM_STAGES": 2}],
    "batched": [{"NUM_WARPS": 4}, {"BLOCK_N": 256, "NUM_STAGES": 2}, {"PERSISTENT": 1, "NUM_STAGES": 2}],
    "tall": [{"NUM_WARPS": 4}, {"BLOCK_N": 256, "NUM_STAGES": 2}, {"BLOCK_M": 256, "NUM_STAGES": 2},
             {"NUM_STAGES": 1}, {"PERSISTENT": 1, "NUM_STAGES": 2}],
}
ZERO_MEAN = [{}, *PRECISIONS, {"PRECISION": "ieee"}]  # zero-mean inputs: where the precisions' errors part
SETTING = re.compile(r"^(FUSED_GEMM_\d+_)?(\w+): (int|str) = (.*)$", re.MULTILINE)  # a group's, or the helper's


def op_source(forward: str, inputs: str, knobs: dict[str, int]) -> str:
    """An op file whose forward is `forward` over inputs a (and b), its knobs at `knobs`."""
    args = ", ".join(sorted(set(re.findall(r"\b([ab])\b", forward))))
    return HEADER + "\n".join([
        "class Model(nn.Module):",
        f"    def forward(self, {args}):",
        f"        return {forward}",
        "",
        *[f"{k} = {v}" for k, v in knobs.items()],
        "",
        "def get_inputs():",
        f"    return [{inputs}]",
        "",
        "def get_init_inputs():",
        "    return []",
    ]) + "\n"


def with_settings(source: str, settings: dict) -> str:
    def put(m: re.Match) -> str:
        value = settings.get(m[2])
        return m[0] if value is None else f"{m[1] or ''}{m[2]}: {m[3]} = {json.dumps(value)}"

    return SETTING.sub(put, source)


def load(source: str, name: str) -> types.ModuleType:
    # Triton's JIT reads kernel source with inspect: the module must live in a real file
    path = Path(tempfile.gettempdir()) / f"okgit_gemm_{name}_{abs(hash(source))}.py"
    path.write_text(source)
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    sys.modules[path.stem] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def render(path: str, device: str) -> dict:
    """okgit's template candidates for one op file, as `okgit optimize` proposes them (a worker
    process: capture is CPU work)."""
    from okgit.eval.types import Reference
    from okgit.lower.graph import Unsupported
    from okgit.problem import load_problem
    from okgit.search.proposers.templates import plan
    from okgit.search.types import Context

    notes: list[str] = []
    try:
        proposals = plan(Context(problem=load_problem(path), reference=Reference(device=device, timed=False),
                                 backend="triton", device=device, log=lambda _t, **f: notes.append(f.get("message", ""))))
    except (Unsupported, OSError) as e:
        return {"candidates": [], "notes": [str(e)]}
    return {"candidates": [(p.origin, p.source) for p in proposals], "notes": notes}


def build(module: types.ModuleType, device: str, knobs: dict[str, int] | None = None):
    """The module's entry (ModelNew where it has one) and its inputs, drawn on the device."""
    import torch

    for k, v in (knobs or {}).items():
        setattr(module, k, v)
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(module, "ModelNew", module.Model)(*module.get_init_inputs())
        torch.manual_seed(1)
        inputs = list(module.get_inputs())
    return model, inputs


def leaves(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def error(got, want64) -> dict:
    """Max abs error against float64 and the same over max|float64|, in chunks (outputs reach 2^31 elements)."""
    worst = scale = 0.0
    for g, w in zip(leaves(got), leaves(want64), strict=True):
        g, w = g.reshape(-1), w.reshape(-1)
        for i in range(0, g.numel(), 1 << 27):
            d = (g[i:i + (1 << 27)].double() - w[i:i + (1 << 27)]).abs()
            worst = max(worst, float(d.nan_to_num(float("inf")).max()))
            scale = max(scale, float(w[i:i + (1 << 27)].abs().max()))
    return {"abs": worst, "rel": worst / scale if scale else None, "scale": scale}


def within_rule(err: dict, ref: dict) -> bool:
    return err["abs"] <= max(RULE_MULTIPLE * ref["abs"], 32 * 2.0**-24 * ref["scale"])


class Bench:
    def __init__(self, args) -> None:
        import torch

        from okgit.eval.worker.calls import pin_flags

        self.torch, self.smoke, self.device = torch, args.smoke, "cpu" if args.smoke else "cuda"
        self.deadline = time.monotonic() + args.time_limit
        pin_flags(torch)  # PyTorch's default library flags, as the evaluator pins them in both arms
        if not args.smoke:
            import triton.testing

            self.do_bench = triton.testing.do_bench

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def run(self, fn, want64, timed: bool = True) -> tuple[dict | None, float | None, str | None]:
        """(error against float64, median us) of one arm, or why it failed."""
        torch = self.torch
        try:
            with torch.no_grad():
                err = error(fn(), want64)
                us = None if self.smoke or not timed else self.do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e3
                return err, us, None
        except Exception as e:  # noqa: BLE001 - a configuration the kernel cannot take (shared memory, ...)
            return None, None, f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"
        finally:
            if self.device == "cuda":
                torch.cuda.empty_cache()


def flop_count(fn) -> float:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def kernel_times(torch, fn, calls: int, top: int = 8) -> list[list]:
    """The kernels of `calls` calls of fn by device time (torch.profiler; on a CPU its operators by
    their own time), after one call to warm up: [name, us a call, launches a call], the longest
    first, `top` of them (where an arm's time goes: its GEMMs or convolution, its epilogue)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    gpu = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with torch.no_grad():
        fn()  # a first call's compiles and allocations are not what a call spends
        with profile(activities=activities) as prof:
            for _ in range(calls):
                fn()
            if gpu:
                torch.cuda.synchronize()
    kind = DeviceType.CUDA if gpu else DeviceType.CPU
    found = [(e.key, (e.self_device_time_total if gpu else e.self_cpu_time_total) / calls, e.count / calls)
             for e in prof.key_averages() if e.device_type == kind]
    return [[name, round(us, 1), round(n, 2)] for name, us, n in sorted(found, key=lambda t: -t[1])[:top]]


def shared_need(source: str, settings: dict) -> int:
    """Shared memory the GEMM group of `source` takes with `settings` changed, as the kind counts it."""
    from okgit.lower.kinds.gemm import shared_bytes

    current = {m[2]: json.loads(m[4]) for m in SETTING.finditer(source) if m[1]}
    return shared_bytes({**current, **settings})


def record_plans(module: types.ModuleType) -> list[dict]:
    """What each _GemmPlan the module's GEMM makes chose (operands split ahead, TMA, K ranges), as it runs."""
    seen: list[dict] = []

    class Recording(module._GemmPlan):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            seen.append({"ahead": self.switches["SPLIT"], "tma": self.switches["TMA"], "split_k": self.split_k,
                         "store": self.switches.get("STORE"), "persistent": self.switches["PERSISTENT"]})

    module._GemmPlan = Recording
    return seen


def render_shapes(b: Bench, pool, tmp: Path) -> dict:
    ops = {}
    for i, (name, (forward, inputs, knobs, small, _)) in enumerate(SHAPES.items()):
        path = tmp / f"shape{i}.py"
        path.write_text(op_source(forward, inputs, small if b.smoke else knobs))
        ops[name] = (path, pool.submit(render, str(path), b.device))
    return ops


def family(b: Bench, rows: list, ops: dict, tiles: bool) -> None:
    """Part 1 (each shape's CORE configurations, uniform then zero-mean inputs) or part 3 (its TILES)."""
    from okgit.lower.kinds.gemm import SHARED_LIMIT

    torch = b.torch
    for name, (_, _, _, _, cls) in SHAPES.items():
        path, rendered = ops[name]
        source = next(s for o, s in rendered.result()["candidates"] if o.startswith("template:gemm"))
        model, args = build(load(path.read_text(), "ref"), b.device)
        for zero_mean in (False,) if tiles else (False, True):
            if b.out_of_time():
                print(f"time limit: family {'launch settings' if tiles else 'shape'} {name} and later not run", flush=True)
                return
            if zero_mean:
                args = [x - x.mean() for x in args]
            flops = flop_count(lambda: model(*args))
            with torch.no_grad():
                want64 = model(*[x.double() for x in args])
            ref_err, ref_us, _ = b.run(lambda: model(*args), want64, timed=not zero_mean)
            print(f"{name}{', zero-mean inputs' if zero_mean else ''}{', launch settings' if tiles else ''}: cuBLAS fp32 "
                  f"{fmt_us(ref_us)} {tflops(flops, ref_us)} error {fmt_err(ref_err)}", flush=True)
            configs = TILES[cls] if tiles else ZERO_MEAN if zero_mean else CORE
            default_plan: dict = {}
            for settings in configs[: 2 if b.smoke else None]:
                if b.out_of_time():
                    break
                if settings == AHEAD and default_plan.get("ahead"):
                    continue  # the defaults already split ahead
                row = {"part": "family", "shape": name, "class": cls, "zero_mean": zero_mean, "settings": settings,
                       "tiles": tiles, "flops": flops, "cublas_us": ref_us, "cublas_err": ref_err, "us": None,
                       "err": None, "rule": None, "plan": None, "error": None}
                need = shared_need(source, settings)
                if need > SHARED_LIMIT:
                    row["error"] = f"does not fit: {need} bytes of shared memory (limit {SHARED_LIMIT})"
                else:
                    module = load(with_settings(source, settings), "cand")
                    plans = record_plans(module)
                    cand, _ = build(module, b.device)
                    row["err"], row["us"], row["error"] = b.run(lambda cand=cand: cand(*args), want64, timed=not zero_mean)
                    row["plan"] = plans[-1] if plans else None
                    row["rule"] = within_rule(row["err"], ref_err) if row["err"] and ref_err else None
                if not settings:
                    default_plan = row["plan"] or {}
                rows.append(row)
                print(f"  {label(settings):40s} {row['error'] or fmt_us(row['us']) + ' ' + tflops(flops, row['us'])} "
                      f"error {fmt_err(row['err'])} rule {fmt_rule(row['rule'])} {fmt_plan(row['plan'])}", flush=True)
            want64 = None  # freed before the next shape's tensors
        model = args = None


def problems(b: Bench, files: list[tuple[str, Path]], compile_too: bool, rows: list, pool) -> None:
    torch = b.torch
    rendered = {key: pool.submit(render, str(path), b.device) for key, path in files}
    for key, path in files:
        if b.out_of_time():
            print(f"time limit: {key} and later not run", flush=True)
            break
        found = rendered[key].result()
        tag = key.replace("/", "_")
        ref_module = load(path.read_text(), tag)
        knobs = smoke_knobs(ref_module) if b.smoke else None
        model, args = build(ref_module, b.device, knobs)
        row: dict = {"part": "problem", "key": key, "file": path.name, "notes": found["notes"][:3], "arms": {},
                     "flops": flop_count(lambda: model(*args))}
        with torch.no_grad():
            want64 = copy.deepcopy(model).double()(*[x.double() if x.is_floating_point() else x for x in args])
        arms = [("eager", model)]
        for origin, source in found["candidates"]:
            # the GEMM candidate, then at bf16x3: autotune's first variant of it
            variants = [(origin, source)] + ([(f"{origin} precision=bf16x3", with_settings(source, {"PRECISION": "bf16x3"}))]
                                             if origin.startswith("template:gemm") else [])
            for arm, text in variants:
                cand, _ = build(load(text, tag + "_cand"), b.device, knobs)
                cand.load_state_dict(model.state_dict())
                arms.append((arm, cand))
        if compile_too and not b.smoke:
            arms.append(("torch.compile", torch.compile(model)))
        for arm, fn in arms:
            err, us, why = b.run(lambda fn=fn: fn(*args), want64)
            row["arms"][arm] = {"us": us, "err": err, "error": why}
        torch._dynamo.reset()
        ref = row["arms"]["eager"]["err"]
        for arm in row["arms"].values():
            arm["rule"] = within_rule(arm["err"], ref) if arm["err"] and ref else None
        rows.append(row)
        print(problem_line(row), flush=True)
        want64 = model = args = arms = None  # freed before the next problem's tensors


def smoke_knobs(module) -> dict[str, int]:
    """The op's size knobs at 24 at most: sizes the interpreter runs in seconds."""
    return {k: 24 for k, v in vars(module).items() if isinstance(v, int) and not isinstance(v, bool) and k.islower() and v > 24}


def problem_files(kb: Path, spec: str) -> list[tuple[str, Path]]:
    out = []
    for item in spec.split():
        level, ids = item.split(":")
        for i in ids.split(","):
            hits = sorted((kb / f"level{level}").glob(f"{i}_*.py"))
            if hits:
                out.append((f"L{level}/{i}", hits[0]))
            else:
                print(f"L{level}/{i}: no file under {kb / f'level{level}'}", flush=True)
    return out


def problem_line(row: dict) -> str:
    arms = row["arms"]
    parts = [f"{row['key']} {row['file'][:40]}: {row['flops'] / 1e9:.1f} GFLOP"]
    for arm, r in arms.items():
        parts.append(f"  {arm}: " + (r["error"] or f"{fmt_us(r['us'])} {tflops(row['flops'], r['us'])} error {fmt_err(r['err'])} "
                                                   f"rule {fmt_rule(r['rule'])}"))
    if not any(a.startswith("template:gemm") for a in arms):
        parts.append(f"  no split-precision GEMM candidate: {'; '.join(row['notes']) or 'no GEMM in the graph'}")
    return "\n".join(parts)


def summary(rows: list) -> list[str]:
    out = ["", "| shape | cuBLAS fp32 | defaults | their plan | error: defaults / cuBLAS | fastest within the rule "
           "| its settings |", "|---|---|---|---|---|---|---|"]
    for shape in dict.fromkeys(r["shape"] for r in rows if r["part"] == "family"):
        timed = [r for r in rows if r["part"] == "family" and r["shape"] == shape and not r["zero_mean"]]
        default = next((r for r in timed if not r["settings"]), None)
        if default is None:
            continue
        passing = [r for r in timed if r["rule"] and r["us"] is not None]
        best = min(passing, key=lambda r: r["us"]) if passing else default
        out.append(f"| {shape} | {fmt_us(default['cublas_us'])} {tflops(default['flops'], default['cublas_us'])} "
                   f"| {fmt_us(default['us'])} {tflops(default['flops'], default['us'])} | {fmt_plan(default['plan'])} "
                   f"| {fmt_rel(default['err'])} / {fmt_rel(default['cublas_err'])} "
                   f"| {fmt_us(best['us'])} {tflops(best['flops'], best['us'])} | {label(best['settings'])} |")
    out += ["", "| problem | eager us | torch.compile us | okgit GEMM us | vs compile | TFLOP/s | error eager | error okgit "
            "| rule | at bf16x3 | rule |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in (r for r in rows if r["part"] == "problem"):
        a = row["arms"]
        gemm = next((v for k, v in a.items() if k.startswith("template:gemm") and "precision=" not in k), {})
        bf16x3 = next((v for k, v in a.items() if k.endswith("precision=bf16x3")), {})
        comp = a.get("torch.compile", {})
        vs = f"{comp['us'] / gemm['us']:.2f}x" if comp.get("us") and gemm.get("us") else "-"
        out.append(f"| {row['key']} | {fmt_us(a['eager']['us'])} | {fmt_us(comp.get('us'))} | {fmt_us(gemm.get('us'))} | {vs} "
                   f"| {tflops(row['flops'], gemm.get('us'))} | {fmt_err(a['eager']['err'])} | {fmt_err(gemm.get('err'))} "
                   f"| {fmt_rule(gemm.get('rule'))} | {fmt_us(bf16x3.get('us'))} | {fmt_rule(bf16x3.get('rule'))} |")
    return out


def label(settings: dict) -> str:
    return ", ".join(f"{k.lower()}={v}" for k, v in settings.items()) or "defaults"


def fmt_us(us: float | None) -> str:
    return f"{us:.1f} us" if us is not None else "-"


def tflops(flops: float, us: float | None) -> str:
    return f"({flops / us / 1e6:.0f} TFLOP/s)" if us and flops else ""


def fmt_err(err: dict | None) -> str:
    return f"{err['abs']:.2e} abs, {err['rel']:.1e} of max" if err and err["rel"] is not None else "-"


def fmt_rel(err: dict | None) -> str:
    return f"{err['rel']:.1e}" if err and err["rel"] is not None else "-"


def fmt_rule(ok: bool | None) -> str:
    return "-" if ok is None else ("pass" if ok else "FAIL")


def fmt_plan(plan: dict | None) -> str:
    if not plan:
        return "-"
    ranges = f", {plan['split_k']} K ranges" if plan["split_k"] > 1 else ""
    return f"[{'ahead' if plan['ahead'] else 'inside'}{', TMA' if plan['tma'] else ''}{ranges}]"


def smoke_kb(tmp: Path) -> Path:
    """Two tiny GEMM problems of its own, laid out as a KernelBench folder."""
    (tmp / "level1").mkdir(parents=True)
    (tmp / "level2").mkdir()
    (tmp / "level1" / "1_Matmul.py").write_text(op_source("torch.matmul(a, b)", "torch.rand(m, k), torch.rand(k, n)",
                                                          {"m": 40, "k": 48, "n": 24}))
    (tmp / "level2" / "2_Gemm_ReLU.py").write_text(HEADER + textwrap.dedent("""
    class Model(nn.Module):
        def __init__(self, k, n):
            super().__init__()
            self.fc = nn.Linear(k, n)

        def forward(self, x):
            return torch.relu(self.fc(x)) / 2.0

    batch = 33
    k = 40
    n = 24

    def get_inputs():
        return [torch.randn(batch, k)]

    def get_init_inputs():
        return [k, n]
    """))
    return tmp


def check_machine(args: argparse.Namespace, need_kb: bool, or_else: str = "") -> int | None:
    """The exit status where this machine or --kb cannot run the script (no GPU without --smoke, no
    KernelBench folder), else None; --smoke turns Triton's interpreter on, args.kb becomes the folder
    holding level1/."""
    if args.smoke:
        from okgit.backends.triton import interpret_on_cpu

        interpret_on_cpu()
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA GPU: run with --smoke on a CPU", file=sys.stderr)
        return 3
    if args.kb is not None and (args.kb / "KernelBench").is_dir():
        args.kb = args.kb / "KernelBench"
    if not args.smoke and need_kb and (args.kb is None or not (args.kb / "level1").is_dir()):
        print(f"--kb: a KernelBench folder (holding level1/, level2/) is needed{or_else}", file=sys.stderr)
        return 2
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path, help="a KernelBench folder (level1/, level2/)")
    parser.add_argument("--problems", default=DEFAULT_PROBLEMS, help="LEVEL:ID,ID ... (default: %(default)s)")
    parser.add_argument("--time-limit", type=float, default=280.0)
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile arm (its compiles take most of the time)")
    parser.add_argument("--family-only", action="store_true", help="only the configurations on bare GEMMs (parts 1 and 3)")
    parser.add_argument("--no-family", action="store_true", help="only the problems (part 2)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    refused = check_machine(args, need_kb=not args.family_only, or_else=", or --family-only")
    if refused is not None:
        return refused
    import torch

    b = Bench(args)
    rows: list = []
    t0 = time.monotonic()
    # capture is CPU work: op files rendered 8 at a time; a smoke's tiny ones in one process (each
    # process imports torch and okgit's planner, seconds of CPU that a smoke's renders do not need)
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ProcessPoolExecutor(max_workers=1 if args.smoke else 8, mp_context=spawn) as pool:
        files = [] if args.family_only else problem_files(smoke_kb(Path(tmp)) if args.smoke else args.kb,
                                                          "1:1 2:2" if args.smoke else args.problems)
        shapes = {} if args.no_family else render_shapes(b, pool, Path(tmp))
        if shapes:
            family(b, rows, shapes, tiles=False)
        problems(b, files, not args.no_compile, rows, pool)
        if shapes:
            family(b, rows, shapes, tiles=True)
    lines = summary(rows)
    device = "smoke: CPU, Triton interpreter, nothing timed" if args.smoke else torch.cuda.get_device_name(0)
    lines += ["", f"exploration figures (do_bench medians, one process; {device}); {time.monotonic() - t0:.0f} s"]
    print("\n".join(lines), flush=True)
    out = Path(os.environ.get("OUT") or "/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    (out / "gemm.json").write_text(json.dumps({"device": device, "smoke": args.smoke, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
