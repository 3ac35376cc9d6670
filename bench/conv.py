"""okgit's own convolutions (direct and implicit GEMM) on this GPU: the development set's
convolution problems at their real sizes, against cuDNN (eager, PyTorch's default flags) and torch.compile (default mode).

    python3 bench/conv.py --kb .kb/KernelBench [--problems "2:87,7 1:63"]
                          [--time-limit 150] [--no-compile] [--no-tiles | --direct-tiles | --tma] [--kernels] [--smoke]

Per problem, in one process: eager in NCHW and in channels_last (the two layouts the evaluator
measures the reference's own error in; the larger error is the reference's), torch.compile, and
okgit's template candidates as `okgit optimize` proposes them on a GPU (the vendor convolution
with its fused epilogue, the direct fp32 one for a short K, the implicit-GEMM
convolution in 3xTF32 and in TF32, the channels-last vendor one), each at its defaults; then the direct convolution, the TF32 convolution, and the
3xTF32 one where the TF32 one breaks the rule, over a compact set of tile settings, each one
setting away from the defaults. --tma instead: the implicit-GEMM kernel's TMA path against its pointer path (`_TMA` 0) at
the same tiles (the TF32 one at its defaults and at BLOCK_K 16, where 16 input channels fill a
K step; the 3xTF32 one at its defaults; these replace the two kinds' default arms), each arm
saying which operands its plan read through TMA, and a table of the pairs. --direct-tiles: the
direct convolution's tiles alone. --kernels: each arm at its defaults also run under
torch.profiler (KERNEL_CALLS calls), its kernels by device time a call kept in conv.json and, for
eager, torch.compile and okgit's fastest arm, printed: what each spends its time on (on a CPU,
its operators). Every arm's max abs error against float64 (the reference model in float64) is shown
beside the reference's, and `rule` says whether it is within 4x of it (or 32 ulps of the
output's magnitude): the evaluator's precision rule for contractions (docs/evaluation.md).

Timing: triton.testing.do_bench (CUDA events, L2 cleared before each call, median), in this one
process. Exploration figures, not okgit's claims (those come from its evaluator). One call stays
within about 4 minutes on an H200: it starts no problem and no tile setting after --time-limit
seconds (default 150), a problem already started skips its arms left after GRACE_S more (each
marked "time limit"), and the problems not started are printed as the next call's --problems;
they run in the order --problems gives. Writes $OUT/conv.json (OUT defaults to /tmp/out).
--smoke: CPU, Triton interpreter, tiny shapes and three problems of its own, nothing timed: the
plumbing only (with --tma, the plan finds TMA on the CPU: the tests' seam, `_tma_device`).
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/gemm.py: the harness both share

from gemm import (
    HEADER,
    Bench,
    build,
    check_machine,
    flop_count,
    fmt_err,
    fmt_rule,
    fmt_us,
    kernel_times,
    label,
    load,
    problem_files,
    render,
    smoke_knobs,
    tflops,
    with_settings,
    within_rule,
)

# each form early (2D and 3D with a fused epilogue, transposed 2D and 3D, lone, grouped), then the rest
DEFAULT_PROBLEMS = "2:87,7,91 1:63,57 2:15 1:54,75 2:47,67,71,35,3,27,43,79 1:60,66,69,72,78,81,87"
# one setting away from the defaults each; a few, since each is a Triton compile of its own (seconds)
TILES = [{"BLOCK_M": 64}, {"BLOCK_K": 64}, {"NUM_WARPS": 8}, {"NUM_STAGES": 4}, {"INPUT_COPY": 0}]
# the direct convolution's (kinds/conv_direct.py): its tile's shape and warps, one setting away;
# BLOCK_N 64: more output channels a thread, fewer shared-memory reads a multiply-add (ncu on L1/54:
# bound by them); BLOCK_M 256 the default before 2026-12-06 where BLOCK_N is 16
DIRECT_TILES = [{"BLOCK_M": 256}, {"BLOCK_M": 512}, {"BLOCK_N": 16}, {"BLOCK_N": 64}, {"NUM_WARPS": 8}]
# past --time-limit, a problem already started runs its arms this much longer at most: one arm
# (a torch.compile of a convolution: tens of seconds) may still overrun it
GRACE_S = 30.0
# --tma: per implicit-GEMM kind, its tile settings, each run with TMA on (the default) and off
TMA_TILES = {"template:conv_tf32": [{}, {"BLOCK_K": 16}], "template:conv": [{}]}
KERNEL_CALLS = 3  # profiled calls an arm (one in --smoke)
GROUP = re.compile(r"^(FUSED_CONV(?:_TF32|_DIRECT)?_\d+_)BLOCK_M: int", re.MULTILINE)


def conv_settings(source: str, settings: dict) -> str:
    """`settings` ({"BLOCK_M": 64}) applied to the convolution's launch constants in `source`."""
    prefix = GROUP.search(source)
    assert prefix is not None, "no convolution of okgit's own in this source"
    return with_settings(source, {prefix[1] + k: v for k, v in settings.items()})


