"""How the split-precision GEMM writes C (okgit/lower/kinds/gemm.py's STORES and store-bound
rule, gemm_plan.py.tmpl's _gemm_store): which GEMMs the kind counts as bound by writing their
output and the defaults it gives them (a persistent grid, TMA stores); each store under Triton's
interpreter against float64, TMA included (the plan's seam `_tma_device`, as test_gemm_kind.py
forces it), and where the plan falls back to plain stores; the settings autotune reaches; and,
compiled for sm_90 here without a GPU, the shared memory Triton asks for against what the kind
counts, the TMA stores left in flight while the next tile computes, and the streaming stores."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types

import pytest
import torch
from oprun import run_ops
from test_attention_kind import OPS
from test_conv_packed import module
from test_gemm_kind import FORMS, _graph, ctx_for, op, setting, with_tma
from test_gemm_tuning import _stand_ins

from okgit.eval.types import ProfileData
from okgit.lower.kinds import gemm
from okgit.search.proposers.autotune import Focus, variants
from okgit.search.proposers.sites import apply
from okgit.search.proposers.templates import plan

# L1/9's form (a tall A times a wide B: C of m x m from a K of k) at the interpreter's sizes
TALL = """
class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)

m = 72
k = 16

def get_inputs():
    return [torch.rand(m, k), torch.rand(k, m)]

def get_init_inputs():
    return []
