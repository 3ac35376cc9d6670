"""`python -m okgit.inductor REF.py DEVICE OUT.py [MODE [KNOBS_JSON [static]]]`: the seed file of a
reference compiled at those shape knobs (default: the file's own), its knob-following dims
dynamic unless `static`, made in this process (a child of okgit's: it runs the reference and
Inductor). Prints one JSON line: {"ok": true, "kernels": N, "modes": [...], "dynamic": [...]}
or {"ok": false, "why": "..."}; "dynamic" names the sizes left free ("x.size(0)")."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    ref, device, out, *rest = argv
    mode = rest[0] if rest else "default"
    knobs = {str(k): int(v) for k, v in json.loads(rest[1]).items()} if len(rest) > 1 else {}
    dynamic = rest[2:3] != ["static"]
    from okgit.inductor.capture import NotCaptured, capture
    from okgit.inductor.standalone import standalone_file
    from okgit.lower.graph import Unsupported

    try:
        cap = capture(ref, knobs, device, mode, dynamic)
        source = standalone_file(Path(ref).read_text(), cap, device, mode)
    except (NotCaptured, Unsupported) as e:
        print(json.dumps({"ok": False, "why": str(e)}))
        return 0
    kernels = sum(len(g["kernels"]) for g in cap["graphs"])
    if not kernels:
        print(json.dumps({"ok": False, "why": "Inductor made no Triton kernel of it (vendor calls only)"}))
        return 0
    Path(out).write_text(source)
    free = sorted({e for g in cap["graphs"] for e in g["assumed"]["symbols"].values()})
    print(json.dumps({"ok": True, "kernels": kernels, "modes": [g["mode"] for g in cap["graphs"]], "dynamic": free}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
