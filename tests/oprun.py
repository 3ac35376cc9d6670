"""Test helper: run a candidate op file against its reference under the Triton interpreter.

Stands in for the evaluator in the template/autotune/example tests: a subprocess with
TRITON_INTERPRET=1 builds both models with the same seed, runs the reference in float64 and
the candidate in its own dtype, and checks the fp32 tolerance (rtol 1e-4, atol 1e-4 *
max|ref|), every output element written (allocations are poisoned), determinism across
two calls, and that inputs are left unchanged. Where get_init_inputs holds floats, the check
is repeated with every one of them x1.5 (both models rebuilt, one call), as the evaluator does:
a candidate that baked `self.temperature` into its kernel fails there. Each result also gives
the outputs' layout: (reference strides, candidate strides, candidate contiguous) per output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = r'''
import json, sys, types, torch
from okgit.backends.triton import interpret_as_compiled
from okgit.problem import INIT_FLOAT_FACTOR, perturb_floats  # the evaluator's own init_inputs case

interpret_as_compiled()  # as the evaluator's CPU workers run kernels: no int32 overflow sanitizer

def load(path, knobs):
    mod = types.ModuleType("op")
    mod.__file__ = path
    code = compile(open(path).read(), path, "exec")
    exec(code, mod.__dict__)
    mod.__dict__.update(knobs)
    return mod

def check(ref_path, cand_path, knobs):
    maxes, strides = [], None
    for perturbed in (False, True):
        try:
            r = compare(ref_path, cand_path, knobs, perturbed)
        except Exception as e:
            import traceback
            r = {"ok": False, "max_abs": None, "why": traceback.format_exc()[-3000:]}
        if r is None:
            break  # no float constructor argument to scale
        if not r["ok"]:
            if perturbed:
                r["why"] = f"with the constructor's floats x{INIT_FLOAT_FACTOR}: " + r["why"]
            return r
        maxes.append(r["max_abs"])
        strides = strides or r["strides"]
    return {"ok": True, "max_abs": max(maxes), "why": "", "strides": strides}

def compare(ref_path, cand_path, knobs, perturbed=False):
    ref, cand = load(ref_path, knobs), load(cand_path, knobs)
    torch.manual_seed(0)
    init = ref.get_init_inputs()
    if perturbed:
        init, changed = perturb_floats(list(init))
        if not changed:
            return None
    torch.manual_seed(1)
    m_ref = ref.Model(*init)
    torch.manual_seed(1)
    m_cand = (cand.ModelNew if hasattr(cand, "ModelNew") else cand.Model)(*init)
    m_cand.load_state_dict(m_ref.state_dict())
    torch.manual_seed(2)
    inputs = list(ref.get_inputs())
    keep = [x.clone() for x in inputs]
    wide = [x.double() if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        want = m_ref.double()(*wide)
        empty = torch.empty
        # poisoned allocations: an output element the candidate never writes shows up as NaN
        def poisoned(*a, **k):
            t = empty(*a, **k)
            return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)
        torch.empty = poisoned
        try:
            got = m_cand(*inputs)
            # two calls alike: once, at the op's own constructor floats (the scaled ones' run is
            # about constants baked into a kernel, which one call shows)
            again = got if perturbed else m_cand(*inputs)
        finally:
            torch.empty = empty
    want = want if isinstance(want, (tuple, list)) else [want]
    got = got if isinstance(got, (tuple, list)) else [got]
    again = again if isinstance(again, (tuple, list)) else [again]
    report = {"ok": True, "max_abs": 0.0, "why": "", "strides": [[list(w.stride()), list(g.stride()), g.is_contiguous()]
                                                              for w, g in zip(want, got)]}
    def fail(why):
        report["ok"] = False
        report["why"] = report["why"] or why
    for w, g, a in zip(want, got, again):
        if g.shape != w.shape:
            fail(f"shape {tuple(g.shape)} != {tuple(w.shape)}"); continue
        if not (torch.equal(g, a) or (g.is_floating_point() and torch.allclose(g, a, rtol=0, atol=0, equal_nan=True))):
            fail("two calls differ")
        w = w.double(); g = g.double()
        finite = w[w.isfinite()]  # a NaN where torch gives one is right; the tolerance comes from the rest
        atol = 1e-4 * max(finite.abs().max().item(), 1e-30) if finite.numel() else 0
        err = (g - w).abs().nan_to_num(0.0)
        report["max_abs"] = max(report["max_abs"], err.max().item() if err.numel() else 0.0)
        nan_apart = (g.isnan() != w.isnan()).sum().item()
        if nan_apart:
            fail(f"mismatch: {nan_apart} element(s) NaN in one and not the other")
        elif not torch.allclose(g, w, rtol=1e-4, atol=atol, equal_nan=True):
            fail(f"mismatch: max abs err {err.max().item():.3g} (atol {atol:.3g})")
    if len(want) != len(got):
        fail("output count")
    for x, k in zip(inputs, keep):
        if not torch.equal(x, k) and not (x.is_floating_point() and torch.allclose(x, k, rtol=0, atol=0, equal_nan=True)):
            fail("an input was modified")
    return report

for job in json.loads(sys.argv[1]):
    print("RESULT " + json.dumps(check(*job)))
'''


def run_ops(jobs: list[tuple[str | Path, str, dict[str, int]]], timeout: float = 300) -> list[dict]:
    """{'ok', 'max_abs', 'why', 'strides'} per (reference path, candidate source, knobs), one
    process ('strides' where the outputs were compared)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = []
        for i, (reference, source, knobs) in enumerate(jobs):
            cand = Path(tmp) / f"candidate_{i}.py"
            cand.write_text(source)
            args.append([str(reference), str(cand), knobs])
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(args)], capture_output=True, text=True, timeout=timeout, env=env, check=False)
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    failed = {"ok": False, "max_abs": None, "why": (proc.stderr or proc.stdout)[-3000:]}
    return results + [failed] * (len(jobs) - len(results))


def run_op(reference: str | Path, candidate_source: str, knobs: dict[str, int]) -> dict:
    return run_ops([(reference, candidate_source, knobs)])[0]


def small_knobs(knobs: dict[str, int]) -> dict[str, int]:
    """Knobs >= 8 scaled to small, mostly odd sizes the interpreter runs in a second."""
    return {k: min(v, (2 + 3 * v.bit_length()) | 1) for k, v in knobs.items() if v >= 8}
