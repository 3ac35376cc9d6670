"""`okgit profile MODEL.py`: where a whole model's time goes, ranked (parent side).

The model runs in its own process (okgit.campaign.probe); this side checks the file, starts
that process, and places each row against its roofline floor where the device's peaks are
measured (a GPU). On a CPU the times are the CPU's, and the report says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from okgit.errors import OkgitError
from okgit.fmt import fmt_us
from okgit.problem import REQUIRED, top_level_names

PROBE_TIMEOUT_S = 900


class ProfileRow(BaseModel):
    kind: str  # module (a leaf module, by its path in the model) | call site (a line of the model file)
    name: str
    type: str | None = None  # a module's class
    time_us: float  # per model call
    share: float  # of the model's attributed time
    calls: int  # per model call
    kernels: list[dict[str, Any]] = []  # the top kernels (GPU) or ops (CPU) with their times
    flops: float | None = None
    min_bytes: float | None = None
    floor_us: float | None = None  # roofline floor, where the device's peaks are measured
    roofline_position: float | None = None  # floor / time
    extractable: bool = False  # a module okgit can turn into an op file (see `refused`)
    refused: str | None = None


class ProfileReport(BaseModel):
    """What `okgit profile --json` prints (docs/json.md)."""

    model: str
    device: str
    timed: bool  # False on a CPU: CPU times, not a GPU's
    note: str
    total_us: float  # the model's time per call: its kernels' (GPU), or its rows' medians (CPU)
    rows: list[ProfileRow]

    def text(self, top: int | None = None) -> str:
        from okgit.views.tables import table

        shown = self.rows[:top] if top else self.rows
        rows = [[str(i), r.kind, r.name, r.type.rsplit(".", 1)[-1] if r.type else "-", f"{r.share:.1%}",
                 fmt_us(r.time_us), str(r.calls),
                 f"{r.roofline_position:.0%}" if r.roofline_position is not None else "-",
                 ", ".join(k["name"][:40] for k in r.kernels[:2]) or "-",
                 "yes" if r.extractable else (r.refused or "-")[:60]]
                for i, r in enumerate(shown, 1)]
        head = f"profile of {self.model} on {self.device}: {fmt_us(self.total_us)} us per call. {self.note}"
        more = f"\n({len(self.rows) - len(shown)} more rows: --top {len(self.rows)})" if len(shown) < len(self.rows) else ""
        return head + "\n" + table(["#", "KIND", "WHERE", "TYPE", "SHARE", "US", "CALLS", "ROOFLINE", "TOP KERNELS",
                                    "EXTRACTABLE"], rows) + more


def check_model(path: Path) -> None:
    if not path.is_file():
        raise OkgitError(f"{path}: no such file")
    try:
        names = top_level_names(path.read_text(), str(path))
    except UnicodeDecodeError:
        raise OkgitError(f"{path}: not a Python file") from None
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        raise OkgitError(f"{path}: not a model file: missing {', '.join(missing)} (KernelBench format)")


def run_probe(path: Path, device: str | None) -> dict[str, Any]:
    """The probe's findings (okgit.campaign.probe) for the model at `path`."""
    check_model(path)
    with tempfile.TemporaryDirectory(prefix="okgit-probe-") as tmp:
        out = Path(tmp) / "probe.json"
        cmd = [sys.executable, "-m", "okgit.campaign.probe", str(path.resolve()), "--device", device or "auto", "--out", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, cwd=path.resolve().parent,
                                  env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        except subprocess.TimeoutExpired:
            raise OkgitError(f"{path}: the model did not finish profiling within {PROBE_TIMEOUT_S} s") from None
        if proc.returncode != 0 or not out.is_file():
            lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("USDT:")]
            raise OkgitError(f"{path}: the model failed to run: {lines[-1] if lines else f'exit {proc.returncode}'}")
        return json.loads(out.read_text())


def profile_model(path: Path, device: str | None = None) -> ProfileReport:
    return report_of(run_probe(path, device), str(path))


def report_of(found: dict[str, Any], model: str) -> ProfileReport:
    from okgit.eval.roofline import floor_us

    peaks = found.get("peaks")
    rows = []
    for r in found["rows"]:
        leaf = found["leaves"].get(r["name"], {}) if r["kind"] == "module" else {}
        row = ProfileRow(**{k: r.get(k) for k in ("kind", "name", "type", "time_us", "share", "calls", "flops", "min_bytes")},
                         kernels=r.get("kernels") or [], refused=leaf.get("refused") if leaf else "a call site, not a module",
                         extractable=bool(leaf) and leaf.get("refused") is None)
        if peaks and row.flops is not None and row.min_bytes is not None:
            rate = peaks.get("matmul", {}).get(_rate_name(leaf.get("param_dtype")), 0.0)
            row.floor_us = floor_us(row.flops, row.min_bytes, peaks, rate) or None
            row.roofline_position = min(1.0, row.floor_us / row.time_us) if row.floor_us and row.time_us else None
        rows.append(row)
    timed = found["device"] == "cuda"
    note = ("Device time of the kernels launched in each module (torch.profiler), roofline position against the "
            "measured peaks." if timed else
            "Profiled on the CPU: these are CPU times (a GPU's ranking may differ); no roofline position.")
    return ProfileReport(model=model, device=found["device"], timed=timed, note=note, total_us=found["total_us"], rows=rows)


def _rate_name(dtype: str | None) -> str:
    return {"float16": "fp16", "bfloat16": "bf16"}.get(dtype or "", "fp32")
