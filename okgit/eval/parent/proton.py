"""Proton's PC sampling read back: warp-stall reasons per kernel, and the source line behind each.

The profiling pass's Proton worker (okgit.eval.worker.counters) runs with a Proton session in
PC-sampling mode (CUPTI's sampler: no performance-counter rights needed where the driver allows
sampling) and makes the profiled calls inside the scope PROTON_SCOPE. Proton writes a Hatchet
tree (JSON): `[root, device info]`, each node `{"frame": {"name", "type"}, "metrics": {...},
"children": [...]}`. Under the scope hang the kernels launched in it (named as CUPTI names them),
and under each kernel the source lines its samples fell on (`file:line@function`), each with
`num_samples`, `num_stalled_samples` and one count per `stalled_<reason>` (Proton's
PCSamplingMetric, triton/third_party/proton/csrc/include/Data/Metric.h).

The file is written by the candidate's own process: it is read with a size bound and as plain
JSON, and only ever feeds the profile, never a verdict.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from okgit.eval.parent.ncu import stall_shares
from okgit.eval.protocol.jobs import PROTON_FILE, PROTON_SCOPE

MAX_BYTES = 64 * 2**20
LINE = re.compile(r"^(?P<file>.*):(?P<line>\d+)@(?P<function>.*)$")


def written(job_dir: Path) -> Path | None:
    """The file Proton wrote in `job_dir` (named for its session, with the format's extension)."""
    found = sorted(p for p in job_dir.glob(f"{PROTON_FILE}*") if p.is_file())
    return found[0] if found else None


def read(job_dir: Path) -> dict[str, dict[str, Any]] | None:
    """The stalls of the profiled calls' kernels from the Proton file in `job_dir`; None without one."""
    path = written(job_dir)
    if path is None or path.stat().st_size > MAX_BYTES:
        return None
    try:
        return kernels(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def kernels(tree: Any) -> dict[str, dict[str, Any]]:
    """kernel name -> {"samples", "stalled", "stalls": [(reason, share)], "lines": {reason: "file:line"}}
    for the kernels under PROTON_SCOPE (all top-level kernels where the scope is absent)."""
    root = tree[0] if isinstance(tree, list) and tree else tree
    if not isinstance(root, dict):
        raise ValueError("not a Proton tree")
    scope = _find(root, PROTON_SCOPE)
    out: dict[str, dict[str, Any]] = {}
    for node in _children(scope or root):
        name = _name(node)
        if not name or LINE.match(name) or name == PROTON_SCOPE:
            continue
        counts: dict[str, float] = {}
        lines: dict[str, dict[str, float]] = {}
        _collect(node, None, counts, lines)
        samples = counts.pop("num_samples", 0.0)
        stalled = counts.pop("num_stalled_samples", 0.0)
        stalls = {k.removeprefix("stalled_").lower(): v for k, v in counts.items() if k.startswith("stalled_")}
        if samples <= 0:
            continue
        k = out.setdefault(name, {"samples": 0.0, "stalled": 0.0, "counts": {}, "lines": {}})
        k["samples"] += samples
        k["stalled"] += stalled
        for reason, v in stalls.items():
            k["counts"][reason] = k["counts"].get(reason, 0.0) + v
        for reason, where in lines.items():
            best = max(where, key=lambda w: where[w])
            k["lines"].setdefault(reason.removeprefix("stalled_").lower(), best)
    for k in out.values():
        k["stalls"] = stall_shares(k.pop("counts"))
    return out


def _collect(node: dict[str, Any], line: str | None, counts: dict[str, float],
             lines: dict[str, dict[str, float]]) -> None:
    """Sum the sample counts of a subtree; per stall reason, its samples per source line."""
    m = LINE.match(_name(node))
    if m:
        line = f"{Path(m.group('file')).name}:{m.group('line')}"
    metrics = node.get("metrics") if isinstance(node.get("metrics"), dict) else {}
    for key, value in (metrics or {}).items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            continue
        if key in ("num_samples", "num_stalled_samples") or key.startswith("stalled_"):
            counts[key] = counts.get(key, 0.0) + float(value)
            if line and key.startswith("stalled_") and value > 0:
                lines.setdefault(key, {})[line] = lines.get(key, {}).get(line, 0.0) + float(value)
    for child in _children(node):
        _collect(child, line, counts, lines)


def _find(node: dict[str, Any], name: str) -> dict[str, Any] | None:
    if _name(node) == name:
        return node
    for child in _children(node):
        found = _find(child, name)
        if found is not None:
            return found
    return None


def _name(node: Any) -> str:
    frame = node.get("frame") if isinstance(node, dict) else None
    return str(frame.get("name", "")) if isinstance(frame, dict) else ""


def _children(node: dict[str, Any]) -> list[dict[str, Any]]:
    children = node.get("children")
    return [c for c in children if isinstance(c, dict)] if isinstance(children, list) else []