def problems(b: Bench, files: list, compile_too: bool, tiles: str | None, tma: bool, rows: list, pool, save,
             kernels: bool = False) -> None:
    """`tiles`: whose tiles are walked ("all"; "direct": the direct convolution's only), or None;
    `kernels`: each arm at its defaults profiled too (kernel_times)."""
    from okgit.eval.worker import calls

    torch = b.torch
    rendered = {key: pool.submit(render, str(path), "cuda") for key, path in files}  # the GPU's candidates
    for i, (key, path) in enumerate(files):
        if b.out_of_time():
            print(f"time limit: {key} and later not run; left for the next call: --problems \"{spec(files[i:])}\"",
                  flush=True)
            for future in rendered.values():
                future.cancel()  # the renders not started yet: the pool's shutdown would wait for them
            break
        found = rendered[key].result()
        tag = key.replace("/", "_")
        module = load(path.read_text(), tag)
        knobs = smoke_knobs(module) if b.smoke else None
        model, args = build(module, b.device, knobs)
        row: dict = {"key": key, "file": path.name, "notes": found["notes"][:3], "arms": {},
                     "flops": flop_count(lambda: model(*args))}
        with torch.no_grad():
            want64 = copy.deepcopy(model).double()(*[x.double() if x.is_floating_point() else x for x in args])
        # the reference in the other layout, as the evaluator measures its own error (okgit.eval.worker.calls)
        cl_model, cl_args = calls.layout_twin(torch, model), calls.channels_last_inputs(torch, args)
        arms: list = [("eager", model, None)] + ([("eager channels_last", cl_model, cl_args)] if cl_model else [])
        sources = dict(found["candidates"])
        for origin, source in found["candidates"]:
            if not (tma and tma_kind(origin)):  # --tma: those at their defaults are its "tma=1" arms
                arms.append((origin, source, None))
        if compile_too and not b.smoke:
            arms.append(("torch.compile", torch.compile(model), None))
        for arm, what, own_args in arms:
            if time.monotonic() > b.deadline + GRACE_S:
                row["arms"][arm] = {"us": None, "err": None, "error": "time limit"}
                continue
            if isinstance(what, str):
                what, _ = build(load(what, tag + "_cand"), b.device, knobs)
                what.load_state_dict(model.state_dict())
            call = lambda fn=what, a=own_args or args: fn(*a)  # noqa: E731
            err, us, why = b.run(call, want64)
            row["arms"][arm] = {"us": us, "err": err, "error": why}
            if kernels and why is None:
                row["arms"][arm]["kernels"] = kernel_times(torch, call, 1 if b.smoke else KERNEL_CALLS)
        torch._dynamo.reset()
        ref = reference_error(row)
        for arm in row["arms"].values():
            arm["rule"] = within_rule(arm["err"], ref) if arm["err"] and ref else None
        if tma:
            tma_arms(b, row, sources, model, args, want64, ref, tag, knobs)
        elif tiles:
            for origin, walked in tile_arms(row, sources, tiles):
                for settings in walked[: 1 if b.smoke else None]:
                    if b.out_of_time():
                        break
                    module = load(conv_settings(sources[origin], settings), tag + "_tile")
                    row["arms"][f"{origin} {label(settings)}"] = setting_arm(b, module, model, args, want64, ref, knobs)
        rows.append(row)
        save()  # after each problem: a call killed from outside keeps what finished
        print("\n".join([problem_line(row), *(kernel_lines(row) if kernels else [])]), flush=True)
        want64 = model = cl_model = args = cl_args = arms = None  # freed before the next problem's tensors