"""
DEFAULTS = {"PERSISTENT": 0, "NUM_STAGES": 3, "STORE": "plain"}


def constants(source: str, group: str = "FUSED_GEMM_0", names=("PERSISTENT", "NUM_STAGES", "STORE")) -> dict:
    """A GEMM group's settings `names` as its candidate's source sets them."""
    found = {}
    for line in source.splitlines():
        for name in names:
            if line.startswith(f"{group}_{name}:"):
                found[name] = json.loads(line.split(" = ")[1])
    return found


@pytest.mark.parametrize(("forward", "inputs", "bound"), [
    ("torch.matmul(a, b)", "torch.rand(256, 32), torch.rand(32, 256)", True),  # C 8x the operands, K 32
    ("torch.matmul(a, b)", "torch.rand(256, 64), torch.rand(64, 512)", True),  # K at the rule's edge
    ("torch.matmul(a, b)", "torch.rand(256, 128), torch.rand(128, 256)", False),  # K past it: the products bound it
    ("torch.matmul(a, b)", "torch.rand(8, 32), torch.rand(32, 8)", False),  # C smaller than the operands
    ("torch.bmm(a, b)", "torch.rand(4, 64, 16), torch.rand(4, 16, 64)", True),  # batches counted in both
    ("torch.nn.functional.linear(a, b)", "torch.rand(512, 32), torch.rand(512, 32)", True),  # B is the weight (N, K)
])
def test_which_gemms_writing_c_bounds(tmp_path, forward, inputs, bound):
    mm = next(n for n in _graph(tmp_path, forward, inputs).nodes if n.kind == "extern")
    a, b, _ = gemm.gemm_operands(mm)
    assert gemm.store_bound(a, b, mm) is bound


def test_a_store_bound_gemm_renders_persistent_with_tma_stores_and_others_as_before(tmp_path):
    tall = plan(ctx_for(op(tmp_path, "tall", TALL)))[0]
    assert tall.origin.startswith("template:gemm")
    assert constants(tall.source) == {"PERSISTENT": 1, "NUM_STAGES": 2, "STORE": "tma"}
    wide_k = plan(ctx_for(op(tmp_path, "wide_k", TALL.replace("k = 16", "k = 96"))))[0]
    assert constants(wide_k.source) == DEFAULTS
    # the epilogue's fp32 output goes through _gemm_store, the split-K reduction's stays a plain store
    assert "_gemm_store(out0_ptr, flat, v0, mask, z * M + off_m, off_n, STORE)" in tall.source
    assert "plan.target(out0)," in tall.source and "tl.store(out0_ptr + flat, v0, mask=mask)" in tall.source


def _offered(source: str, focus: Focus | None = None) -> dict[str, list]:
    out: dict[str, list] = {}
    for site, value in variants(source, 1 << 24, 8192, focus):
        out.setdefault(site.name.removeprefix("SPLIT_GEMM_"), []).append(value)
    return out


def test_autotune_reaches_the_stores_and_the_persistent_grid_where_they_fit():
    # store-bound defaults: the other stores and one program per tile are offered; a third stage is not
    # (2 stages of split 128x128x32 tiles and the TMA store's tile: 192 KiB)
    bound = _stand_ins(PERSISTENT=1, NUM_STAGES=2, STORE="tma")
    offered = _offered(bound)
    assert offered["STORE"] == ["stream", "plain"] and offered["PERSISTENT"] == [0]
    assert 3 not in offered["NUM_STAGES"]
    assert 'SPLIT_GEMM_STORE: str = "stream"' in apply(bound, *next((s, v) for s, v in variants(bound, 1 << 24, 8192)
                                                                     if s.name.endswith("_STORE")))
    # the defaults of other GEMMs: 3 stages leave no room for a tile beside them (TMA store, persistent)
    plain = _offered(_stand_ins())
    assert plain["STORE"] == ["stream"] and "PERSISTENT" not in plain
    two = _offered(_stand_ins(NUM_STAGES=2))
    assert two["STORE"] == ["tma", "stream"] and two["PERSISTENT"] == [1]
    # memory-bound: the GEMM's precision, then its stores and grid before the tiles
    first = [s.control for s, _ in variants(bound, 1 << 24, 8192, Focus.of(ProfileData(bottleneck_type="memory")))]
    assert list(dict.fromkeys(first))[:3] == ["precision", "store", "switch"]


def _module(source: str, tma: bool, monkeypatch) -> types.ModuleType:
    mod = module(source, monkeypatch)
    if tma:
        mod._tma_device = lambda device: True  # type: ignore[attr-defined]
    return mod


@pytest.mark.parametrize(("a", "b", "block_m", "store", "tma", "chosen"), [
    ((72, 16), (16, 72), 16, "tma", True, "tma"),
    ((72, 16), (16, 72), 16, "tma", False, "plain"),  # no TMA on the device
    ((70, 16), (16, 70), 16, "tma", True, "plain"),  # rows of 280 bytes: not 16-byte multiples
    ((2, 32, 8), (2, 8, 40), 16, "tma", True, "tma"),  # batches of whole tiles: one 2D view
    ((2, 30, 8), (2, 8, 40), 16, "tma", True, "plain"),  # a tile would run into the next batch
    ((72, 16), (16, 72), 16, "stream", False, "stream"),
])
def test_the_plan_stores_through_tma_only_where_a_descriptor_can_take_the_tile(monkeypatch, a, b, block_m, store, tma,
                                                                              chosen):
    mod = _module(_stand_ins(), tma, monkeypatch)
    p = mod._GemmPlan(torch.rand(*a), torch.rand(*b), block_m, 16, 16, "tf32x3-split", 1, 0, 0, store=store)
    assert p.switches["STORE"] == chosen
    out = torch.empty(a[:-1] + b[-1:])
    assert isinstance(p.target(out), torch.Tensor) is (chosen != "tma")


def test_with_k_ranges_the_reduction_writes_c_plainly(monkeypatch):
    mod = _module(_stand_ins(), True, monkeypatch)
    p = mod._GemmPlan(torch.rand(72, 64), torch.rand(64, 72), 16, 16, 16, "tf32x3-split", 2, 0, 0, store="tma")
    assert p.partial and p.switches["STORE"] == "plain" and isinstance(p.target(torch.empty(72, 72)), torch.Tensor)


def _stores(source: str, fits: bool) -> dict[str, str]:
    """The candidate in small tiles with each store it is run with, at knobs where a TMA
    descriptor can take the tile (`fits`) or cannot. Where it can: each store, persistent or not,
    with TMA forced, and "tma" without a TMA device (the plan's plain stores, pointers in, the
    same kernel as "plain" asked for there). Where it cannot: "tma", persistent or not, TMA forced:
    the plan's plain stores, the same kernels "plain" asked for would run there; "stream" is
    "plain" but for the cache modifier, which the interpreter does not model (its masks at part
    tiles are checked where the descriptor fits, 72, 32 and 20 columns)."""
    small = setting(setting(setting(source, "BLOCK_M", 16), "BLOCK_N", 16), "BLOCK_K", 16)
    out = {}
    for store in gemm.STORES if fits else ("tma",):
        for persistent in (0, 1):
            variant = setting(setting(small, "STORE", store), "PERSISTENT", persistent)
            out[f"{store}, persistent {persistent}"] = with_tma(variant)
    if fits:
        out["tma, pointers"] = setting(small, "STORE", "tma")
    return out


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_every_store_matches_float64(tmp_path):
    """Each store, persistent or not, TMA forced where the plan takes it: tiles past C's edges
    (72 = 4.5 tiles of 16), a linear over a 3D input whose epilogue reads a parameter, a bmm over
    batches of whole tiles (32 rows) and of part tiles (21); the plan's plain stores where a
    descriptor cannot take the tile (70 or 29 columns: rows not 16-byte multiples; 21 rows)."""
    jobs, names = [], []
    # (op, knobs where a descriptor takes the tile, knobs where it cannot)
    for name, text, fits, not_fits in (("tall", TALL, {}, {"m": 70}), ("linear3d", FORMS["linear3d"][0], {"n": 32}, {}),
                                       ("bmm", FORMS["bmm"][0], {"m": 32, "n": 20}, {})):
        path = op(tmp_path, name, text)
        source = plan(ctx_for(path))[0].source
        for k, takes in ((fits, True), (not_fits, False)):
            for label, variant in _stores(source, takes).items():
                jobs.append((path, variant, k))
                names.append(f"{name} {k}: {label}")
    results = run_ops(jobs, timeout=900)
    bad = [(n, r["why"]) for n, r in zip(names, results, strict=True) if not r["ok"]]
    assert not bad, bad


@pytest.mark.slow  # candidates under the interpreter (oprun)
def test_causal_attentions_scores_gemm_is_store_bound_and_right_through_tma(tmp_path):
    """Attention written out as GEMMs (kinds/attention_gemms.py), causal, head dim 16 at 48 positions:
    its scores GEMM (K 16, C larger than Q and K) takes the store-bound defaults, its tiles above the
    diagonal skipped, and the whole still matches float64 through TMA stores (48 rows: whole tiles
    per batch) and through the plan's fallback to plain stores (40 rows)."""
    text = OPS["sdpa_causal"].replace("seq_len = 20", "seq_len = 48").replace("head_dim = 24", "head_dim = 16")
    path = op(tmp_path, "causal", text)
    source = next(p.source for p in plan(ctx_for(path)) if "attention_gemms" in p.origin)
    assert constants(source, "FUSED_ATTENTION_GEMMS_1") == {"PERSISTENT": 1, "NUM_STAGES": 2, "STORE": "tma"}
    assert constants(source, "FUSED_ATTENTION_GEMMS_3") == DEFAULTS  # P V: K is the 48 positions
    small = re.sub(r"^(FUSED_ATTENTION_GEMMS_\d+_BLOCK_[MNK]): int = \d+", r"\1: int = 16", source, flags=re.MULTILINE)
    results = run_ops([(path, with_tma(small), {}), (path, with_tma(small), {"seq_len": 40})], timeout=600)
    assert all(r["ok"] for r in results), [r["why"] for r in results]


