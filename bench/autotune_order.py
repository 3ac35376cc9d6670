"""The order in which the autotune phase would try an op's template candidate's launch settings,
with and without a profile's focus (CPU only: nothing runs, the sources are planned and parsed).

    python bench/autotune_order.py OP.py [--kind TEXT] [--set NAME=VALUE ...] [--bottleneck B]
        [--limiter L] [--occupancy F] [--kernel NAME=US ...] [--first N]

OP.py is an op file (a KernelBench problem among them); the candidate is the first template
candidate whose intent contains --kind (default "GEMM"), planned as for a GPU. --set applies
settings first, as a hill climb's best would have them (`FUSED_GEMM_0_PRECISION=bf16x3`). The
profile is what the profiling pass would have read: its bottleneck, the occupancy limiter and
theoretical occupancy, each kernel's time (`fused_gemm_0_kernel=1300`). Prints the first N
variants unfocused, then with that focus, and the focus's note as the journal would say it: how
bench/README item 6's arms would begin on a problem, read before spending device time on it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from okgit.eval.types import KernelTime, ProfileData, Reference  # noqa: E402
from okgit.lower.trace import input_extent  # noqa: E402
from okgit.problem import load_problem  # noqa: E402
from okgit.search.proposers.autotune import Focus, variants  # noqa: E402
from okgit.search.proposers.sites import apply, find_sites  # noqa: E402
from okgit.search.proposers.templates import plan  # noqa: E402
from okgit.search.types import Context  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", type=Path)
    parser.add_argument("--kind", default="GEMM", help="text in the template candidate's intent")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--bottleneck", default="compute", choices=["memory", "compute", "latency"])
    parser.add_argument("--limiter", choices=["registers", "shared_memory", "warps", "blocks"])
    parser.add_argument("--occupancy", type=float, help="theoretical occupancy, 0-1")
    parser.add_argument("--kernel", action="append", default=[], metavar="NAME=US")
    parser.add_argument("--first", type=int, default=10)
    args = parser.parse_args()
    ctx = Context(problem=load_problem(args.op), reference=Reference(device="cuda", timed=True), backend="triton",
                  device="cuda", log=lambda type, **fields: None)
    source = next((p.source for p in plan(ctx) if args.kind in p.intent), None)
    if source is None:
        raise SystemExit(f"{args.op}: no template candidate whose intent contains {args.kind!r}")
    for setting in args.set:
        name, value = setting.split("=", 1)
        site = next((s for s in find_sites(source) if s.name == name), None)
        if site is None:
            raise SystemExit(f"{name}: no such setting in the candidate")
        source = apply(source, site, int(value) if value.lstrip("-").isdigit() else value)
    kernels = [KernelTime(name=k, time_us=float(us)) for k, us in (s.split("=", 1) for s in args.kernel)]
    profile = ProfileData(bottleneck_type=args.bottleneck, occupancy_limiter=args.limiter,
                          occupancy_theoretical=args.occupancy, top_kernels=kernels)
    extent = input_extent(ctx.problem)
    focus = Focus.of(profile)
    for label, f in (("unfocused", None), (f"{args.bottleneck}-bound", focus)):
        print(f"{label}: " + ", ".join(f"{s.name}={v}" for s, v in variants(source, *extent, f)[:args.first]))
    print(f"focus: {focus.why if focus else '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