def kernel_lines(row: dict) -> list[str]:
    """--kernels: eager's, torch.compile's and okgit's fastest arm's longest kernels, a line each."""
    ok = [(k, v) for k, v in row["arms"].items() if k.startswith("template:") and v.get("rule") and v.get("us")]
    best = min(ok, key=lambda kv: kv[1]["us"])[0] if ok else None
    out = []
    for arm in ("eager", "torch.compile", best):
        found = (row["arms"].get(arm) or {}).get("kernels") if arm else None
        if found:
            total = sum(k[1] for k in found)
            out.append(f"  kernels of {arm} (us a call; {total:.0f} in these): "
                       + "; ".join(f"{name[:60]} {us:.0f}" + (f" x{n:g}" if n != 1 else "") for name, us, n in found[:5]))
    return out


def setting_arm(b: Bench, module, model, args, want64, ref, knobs) -> dict:
    """One candidate module at settings of its own, with the reference's weights: its time, its
    error against float64 and whether that is within the rule."""
    cand, _ = build(module, b.device, knobs)
    cand.load_state_dict(model.state_dict())
    err, us, why = b.run(lambda fn=cand: fn(*args), want64)
    return {"us": us, "err": err, "error": why, "rule": within_rule(err, ref) if err and ref else None}


def tma_arms(b: Bench, row: dict, sources: dict[str, str], model, args, want64, ref, tag: str, knobs) -> None:
    """--tma: each implicit-GEMM kind's TMA_TILES with TMA on and off, and which operands went through TMA."""
    for kind, settings_list in TMA_TILES.items():
        origin = next((o for o in sources if tma_kind(o) == kind), None)
        for settings, tma in ((s, t) for s in settings_list for t in (1, 0)) if origin else ():
            if b.out_of_time():
                return
            module = load(conv_settings(sources[origin], {**settings, "TMA": tma}), tag + "_tma")
            if b.smoke:
                module._tma_device = lambda device: True  # the tests' seam: the CPU's interpreter runs descriptors
            arm = setting_arm(b, module, model, args, want64, ref, knobs)
            used = [(layout.switches["TMA_A"], layout.switches["TMA_B"]) for layout in module._CONV_LAYOUTS.values()]
            arm["tma"] = sorted({"A+B" if a and w else "B" if w else "A" if a else "none" for a, w in used})
            row["arms"][f"{origin} {label({**settings, 'tma': tma})}"] = arm


def tma_kind(origin: str) -> str | None:
    """The TMA_TILES kind a candidate's origin ("template:conv_tf32+rows") is of, if any."""
    return next((k for k in TMA_TILES if origin == k or origin.startswith(k + "+")), None)