SM90 = r"""
import json, re, sys, types
import torch
import triton.runtime.jit as jit
from triton.backends.compiler import GPUTarget
from triton.runtime import driver

class Hopper:  # what Triton asks the driver while it compiles; nothing is launched
    def get_current_device(self): return 0
    def get_current_stream(self, device=None): return 0
    def get_current_target(self): return GPUTarget("cuda", 90, 32)

driver.set_active(Hopper())
compiled = {}
run = jit.JITFunction.run
def compile_only(self, *args, grid, warmup, **kwargs):
    compiled[self.fn.__name__] = run(self, *args, grid=grid, warmup=True, **kwargs)
jit.JITFunction.run = compile_only
m, k = int(sys.argv[1]), int(sys.argv[2])
for path in sys.argv[3:]:  # each candidate in turn: one process, one import of torch and Triton for all
    compiled.clear()
    mod = types.ModuleType("cand")
    exec(compile(open(path).read(), path, "exec"), mod.__dict__)  # Triton reads a kernel's source from its file
    mod._tma_device = lambda device: True
    mod.torch.cuda.get_device_properties = lambda device: types.SimpleNamespace(multi_processor_count=132)
    mod.Model()(torch.empty(m, k), torch.empty(k, m))
    kernel = next(v for name, v in compiled.items() if name.endswith("_kernel") and not name.startswith("_tf32"))
    ptx = kernel.asm["ptx"]
    # the TMA stores' bookkeeping in program order: wait (until a store's tile is read), store, commit, wait (all done)
    bulk = re.findall(r"cp\.async\.bulk\.(wait_group\.read|wait_group|commit_group|tensor\.\dd\.global)", ptx)
    print(json.dumps({"shared": kernel.metadata.shared, "bulk": bulk,
                      "streamed": len(re.findall(r"st\.global\.cs", ptx)), "plain": len(re.findall(r"st\.global\.v4", ptx))}))
"""


