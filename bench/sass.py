"""The implicit-GEMM convolution's kernel compiled for Hopper (sm_90) on this machine, no GPU
needed: what a launch at a development problem's shape compiles to, read from its SASS.

    python3 bench/sass.py --kb .kb/KernelBench --problem 2:87 [--origin template:conv]
                          [--set PRECISION=tf32x3 --set BLOCK_N=128] [--batch 2]
    python3 bench/sass.py --kb .kb/KernelBench --problem 2:87 --origin template:conv --origin template:conv_tf32

The candidate is rendered as `okgit optimize` renders it for a GPU; its plan (_ConvPlan) is
built on the CPU at the problem's shape with its batch cut to --batch (the kernel's constants
do not depend on it, its 64-bit indexing aside: compiled 32-bit, as on a GPU below 2**31
elements), TMA found as on Hopper (the plan's seam, `_tma_device`), and the kernel compiled as
Triton's launcher specializes it (ints and pointers divisible by 16 marked so, ints of 1 made
constants), the precision as the plan picks it on a GPU. Printed: registers, spill stack and
shared memory, TMA and cp.async copies, wgmma, whether the products read A from shared memory,
and per loop of the SASS (a backward branch) its instruction count and most frequent opcodes:
the K loop's instructions a step, the epilogue's a tile. Instruction counts, not times: this
machine's Triton (the GPU machine's may be older) and no scheduler model. Several --origin: the
candidates side by side from one render and one compiling process (a JSON list, in their order).
"""

from __future__ import annotations

import argparse
import collections
import glob
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]  # okgit, and the harness bench/conv.py and bench/gemm.py share

from conv import GROUP, conv_settings  # noqa: E402
from gemm import render  # noqa: E402

# Arguments: (candidate file, kernel, job file, cubin) for each kernel, all in one process
COMPILE = r"""
import json, sys, types
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
for at in range(1, len(sys.argv), 4):
    path, kernel, job, out = sys.argv[at], sys.argv[at + 1], json.loads(open(sys.argv[at + 2]).read()), sys.argv[at + 3]
    mod = types.ModuleType("cand")
    exec(compile(open(path).read(), path, "exec"), mod.__dict__)
    attrs = {(i,): [["tt.divisibility", 16]] for i in job["aligned"]}
    c = triton.compile(ASTSource(getattr(mod, kernel), job["signature"], job["constants"], attrs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": job["warps"], "num_stages": job["stages"]})
    open(out, "wb").write(c.asm["cubin"])
    open(out + ".ptx", "w").write(c.asm["ptx"])
    open(out + ".ttgir", "w").write(c.asm["ttgir"])
"""


def candidates(path: Path, origins: list[str]) -> list[str]:
    """The op's candidates of `origins` as `okgit optimize` renders them for a GPU (bench/gemm.py's
    render, once: it captures and plans the op)."""
    found = {o.split("+")[0]: s for o, s in render(str(path), "cuda")["candidates"]}
    for origin in origins:
        if origin not in found:
            raise SystemExit(f"{path.name}: no {origin} candidate (have: {', '.join(found)})")
    return [found[origin] for origin in origins]


def job_for(source: str, op_path: Path, batch: int, tma: bool) -> tuple[str, dict, dict]:
    """The kernel's name, its compile job (signature, constants, aligned arguments, warps,
    stages) as a launch at the op's shape specializes it, and the plan's switches."""
    os.environ["TRITON_INTERPRET"] = "1"  # the plan's input copy runs, under the interpreter
    import torch
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    mod = types.ModuleType("cand")
    exec(compile(source, "cand.py", "exec"), mod.__dict__)
    if tma:
        mod._tma_device = lambda device: True
    spec = importlib.util.spec_from_file_location("op", op_path)
    assert spec is not None and spec.loader is not None
    op = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(op)
    op.batch_size = batch
    torch.manual_seed(0)
    model, x = op.Model(*op.get_init_inputs()), op.get_inputs()[0]
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd))
    kernel = next(k for k in vars(mod) if re.fullmatch(r"fused_conv(_tf32)?_\d+_kernel", k))
    prefix = kernel[: -len("_kernel")].upper()
    setting = lambda key: getattr(mod, f"{prefix}_{key}")  # noqa: E731
    precision = setting("PRECISION")
    p = mod._ConvPlan(x, conv.weight.detach(), setting("BLOCK_M"), setting("BLOCK_N"), setting("BLOCK_K"), precision,
                      setting("INPUT_COPY"), setting("TMA"), stride=conv.stride, padding=conv.padding,
                      dilation=conv.dilation, groups=conv.groups,
                      transposed=isinstance(conv, torch.nn.modules.conv._ConvTransposeNd),
                      output_padding=conv.output_padding)
    _, packed, _, sizes = p.launches[0]
    constants = {**{k: setting(k) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}, **p.switches,
                 "PRECISION": precision, "WIDE": False}
    params = list(inspect.signature(getattr(mod, kernel).fn).parameters.values())
    ints = [q.name for q in params if "constexpr" not in str(q.annotation) and not q.name.endswith("_ptr")]
    scalars = [n for n in ints if re.fullmatch(r"c\d+", n)]  # the epilogue's float constants
    values = {"x_ptr": p.a, "w_ptr": packed, **{n: 0.5 for n in scalars},
              **dict(zip([n for n in ints if n not in scalars], sizes, strict=True))}
    signature, aligned = {}, []
    for i, q in enumerate(params):
        if q.name in constants:
            signature[q.name] = "constexpr"
        elif q.name == "t_ptr":
            signature[q.name], _ = "*i32", aligned.append(i)  # 32-bit indices on a GPU
        elif q.name.endswith("_ptr") and q.name not in values:
            signature[q.name], _ = "*fp32", aligned.append(i)  # the epilogue's tensors
        else:
            kind, spec_ = native_specialize_impl(BaseBackend, values[q.name], False, True, True)
            signature[q.name] = kind
            if kind == "constexpr":
                constants[q.name] = values[q.name]
            elif spec_ == "D" or isinstance(values[q.name], torch.Tensor):
                aligned.append(i)
    job = {"signature": signature, "constants": constants, "aligned": aligned, "warps": setting("NUM_WARPS"),
           "stages": setting("NUM_STAGES")}
    return kernel, job, {**p.switches, "PRECISION": precision}


