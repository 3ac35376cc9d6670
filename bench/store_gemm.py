"""A GEMM bound by writing its output on this GPU (issue 30): KernelBench L1/9's 32768 x 32 @
32 x 32768 in fp32, a 4 GiB C from a K of 32, where cuBLAS writes at ~1.7 TB/s.

    python3 bench/store_gemm.py [--kb .kb] [--m 32768] [--k 32] [--time-limit 170] [--parts ...] [--smoke]

Arms, in this order (the most telling first, so a time limit cuts the least useful):
1. the floor of writing C: `fill_` of a preallocated C, and this script's Triton kernel that only
   stores (a constant tile per program: plain, streamed `.cs`, TMA; one program per tile or a
   persistent grid);
2. cuBLAS fp32 (`torch.matmul`, PyTorch's default flags: no TF32);
3. okgit's GEMM kind as it renders the problem (its templates proposer), at its defaults and at
   other settings, the defaults before the store-bound rule among them (`was`: one program per
   tile, 3 stages, plain stores);
4. this script's own kernel: the whole K in one step (BLOCK_K >= K), tiles walked by a persistent
   grid or one program each, or ("hold") a program per column block holding B's tile while it
   walks down the rows, in precisions 3xTF32 with operands split ahead ("split", three TF32
   products into one accumulator), Triton's tf32x3 / bf16x6 split inside, strict fp32 on the CUDA
   cores (`tl.dot` "ieee", and "fma": one rank-1 update per k), and stores plain, streamed,
   evict-first or TMA (whole tile, or two halves: "tma2").

Every arm is first checked against float64 on KernelBench's inputs (torch.rand) and on zero-mean
ones: `rule` is the evaluator's precision rule for contractions, max abs error within 4x cuBLAS's
own (or 32 ulps of max|C|), on both (docs/evaluation.md); the floors must write C whole. Then it
is timed: triton.testing.do_bench (CUDA events, L2 cleared before each call, warm-up, median).
TB/s counts C's bytes only (the operands are 8 MiB). No arm starts after --time-limit seconds
(default 170: one call of about 3 minutes on an H200); those left are listed, and --parts
(floor,cuBLAS,okgit,own) runs some parts alone in a later call. Writes
$OUT/store_gemm.json (OUT defaults to /tmp/out). --smoke: CPU, Triton interpreter, C 72 x 72 from a
K of 16 (tiles of at most 64: one past each edge), nothing timed; okgit's plan finds TMA there
through the tests' seam (`_tma_device`) so that its TMA stores run too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import types
from pathlib import Path

if "--smoke" in sys.argv:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/gemm.py: the harness the GEMM scripts share

from gemm import (
    check_machine,
    error,
    fmt_err,
    fmt_rule,
    fmt_us,
    label,
    load,
    op_source,
    record_plans,
    render,
    with_settings,
    within_rule,
)

# okgit's kind: settings changed from what it renders for the problem (its store-bound defaults)
KIND = [{}, {"STORE": "plain"}, {"STORE": "stream"}, {"PERSISTENT": 0, "NUM_STAGES": 3, "STORE": "plain"},
        {"PERSISTENT": 0, "NUM_STAGES": 2}, {"NUM_WARPS": 4}, {"BLOCK_M": 64}, {"WARP_SPECIALIZE": 1},
        {"PRECISION": "bf16x6"}]
WAS = {"PERSISTENT": 0, "NUM_STAGES": 3, "STORE": "plain"}  # the kind's defaults before the store-bound rule
# this script's store-only kernel: (store, persistent)
FLOORS = [("plain", False), ("stream", False), ("tma", False), ("tma", True), ("plain", True)]
BASE = {"prec": "split", "store": "tma", "persistent": 1, "bm": 128, "bn": 128, "warps": 8, "stages": 2, "per_sm": 1,
        "columns": 1, "hold": 0}
OWN = [{}, {"hold": 1}, {"hold": 1, "store": "plain"}, {"store": "tma2"}, {"store": "plain"}, {"store": "stream"}, {"store": "evict_first"}, {"columns": 0},
       {"stages": 1}, {"persistent": 0}, {"bm": 64, "warps": 4, "per_sm": 2, "stages": 1}, {"bm": 64, "warps": 4, "persistent": 0},
       {"bn": 256, "store": "tma2", "stages": 1}, {"warps": 4}, {"prec": "tf32x3"}, {"prec": "bf16x6"}, {"prec": "ieee"},
       {"prec": "fma", "store": "tma", "bm": 64, "bn": 128, "warps": 4}, {"prec": "fma", "store": "plain", "persistent": 0,
                                                                           "bm": 64, "bn": 64, "warps": 4}]
FORWARD = "torch.matmul(a, b)"
PARTS = ("floor", "cuBLAS", "okgit", "own")


@triton.jit
def put(c, value, pm, pn, M, N, BM: tl.constexpr, BN: tl.constexpr, STORE: tl.constexpr):
    # one tile of C (M, N): `c` a TMA descriptor (tma: whole tile; tma2: two halves) or a pointer
    if STORE == "tma":
        c.store([pm * BM, pn * BN], value)
    elif STORE == "tma2":
        halves = tl.permute(tl.reshape(value, (BM, 2, BN // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c.store([pm * BM, pn * BN], left)
        c.store([pm * BM, pn * BN + BN // 2], right)
    else:
        rows = pm * BM + tl.arange(0, BM)[:, None]
        cols = pn * BN + tl.arange(0, BN)[None, :]
        at, inside = c + rows.to(tl.int64) * N + cols, (rows < M) & (cols < N)
        if STORE == "stream":
            tl.store(at, value, mask=inside, cache_modifier=".cs")
        elif STORE == "evict_first":
            tl.store(at, value, mask=inside, eviction_policy="evict_first")
        else:
            tl.store(at, value, mask=inside)


@triton.jit
def store_only(c, M, N, BM: tl.constexpr, BN: tl.constexpr, STORE: tl.constexpr):
    num_m = tl.cdiv(M, BM)
    for t in tl.range(tl.program_id(0), num_m * tl.cdiv(N, BN), tl.num_programs(0)):
        put(c, tl.full((BM, BN), 1.0, tl.float32), t % num_m, t // num_m, M, N, BM, BN, STORE)


@triton.jit
def gemm(a, a_lo, b, b_lo, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
         STORE: tl.constexpr, COLUMNS: tl.constexpr):
    # C = A @ B, all of K (<= BK) in one step. a, a_lo: A (M, K), its TF32 highs and remainders
    # ("split"; else a_lo is a); b, b_lo: B^T (N, K) likewise. "fma": a is A^T, b is B, K padded to BK.
    # COLUMNS: tiles walked down C's columns, so programs running together share B's tile.
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    rk = tl.arange(0, BK)
    for t in tl.range(tl.program_id(0), num_m * num_n, tl.num_programs(0)):
        if COLUMNS:
            pm, pn = t % num_m, t // num_m
        else:
            pm, pn = t // num_n, t % num_n
        rm, rn = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN)
        if PREC == "fma":  # rank-1 updates in k's order: strict fp32 on the CUDA cores
            acc = tl.zeros((BM, BN), tl.float32)
            for k in tl.static_range(BK):
                x = tl.load(a + k * M + rm, mask=rm < M, other=0.0)
                y = tl.load(b + k * N + rn, mask=rn < N, other=0.0)
                acc += x[:, None] * y[None, :]
        else:
            y, y_lo = b_tiles(b, b_lo, rn, rk, N, K, PREC)
            acc = products(a, a_lo, rm, rk, M, K, y, y_lo, PREC)
        put(c, acc, pm, pn, M, N, BM, BN, STORE)


@triton.jit
def gemm_hold_b(a, a_lo, b, b_lo, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
                STORE: tl.constexpr):
    # gemm's operands; a program per column block of C and share of its rows (the grid a multiple of
    # the column blocks): B's tile loaded once and held while the program walks down its rows
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    pn, rk = tl.program_id(0) % num_n, tl.arange(0, BK)
    y, y_lo = b_tiles(b, b_lo, pn * BN + tl.arange(0, BN), rk, N, K, PREC)
    for pm in tl.range(tl.program_id(0) // num_n, num_m, tl.num_programs(0) // num_n):
        acc = products(a, a_lo, pm * BM + tl.arange(0, BM), rk, M, K, y, y_lo, PREC)
        put(c, acc, pm, pn, M, N, BM, BN, STORE)


@triton.jit
def b_tiles(b, b_lo, rn, rk, N, K, PREC: tl.constexpr):
    # B's tile [BK, BN] from B^T's rows rn, and its TF32 remainders' where "split"
    at, inside = rn[:, None].to(tl.int64) * K + rk[None, :], (rn[:, None] < N) & (rk[None, :] < K)
    y = tl.load(b + at, mask=inside, other=0.0).T
    if PREC == "split":
        return y, tl.load(b_lo + at, mask=inside, other=0.0).T
    else:
        return y, y


@triton.jit
def products(a, a_lo, rm, rk, M, K, y, y_lo, PREC: tl.constexpr):
    # A's rows rm times B's tile: "split", the small products first, all into one accumulator (one K step)
    at, inside = rm[:, None].to(tl.int64) * K + rk[None, :], (rm[:, None] < M) & (rk[None, :] < K)
    x = tl.load(a + at, mask=inside, other=0.0)
    if PREC == "split":
        acc = tl.dot(tl.load(a_lo + at, mask=inside, other=0.0), y, input_precision="tf32")
        acc = tl.dot(x, y_lo, acc, input_precision="tf32")
        return tl.dot(x, y, acc, input_precision="tf32")
    else:
        return tl.dot(x, y, input_precision=PREC)


def tf32_split(x):
    """x's TF32 high part (rounded to nearest) and its TF32-rounded remainder, as okgit's plan splits."""
    import torch

    hi = ((x.view(torch.int32) + 0x1000) & -8192).view(torch.float32)
    rest = x - hi
    return hi, ((rest.view(torch.int32) + 0x1000) & -8192).view(torch.float32)


class Arms:
    """Callables computing C from (a, b), one per arm, on the script's own kernels."""

    def __init__(self, device: str, smoke: bool) -> None:
        import torch
        from triton.tools.tensor_descriptor import TensorDescriptor

        self.torch, self.descriptor = torch, TensorDescriptor
        self.interpreted = smoke
        self.sms = 4 if smoke else torch.cuda.get_device_properties(device).multi_processor_count

    def target(self, c, store: str, bm: int, bn: int):
        return self.descriptor.from_tensor(c, [bm, bn // 2 if store == "tma2" else bn]) if store.startswith("tma") else c

    def grid(self, m: int, n: int, s: dict) -> tuple[int]:
        num_n = triton.cdiv(n, s["bn"])
        tiles = triton.cdiv(m, s["bm"]) * num_n
        if s["hold"]:  # programs a multiple of the column blocks
            return (num_n * max(1, self.sms * s["per_sm"] // num_n),)
        return (min(tiles, self.sms * s["per_sm"]) if s["persistent"] else tiles,)

    def floor(self, store: str, persistent: bool, m: int, n: int, c):
        s = {**BASE, "store": store, "persistent": persistent}
        return lambda a, b: (store_only[self.grid(m, n, s)](self.target(c, store, 128, 128), m, n, BM=128, BN=128,
                                                                STORE=store, num_warps=8), c)[1]

    def own(self, s: dict):
        torch = self.torch

        # the interpreter knows no bf16x3 / bf16x6: it computes in fp32 whatever the precision
        prec = "ieee" if self.interpreted and s["prec"].startswith("bf16") else s["prec"]

        def call(a, b):
            m, k, n = a.shape[0], a.shape[1], b.shape[1]
            c = torch.empty((m, n), device=a.device, dtype=torch.float32)
            bk = max(16, triton.next_power_of_2(k))
            if s["prec"] == "fma":
                at, bp = torch.zeros((bk, m), device=a.device), torch.zeros((bk, n), device=a.device)
                at[:k], bp[:k] = a.t(), b
                ops = (at, None, bp, None)
            elif s["prec"] == "split":
                (ah, al), (bh, bl) = tf32_split(a), tf32_split(b.t().contiguous())
                ops = (ah, al, bh, bl)
            else:
                bt = b.t().contiguous()
                ops = (a, a, bt, bt)
            args = [*[x if x is not None else c for x in ops], self.target(c, s["store"], s["bm"], s["bn"]), m, n, k]
            shared = {"BM": s["bm"], "BN": s["bn"], "BK": bk, "PREC": prec, "STORE": s["store"], "num_warps": s["warps"],
                      "num_stages": s["stages"]}
            if s["hold"]:
                gemm_hold_b[self.grid(m, n, s)](*args, **shared)
            else:
                gemm[self.grid(m, n, s)](*args, COLUMNS=bool(s["columns"]), **shared)
            return c

        return call


def own_label(s: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in s.items() if BASE.get(k) != v) or "defaults"


class Runner:
    def __init__(self, args, a, b) -> None:
        import torch

        self.torch, self.smoke, self.a, self.b, self.parts = torch, args.smoke, a, b, args.parts.split(",")
        self.deadline = time.monotonic() + args.time_limit
        self.zero = (a - 0.5, b - 0.5)  # the second distribution: zero-mean, sums that cancel
        with torch.no_grad():
            self.want = [x.double() @ y.double() for x, y in ((a, b), self.zero)]
        self.ref = [error(torch.matmul(x, y), w) for (x, y), w in zip(((a, b), self.zero), self.want, strict=True)]
        self.bytes = a.shape[0] * b.shape[1] * 4
        self.rows: list[dict] = []
        self.skipped: list[str] = []

    def arm(self, part: str, name: str, fn, floor: bool = False, plans: list | None = None) -> None:
        if part not in self.parts:
            return
        if time.monotonic() > self.deadline:
            self.skipped.append(f"{part}: {name}")
            return
        torch = self.torch
        row: dict = {"part": part, "arm": name, "us": None, "tbps": None, "err": None, "err_zero_mean": None, "rule": None,
                     "error": None, "plan": None}
        try:
            with torch.no_grad():
                if floor:  # C poisoned, then written whole
                    fn(self.a, self.b).fill_(float("nan"))
                    row["rule"] = bool((fn(self.a, self.b) == 1.0).all())
                else:
                    errs = [error(fn(x, y), w) for (x, y), w in zip(((self.a, self.b), self.zero), self.want, strict=True)]
                    row["err"], row["err_zero_mean"] = errs
                    row["rule"] = all(within_rule(e, r) for e, r in zip(errs, self.ref, strict=True))
                if not self.smoke:
                    import triton.testing

                    row["us"] = triton.testing.do_bench(lambda: fn(self.a, self.b), warmup=20, rep=150,
                                                        return_mode="median") * 1e3
                    row["tbps"] = self.bytes / row["us"] / 1e6
        except Exception as e:  # noqa: BLE001 - an arm this GPU or Triton cannot take (shared memory, a lowering)
            row["error"] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:150]}"
        finally:
            row["plan"] = plans[-1] if plans else None
            if not self.smoke:
                torch.cuda.empty_cache()
        self.rows.append(row)
        print(line(row), flush=True)


def line(row: dict) -> str:
    tb = f" {row['tbps']:.2f} TB/s" if row["tbps"] else ""
    plan = row["plan"]
    tb += f" [store {plan['store']}, {'persistent' if plan['persistent'] else 'a program per tile'}]" if plan else ""
    err = "" if row["err"] is None else f" error {fmt_err(row['err'])}, zero-mean {fmt_err(row['err_zero_mean'])}"
    return f"  {row['part']:6s} {row['arm'][:58]:58s} " + (row["error"] or f"{fmt_us(row['us'])}{tb}{err} rule {fmt_rule(row['rule'])}")


def okgit_candidate(args, tmp: Path) -> tuple[str, Path]:
    """okgit's GEMM candidate for the problem as its templates proposer renders it (its own op file
    of L1/9's form at --m and --k where --kb has no level1/9_*.py)."""
    hits = sorted((args.kb / "level1").glob("9_*.py")) if args.kb else []
    if hits and (args.m, args.k) == (32768, 32):
        path = hits[0]
    else:
        path = tmp / "tall_skinny.py"
        path.write_text(op_source(FORWARD, "torch.rand(m, k), torch.rand(k, m)", {"m": args.m, "k": args.k}))
    found = render(str(path), "cpu" if args.smoke else "cuda")
    source = next((s for o, s in found["candidates"] if o.startswith("template:gemm")), None)
    if source is None:
        raise SystemExit(f"okgit proposed no GEMM candidate for {path}: {found['notes']}")
    return source, path


def kind_arm(source: str, settings: dict, smoke: bool) -> tuple:
    """okgit's candidate at `settings` as a callable, and what its plans chose as it runs; under
    --smoke its plan finds TMA (the tests' seam)."""
    module: types.ModuleType = load(with_settings(source, settings), "store_cand")
    if smoke:
        module._tma_device = lambda device: True  # type: ignore[attr-defined]
    plans, model = record_plans(module), module.Model()
    return (lambda a, b: model(a, b)), plans


def summary(rows: list[dict], skipped: list[str]) -> list[str]:
    ok = [r for r in rows if r["us"] is not None and r["rule"]]
    out = ["", "| part | arm | us | TB/s of C | error (uniform / zero-mean) | rule |", "|---|---|---|---|---|---|"]
    for r in rows:
        err = "-" if r["err"] is None else f"{r['err']['abs']:.1e} / {r['err_zero_mean']['abs']:.1e}"
        tb = f"{r['tbps']:.2f}" if r["tbps"] else "-"
        out.append(f"| {r['part']} | {r['arm']} | {r['error'] or fmt_us(r['us'])} | {tb} | {err} | {fmt_rule(r['rule'])} |")
    cublas = next((r for r in rows if r["part"] == "cuBLAS" and r["us"]), None)
    for part in ("okgit", "own"):
        best = min((r for r in ok if r["part"] == part), key=lambda r: r["us"], default=None)
        if best and cublas:
            out.append(f"fastest {part} within the rule: {best['arm']} {best['us']:.1f} us, {cublas['us'] / best['us']:.2f}x cuBLAS")
    if skipped:
        out.append(f"time limit: not run: {'; '.join(skipped)}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path, help="a KernelBench folder (level1/): okgit renders level1/9_*.py itself")
    parser.add_argument("--m", type=int, default=32768, help="M = N (default: L1/9's %(default)s)")
    parser.add_argument("--k", type=int, default=32, help="K (default: L1/9's %(default)s)")
    parser.add_argument("--time-limit", type=float, default=170.0)
    parser.add_argument("--parts", default=",".join(PARTS), help="which arms: %(default)s (a later call: those a time limit left)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    refused = check_machine(args, need_kb=False)
    if refused is not None:
        return refused
    if set(args.parts.split(",")) - set(PARTS):
        print(f"--parts: {args.parts}: each one of {', '.join(PARTS)}", file=sys.stderr)
        return 2
    if args.smoke:
        args.m, args.k = 72, 16  # a tile past the edge at 64-wide tiles
    import torch

    from okgit.eval.worker.calls import pin_flags

    pin_flags(torch)  # PyTorch's default flags (no TF32 in cuBLAS), as the evaluator pins them
    device = "cpu" if args.smoke else "cuda"
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        source, path = okgit_candidate(args, Path(tmp))
        torch.manual_seed(0)
        a, b = torch.rand(args.m, args.k, device=device), torch.rand(args.k, args.m, device=device)
        run = Runner(args, a, b)
        arms = Arms(device, args.smoke)
        print(f"C {args.m} x {args.m} from K {args.k} ({run.bytes / 2**30:.2f} GiB); okgit renders {path.name}; "
              f"cuBLAS error {fmt_err(run.ref[0])}, zero-mean {fmt_err(run.ref[1])}", flush=True)
        c = torch.empty((args.m, args.m), device=device)
        run.arm("floor", "fill_", lambda a, b: c.fill_(1.0), floor=True)
        for store, persistent in FLOORS:
            run.arm("floor", f"store only: {store}{', persistent' if persistent else ''}",
                    arms.floor(store, persistent, args.m, args.m, c), floor=True)
        c = None
        run.arm("cuBLAS", "torch.matmul", torch.matmul)
        for settings in KIND:
            fn, plans = kind_arm(source, settings, args.smoke)
            run.arm("okgit", ("was: " if settings == WAS else "") + label(settings), fn, plans=plans)
        for changes in OWN:
            settings = {**BASE, **changes}
            if args.smoke:  # tiles the interpreter runs in seconds
                settings.update({"bm": min(settings["bm"], 64), "bn": min(settings["bn"], 64)})
            run.arm("own", own_label(changes), arms.own(settings))
    lines = summary(run.rows, run.skipped)
    where = "smoke: CPU, Triton interpreter, nothing timed" if args.smoke else torch.cuda.get_device_name(0)
    lines += ["", f"exploration figures (do_bench medians, one process; {where}); {time.monotonic() - t0:.0f} s"]
    print("\n".join(lines), flush=True)
    out = Path(os.environ.get("OUT") or "/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    (out / "store_gemm.json").write_text(json.dumps({"device": where, "smoke": args.smoke, "m": args.m, "k": args.k,
                                                     "cublas_err": run.ref, "rows": run.rows,
                                                     "skipped": run.skipped}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
