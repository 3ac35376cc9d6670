"""`python -m okgit.inductor REF.py DEVICE OUT.py [MODE [KNOBS_JSON [dynamic|static|both]]]`: the seed
file of a reference compiled at those shape knobs (default: the file's own), its batch and
knob-following dims dynamic (`static`: every size static, as torch.compile's default; `both`:
the dynamic file, OUT.static.py (the static one, for comparison) and, where Inductor's static
kernels differ from its dynamic ones, say a reduction kept in registers where the dynamic one
loops, OUT.specialised.py, which takes the static kernels at exactly the shapes compiled for and
the dynamic ones elsewhere). Made in this process (a child of okgit's: it runs the reference
and Inductor). Prints one JSON line: {"ok": true, "kernels": N, "modes": [...], "dynamic":
[...], "static": PATH | null, "specialised": PATH | null, "differs": "..."} or {"ok": false,
"why": "..."}; "dynamic" names the sizes left free ("x.size(0)")."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    ref, device, out, *rest = argv
    mode = rest[0] if rest else "default"
    knobs = {str(k): int(v) for k, v in json.loads(rest[1]).items()} if len(rest) > 1 else {}
    sizes = rest[2] if len(rest) > 2 else "dynamic"
    from okgit.inductor.capture import NotCaptured, capture
    from okgit.inductor.standalone import standalone_file
    from okgit.lower.graph import Unsupported

    reference = Path(ref).read_text()
    try:
        cap = capture(ref, knobs, device, mode, sizes != "static")
        source = standalone_file(reference, cap, device, mode)
        static = capture(ref, knobs, device, mode, False) if sizes == "both" else None
        differs = _differs(static, cap) if static is not None else ""
        files = {}
        if static is not None:
            files["static"] = standalone_file(reference, static, device, mode)
            if differs:
                files["specialised"] = standalone_file(reference, cap, device, mode, static)
    except (NotCaptured, Unsupported) as e:
        print(json.dumps({"ok": False, "why": str(e)}))
        return 0
    kernels = sum(len(g["kernels"]) for g in cap["graphs"])
    if not kernels:
        print(json.dumps({"ok": False, "why": "Inductor made no Triton kernel of it (vendor calls only)"}))
        return 0
    Path(out).write_text(source)
    written: dict[str, str | None] = {"static": None, "specialised": None}
    for what, text in files.items():
        written[what] = str(Path(out).with_suffix(f".{what}.py"))
        Path(out).with_suffix(f".{what}.py").write_text(text)
    free = sorted({e for g in cap["graphs"] for e in g["assumed"]["symbols"].values()})
    print(json.dumps({"ok": True, "kernels": kernels, "modes": [g["mode"] for g in cap["graphs"]], "dynamic": free,
                      **written, "differs": differs}))
    return 0


def _differs(static: dict[str, Any], dynamic: dict[str, Any]) -> str:
    """How Inductor's kernels at static sizes differ in kind from its dynamic ones ("" where they
    do not: then only the sizes are constants, which Triton's own specialisation covers)."""
    def kinds(cap: dict[str, Any]) -> list[str]:
        return [re.sub(r"_\d+$", "", k["name"]) for g in cap["graphs"] for k in g["kernels"]]

    a, b = kinds(static), kinds(dynamic)
    if a == b:
        return ""
    return f"static: {', '.join(sorted(set(a) - set(b))) or len(a)}; dynamic: {', '.join(sorted(set(b) - set(a))) or len(b)}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