def _sm90(tmp_path, sources: list[str], m: int, k: int) -> list[dict]:
    """SM90's findings for each candidate of `sources`, compiled at m x k in one process."""
    env = {name: v for name, v in os.environ.items() if name != "TRITON_INTERPRET"}
    paths = [tmp_path / f"cand_{i}.py" for i in range(len(sources))]
    for path, source in zip(paths, sources, strict=True):
        path.write_text(source)
    proc = subprocess.run([sys.executable, "-c", SM90, str(m), str(k), *map(str, paths)], capture_output=True, text=True,
                          timeout=600, check=False, env=env)
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("no ptxas in this Triton")
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(found) == len(sources), proc.stdout[-3000:]
    return found


# the settings compiled for sm_90, each with what its kernel's stores are
HOPPER = [
    ({}, {"tma_stores": True, "streamed": False}),
    ({"STORE": "stream"}, {"tma_stores": False, "streamed": True}),
    ({"PERSISTENT": 0}, {"tma_stores": True, "streamed": False}),
    ({"PERSISTENT": 0, "NUM_STAGES": 3, "STORE": "plain"}, {"tma_stores": False, "streamed": False}),
]


@pytest.fixture(scope="module")
def on_hopper(tmp_path_factory) -> dict[str, dict]:
    """L1/9's form compiled for sm_90 at 4096 x 32 x 4096 with each of HOPPER's settings, by
    settings (json), in one process (a process a setting imported torch and Triton each time)."""
    tmp = tmp_path_factory.mktemp("hopper")
    source = plan(ctx_for(op(tmp, "tall", TALL)))[0].source
    sources = []
    for settings, _ in HOPPER:
        variant = source
        for name, value in settings.items():
            variant = setting(variant, name, value)
        sources.append(variant)
    return dict(zip([json.dumps(s) for s, _ in HOPPER], _sm90(tmp, sources, 4096, 32), strict=True))


@pytest.mark.slow  # Triton compiles for sm_90 (ptxas), in the module's one process for them
@pytest.mark.parametrize(("settings", "expect"), HOPPER)
def test_on_hopper_the_stores_are_what_they_say_in_the_shared_memory_the_kind_counts(on_hopper, settings, expect):
    """L1/9's form at 4096 x 32 x 4096, split ahead and read through TMA as on the H200: the shared
    memory Triton asks for is the kind's count plus its barriers; a TMA store is waited for (its
    tile read out of shared memory) only inside the tile loop, before the next tile's epilogue
    writes there, so it runs on while the next tile loads and multiplies; "stream" is st.global.cs."""
    found = on_hopper[json.dumps(settings)]
    counted = gemm.shared_bytes({**{"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "PRECISION": "tf32x3-split",
                                    "PERSISTENT": 1, "NUM_STAGES": 2, "STORE": "tma"}, **settings})
    assert 0 <= found["shared"] - counted < 100, (found, counted)
    bulk = found["bulk"]
    assert ("tensor.2d.global" in bulk) is expect["tma_stores"] and bool(found["streamed"]) is expect["streamed"]
    if expect["tma_stores"]:  # not waited for right after it is issued, but before the next tile's epilogue
        # writes its shared memory: the kernel's first bulk operation is that wait (Triton 3.6 and 3.9
        # alike; a store waited for at once would come first), and each store follows one
        assert found["plain"] == 0 and bulk[0] == "wait_group.read", bulk
        assert all(bulk[i - 1] == "wait_group.read" for i, e in enumerate(bulk) if e == "tensor.2d.global"), bulk
    # a third stage beside the TMA store's tile does not fit, as the kind counts it (Triton: 262200 bytes)
    assert gemm.shared_bytes({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "NUM_STAGES": 3, "STORE": "tma"}) > gemm.SHARED_LIMIT