def tma_summary(rows: list) -> list[str]:
    """--tma: per problem and setting, the TMA path's time against the pointer path's."""
    out = ["", "| problem | arm | TMA us | pointers us | pointers / TMA | TMA path | error TMA | error pointers |",
           "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for arm, on in row["arms"].items():
            off = row["arms"].get(arm.replace("tma=1", "tma=0"))
            if "tma=1" not in arm or off is None:
                continue
            ratio = f"{off['us'] / on['us']:.2f}x" if on.get("us") and off.get("us") else "-"
            out.append(f"| {row['key']} | {arm.replace(', tma=1', '').replace('tma=1', 'defaults')} "
                       f"| {on['error'] or fmt_us(on['us'])} | {off['error'] or fmt_us(off['us'])} | {ratio} "
                       f"| {'/'.join(on.get('tma', [])) or '-'} | {fmt_err(on['err'])} | {fmt_err(off['err'])} |")
    return out


def spec(files: list) -> str:
    """Problem keys ("L2/7") as --problems takes them ("2:7,47 1:54"), in their order."""
    runs: list[tuple[str, list[str]]] = []  # consecutive problems of one level
    for key, _ in files:
        level, i = key.removeprefix("L").split("/")
        if runs and runs[-1][0] == level:
            runs[-1][1].append(i)
        else:
            runs.append((level, [i]))
    return " ".join(f"{level}:{','.join(ids)}" for level, ids in runs)


def tile_arms(row: dict, sources: dict[str, str], tiles: str = "all") -> list[tuple[str, list[dict]]]:
    """The candidates whose tiles are explored, each with its settings: the direct convolution,
    the TF32 implicit GEMM, and the 3xTF32 one where the TF32 one breaks the rule (or is not there);
    `tiles` "direct": the first alone."""
    def origin(kind: str) -> str | None:
        return next((o for o in sources if o == kind or o.startswith(kind + "+")), None)

    direct, tf32, x3 = origin("template:conv_direct"), origin("template:conv_tf32"), origin("template:conv")
    out = [(direct, DIRECT_TILES)] if direct else []
    if tiles == "direct":
        return out
    out += [(tf32, TILES)] if tf32 else []
    if x3 and not (tf32 and row["arms"][tf32]["rule"]):
        out.append((x3, TILES))
    return out


def reference_error(row: dict) -> dict | None:
    """The reference's own error: the worse of its two layouts, as the evaluator takes it."""
    errs = [row["arms"][a]["err"] for a in ("eager", "eager channels_last") if (row["arms"].get(a) or {}).get("err")]
    return max(errs, key=lambda e: e["abs"]) if errs else None


def problem_line(row: dict) -> str:
    parts = [f"{row['key']} {row['file'][:48]}: {row['flops'] / 1e9:.1f} GFLOP"]
    for arm, r in row["arms"].items():
        parts.append(f"  {arm}: " + (r["error"] or f"{fmt_us(r['us'])} {tflops(row['flops'], r['us'])} error "
                                                   f"{fmt_err(r['err'])} rule {fmt_rule(r['rule'])}")
                     + (f" (TMA: {'/'.join(r['tma']) or '-'})" if "tma" in r else ""))
    if not any(a.startswith("template:conv") for a in row["arms"]):
        parts.append(f"  no candidate with a convolution of okgit's own: {'; '.join(row['notes']) or 'no convolution in the graph'}")
    return "\n".join(parts)


def best_conv(row: dict) -> tuple[str, dict] | None:
    """okgit's fastest convolution of its own (direct or implicit GEMM) within the rule."""
    ok = [(k, v) for k, v in row["arms"].items() if k.startswith("template:conv") and not k.startswith(
        "template:conv_cl") and v["rule"] and v["us"] is not None]
    return min(ok, key=lambda kv: kv[1]["us"]) if ok else None


def summary(rows: list) -> list[str]:
    out = ["", "| problem | eager us | torch.compile us | okgit conv us | vs compile | vs eager | TFLOP/s | error ref "
               "| error okgit | the arm |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        a = row["arms"]
        best = best_conv(row)
        arm, conv = best if best else ("-", {})
        comp, eager = a.get("torch.compile", {}), a["eager"]
        vs = f"{comp['us'] / conv['us']:.2f}x" if comp.get("us") and conv.get("us") else "-"
        vs_eager = f"{eager['us'] / conv['us']:.2f}x" if eager.get("us") and conv.get("us") else "-"
        ref = reference_error(row)
        out.append(f"| {row['key']} | {fmt_us(eager['us'])} | {fmt_us(comp.get('us'))} | {fmt_us(conv.get('us'))} "
                   f"| {vs} | {vs_eager} | {tflops(row['flops'], conv.get('us'))} | {fmt_err(ref)} "
                   f"| {fmt_err(conv.get('err'))} | {arm} |")
    return out


def smoke_kb(tmp: Path) -> Path:
    """Three tiny convolution problems of its own, laid out as a KernelBench folder."""
    (tmp / "level1").mkdir(parents=True)
    (tmp / "level2").mkdir()
    (tmp / "level1" / "1_Conv_transposed.py").write_text(HEADER + textwrap.dedent("""
    class Model(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.conv = nn.ConvTranspose2d(cin, cout, 3, stride=2, padding=1, output_padding=1, bias=False)

        def forward(self, x):
            return self.conv(x)

    batch = 2
    cin = 8
    cout = 12

    def get_inputs():
        return [torch.rand(batch, cin, 7, 6)]

    def get_init_inputs():
        return [cin, cout]
    """))
    # a pointwise one: the conv kinds' GEMM per sample on x as it is (_ConvPointwise)
    (tmp / "level1" / "3_Conv_pointwise.py").write_text(HEADER + textwrap.dedent("""
    class Model(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, 1)

        def forward(self, x):
            return self.conv(x)

    batch = 2
    cin = 5
    cout = 12

    def get_inputs():
        return [torch.rand(batch, cin, 6, 7)]

    def get_init_inputs():
        return [cin, cout]
    """))
    (tmp / "level2" / "2_Conv3d_Mish.py").write_text(HEADER + textwrap.dedent("""
    class Model(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.conv = nn.Conv3d(cin, cout, 3)

        def forward(self, x):
            return torch.tanh(F.mish(self.conv(x)))

    batch = 2
    cin = 3
    cout = 16

    def get_inputs():
        return [torch.rand(batch, cin, 5, 6, 7)]

    def get_init_inputs():
        return [cin, cout]
    """))
    return tmp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path, help="a KernelBench folder (level1/, level2/)")
    parser.add_argument("--problems", default=DEFAULT_PROBLEMS, help="LEVEL:ID,ID ... (default: %(default)s)")
    parser.add_argument("--time-limit", type=float, default=150.0, help="start no problem after this many seconds")
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile arm (its compiles take much of the time)")
    parser.add_argument("--no-tiles", action="store_true", help="the candidates at their defaults only")
    parser.add_argument("--direct-tiles", action="store_true", help="walk the direct convolution's tiles only")
    parser.add_argument("--tma", action="store_true", help="the TMA path against the pointer path at the same tiles")
    parser.add_argument("--kernels", action="store_true", help="each arm's kernels by device time (torch.profiler)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    refused = check_machine(args, need_kb=True)
    if refused is not None:
        return refused
    import torch

    b = Bench(args)
    rows: list = []
    device = "smoke: CPU, Triton interpreter, nothing timed" if args.smoke else torch.cuda.get_device_name(0)
    out = Path(os.environ.get("OUT") or "/tmp/out")
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (out / "conv.json").write_text(json.dumps({"device": device, "smoke": args.smoke, "rows": rows}, indent=1) + "\n")

    t0 = time.monotonic()
    # capture is CPU work: op files rendered 8 at a time; a smoke's tiny ones in one process (each
    # process imports torch and okgit's planner, seconds of CPU that a smoke's renders do not need)
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ProcessPoolExecutor(max_workers=1 if args.smoke else 8, mp_context=spawn) as pool:
        # the smoke's pointwise problem has no TMA path to pair (its GEMM per sample reads x by pointers)
        smoke = "1:1 2:2" if args.tma else "1:1,3 2:2"
        files = problem_files(smoke_kb(Path(tmp)) if args.smoke else args.kb, smoke if args.smoke else args.problems)
        tiles = None if args.no_tiles else "direct" if args.direct_tiles else "all"
        problems(b, files, not args.no_compile, tiles, args.tma, rows, pool, save, args.kernels)
    save()
    lines = summary(rows) + (tma_summary(rows) if args.tma else [])
    lines += ["", f"exploration figures (do_bench medians, one process; {device}); {time.monotonic() - t0:.0f} s"]
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
