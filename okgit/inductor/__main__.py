"""`python -m okgit.inductor REF.py DEVICE OUT.py [MODES [KNOBS_JSON [dynamic|static|both]]]`: the seed
file of a reference compiled at those shape knobs (default: the file's own), its batch and
knob-following dims dynamic (`static`: every size static, as torch.compile's default; `both`:
the dynamic file, OUT.static.py (the static one, for comparison) and, where Inductor's static
kernels differ from its dynamic ones (`_differs`), say a reduction kept in registers where the dynamic one
loops, OUT.specialised.py, which takes the static kernels at exactly the shapes compiled for and
the dynamic ones elsewhere). Made in this process (a child of okgit's: it runs the reference
and Inductor).

MODES is one torch.compile mode or several, comma-separated (`default,max-autotune-no-cudagraphs`):
one process compiles them in turn (torch, CUDA and Inductor's compile workers started once), the
sizes option applying to the first and the later ones compiled dynamic, each into its own file
(OUT.py for the first, OUT.<n>.py for the n-th after it). One JSON line per mode, printed as soon
as its seed is made: {"ok": true, "mode": M, "path": PATH, "kernels": N, "modes": [...],
"dynamic": [...], "static": PATH | null, "specialised": PATH | null, "differs": "...", "layout": "...",
"lock": "..."} or {"ok": false, "mode": M, "why": "..."}; "dynamic" names the sizes left free
("x.size(0)"), "layout" the layout the convolutions run in and why (okgit.inductor.layout; "" without any).

On a GPU the process holds the device's lock itself (okgit.inductor.locking): shared while the
model is built and the compiled graphs run, alone while Inductor benchmarks, and not at all
while it compiles on the CPU.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    ref, device, out, *rest = argv
    modes = (rest[0] if rest else "default").split(",")
    knobs = {str(k): int(v) for k, v in json.loads(rest[1]).items()} if len(rest) > 1 else {}
    sizes = rest[2] if len(rest) > 2 else "dynamic"
    from okgit.eval.parent.devices import DeviceHold
    from okgit.inductor.locking import exclusive_benchmarks

    if device == "cpu":  # the compiled graphs run under Triton's interpreter, as the evaluator's workers run them
        from okgit.backends.triton import interpret_as_compiled

        interpret_as_compiled()
    hold = DeviceHold("cuda:0" if device == "cuda" else None, "seed")  # the one GPU this process sees
    hooked = exclusive_benchmarks(hold) if device == "cuda" else []
    lock = (f"exclusive for Inductor's benchmarks ({', '.join(hooked)})" if hooked else
            "exclusive throughout (no benchmarker found to hold it for)" if device == "cuda" else "none (a CPU)")
    with hold.region("exclusive", "compile") if device == "cuda" and not hooked else contextlib.nullcontext():
        for i, mode in enumerate(modes):
            path = Path(out) if i == 0 else Path(out).with_suffix(f".{i}.py")
            answer = _seed(ref, device, path, mode, knobs, sizes if i == 0 else "dynamic", hold)
            print(json.dumps({**answer, "mode": mode, "lock": lock}), flush=True)
            if mode == "default" and not answer.get("ok"):
                break  # what the default mode cannot take, max-autotune cannot either
    return 0


def _seed(ref: str, device: str, out: Path, mode: str, knobs: dict[str, int], sizes: str, hold: Any) -> dict[str, Any]:
    from okgit.inductor.capture import NotCaptured, capture
    from okgit.inductor.standalone import standalone_file
    from okgit.lower.graph import Unsupported

    reference = Path(ref).read_text()
    try:
        cap = capture(ref, knobs, device, mode, sizes != "static", hold)
        source = standalone_file(reference, cap, device, mode)
        static = capture(ref, knobs, device, mode, False, hold) if sizes == "both" else None
        differs = _differs(static, cap) if static is not None else ""
        files = {}
        if static is not None:
            files["static"] = standalone_file(reference, static, device, mode)
            if differs:
                files["specialised"] = standalone_file(reference, cap, device, mode, static)
    except (NotCaptured, Unsupported) as e:
        return {"ok": False, "why": str(e)}
    kernels = sum(len(g["kernels"]) for g in cap["graphs"])
    if not kernels:
        return {"ok": False, "why": "Inductor made no Triton kernel of it (vendor calls only)"}
    out.write_text(source)
    written: dict[str, str | None] = {"static": None, "specialised": None}
    for what, text in files.items():
        written[what] = str(out.with_suffix(f".{what}.py"))
        out.with_suffix(f".{what}.py").write_text(text)
    free = sorted({e for g in cap["graphs"] for e in g["assumed"]["symbols"].values()})
    layout = "; ".join(dict.fromkeys(g["layout"] for g in cap["graphs"] if g["layout"]))
    return {"ok": True, "path": str(out), "kernels": kernels, "modes": [g["mode"] for g in cap["graphs"]],
            "dynamic": free, **written, "differs": differs, "layout": layout}


def _differs(static: dict[str, Any], dynamic: dict[str, Any]) -> str:
    """How Inductor's kernels at static sizes differ from its dynamic ones: in kind (say a
    reduction kept in registers where the dynamic one loops), else in their text or launch
    settings: the sizes as constants, so that the index arithmetic divides by constants (shifts
    and multiplications) instead of by arguments, which Triton's own specialisation (on
    divisibility by 16, not on values) never gives; on the H200 the development set's batch norm
    ran 1.7x faster so (torch.compile 2976 us, the dynamic seed at best 4728). "" where they are
    the same: the specialised file would only repeat the dynamic one."""
    def kinds(cap: dict[str, Any]) -> list[str]:
        return [re.sub(r"_\d+$", "", k["name"]) for g in cap["graphs"] for k in g["kernels"]]

    def kernels(cap: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(k["source"], k["kwargs"], k["num_warps"], k["num_stages"]) for g in cap["graphs"] for k in g["kernels"]]

    a, b = kinds(static), kinds(dynamic)
    if a != b:
        return (f"static: {', '.join(sorted(set(a) - set(b))) or len(a)}; "
                f"dynamic: {', '.join(sorted(set(b) - set(a))) or len(b)}")
    if kernels(static) != kernels(dynamic):
        return "the same kernels, with the sizes as constants or other launch settings"
    return ""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