def read(cubin: Path, tool: str) -> dict:
    """What the compiled kernel holds and does, from its cuobjdump and its PTX / TTGIR."""
    ptx, ttgir = Path(f"{cubin}.ptx").read_text(), Path(f"{cubin}.ttgir").read_text()
    usage = subprocess.run([tool, "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    ins = [(int(m[1], 16), m[2].strip()) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    loops = []
    for at, text in ins:
        target = re.search(r"BRA\b.*?0x([0-9a-f]+)", text)
        if target and int(target[1], 16) < at:
            body = [t for a, t in ins if int(target[1], 16) <= a <= at]
            ops = collections.Counter(t.split()[1] if t.startswith("@") else t.split()[0] for t in body)
            loops.append({"instructions": len(body), "top": dict(ops.most_common(10))})
    dots = re.findall(r"ttng\.warp_group_dot [^{]*\{[^}]*\} : (\S+)", ttgir)
    return {"registers": int(re.search(r"REG:(\d+)", usage)[1]), "stack": int(re.search(r"STACK:(\d+)", usage)[1]),
            "shared": int(re.search(r"SHARED:(\d+)", usage)[1]), "tma_copies": ptx.count("cp.async.bulk.tensor"),
            "cp_async": dict(collections.Counter(re.findall(r"cp\.async\.c[ag]\.shared\.global [^;]*, (0x[0-9a-f]+),", ptx))),
            "wgmma": ptx.count("wgmma.mma_async"), "dots": len(dots),
            "a_from_shared": sum(d.startswith("!ttg.memdesc") for d in dots),
            "split_in_registers": ptx.count("cvt.rna.tf32"), "instructions": len(ins), "loops": loops}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path, required=True, help="a KernelBench folder (level1/, level2/)")
    parser.add_argument("--problem", required=True, help="LEVEL:ID, e.g. 2:87")
    parser.add_argument("--origin", action="append", choices=["template:conv", "template:conv_tf32"],
                        help="the candidate (default template:conv); repeatable: each read, in one call")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a tile setting of the candidate (BLOCK_N=128, PRECISION=tf32x3), repeatable")
    parser.add_argument("--batch", type=int, default=2, help="the op's batch_size for the plan (default 2)")
    parser.add_argument("--no-tma", action="store_true", help="compile as for a GPU without TMA")
    args = parser.parse_args()
    import triton

    tool = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump"))
    if not tool:
        print("sass.py: this Triton has no cuobjdump (backends/nvidia/bin): nothing to read", file=sys.stderr)
        return 2
    level, pid = args.problem.split(":")
    found = sorted((args.kb / f"level{level}").glob(f"{pid}_*.py"))
    if not found:
        print(f"sass.py: no problem {args.problem} in {args.kb}", file=sys.stderr)
        return 2
    origins = args.origin or ["template:conv"]
    sources = []
    for source in candidates(found[0], origins):
        prefix = GROUP.search(source)[1]
        settings = {}
        for item in args.set:
            name, value = item.split("=", 1)
            if f"\n{prefix}{name}: " not in source:
                print(f"sass.py: no setting {name} in the candidate", file=sys.stderr)
                return 2
            settings[name] = int(value) if value.lstrip("-").isdigit() else value
        sources.append(conv_settings(source, settings))
    jobs = [job_for(source, found[0], args.batch, not args.no_tma) for source in sources]
    with tempfile.TemporaryDirectory() as tmp:
        argv = []
        for i, (source, (kernel, job, _)) in enumerate(zip(sources, jobs, strict=True)):
            cand, job_file = Path(tmp, f"cand{i}.py"), Path(tmp, f"job{i}.json")
            cand.write_text(source)
            job_file.write_text(json.dumps(job))
            argv += [str(cand), kernel, str(job_file), str(Path(tmp, f"k{i}.cubin"))]
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        subprocess.run([sys.executable, "-c", COMPILE, *argv], check=True, env=env)
        got = [{"problem": found[0].stem, "origin": origin, "set": args.set, "switches": switches,
                **read(Path(tmp, f"k{i}.cubin"), tool[0])}
               for i, (origin, (_, _, switches)) in enumerate(zip(origins, jobs, strict=True))]
    print(json.dumps(got[0] if len(got) == 1 else got, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
