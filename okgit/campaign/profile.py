"""`okgit profile MODEL.py`: where a whole model's time goes, ranked, with its noise (parent side).

The model runs in its own process (okgit.campaign.probe), profiled over REPEATS calls; this
side checks the file, starts that process, and places each row against its roofline floor where
the device's peaks are measured (a GPU). On a CPU the times are the CPU's, and the report says so.

The noise: a row's time is the median over the repeats and its spread the middle half of them
(first to third quartile), as a fraction of the median. Two neighbours in the ranking whose
middle halves overlap are ordered within the noise: the report marks them and gives the order
past the noise as groups (`1 > 2-3 > 4`). On a CPU it gives the machine's load average too: a busy
CPU's times can move several-fold from one run to the next with little spread inside one.
"""

from __future__ import annotations

import json
import os
import statistics
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
    time_us: float  # per model call: the median over the repeats
    samples_us: list[float] = []  # its time in each repeat
    low_us: float | None = None  # the middle half of the repeats: first quartile ...
    high_us: float | None = None  # ... to third
    spread: float | None = None  # (high - low) / median
    tied: bool = False  # its order with the next row is within the noise (their middle halves overlap)
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
    repeats: int  # model calls profiled: the samples of every time here
    total_us: float  # the model's time per call (median): its kernels' (GPU), or its CPU time (CPU)
    total_spread: float | None = None  # the middle half of its repeats, as a fraction of the median
    settled: int  # rows from the top ranked past the noise (each apart from every row below it)
    rows: list[ProfileRow]
    chains: list[dict[str, Any]] = []  # neighbouring modules a kernel could fuse: paths, refused (why not, or None)

    def text(self, top: int | None = None) -> str:
        from okgit.views.tables import table

        shown = self.rows[:top] if top else self.rows
        rows = [[f"{i}{'~' if r.tied else ''}", r.kind, r.name, r.type.rsplit(".", 1)[-1] if r.type else "-", f"{r.share:.1%}",
                 fmt_us(r.time_us), _pct(r.spread), str(r.calls),
                 f"{r.roofline_position:.0%}" if r.roofline_position is not None else "-",
                 ", ".join(k["name"][:40] for k in r.kernels[:2]) or "-",
                 "yes" if r.extractable else (r.refused or "-")[:60]]
                for i, r in enumerate(shown, 1)]
        rows_us = sum(r.time_us for r in self.rows)
        head = (f"profile of {self.model} on {self.device}: {fmt_us(self.total_us)} us per call (median of {self.repeats} "
                f"repeats, spread {_pct(self.total_spread)}); the rows below {fmt_us(rows_us)} us of it together, "
                f"each row's SHARE a part of those. {self.note}")
        more = f"\n({len(self.rows) - len(shown)} more rows: --top {len(self.rows)})" if len(shown) < len(self.rows) else ""
        groups = order_groups(self.rows)
        if all(len(g) == 1 for g in groups[:len(shown)]):
            ranking = f"Every row shown is ranked past the noise (no two neighbours' middle halves over the {self.repeats} repeats overlap)."
        else:
            ranking = (f"~ its order with the next row is within the noise (their middle halves over the {self.repeats} repeats "
                       f"overlap); ranked past the noise: {_order_text(groups, len(shown))} (a range's rows in either order).")
        fusable = [("+".join(c["paths"]) + (f" (refused: {c['refused']})" if c.get("refused") else "")) for c in self.chains]
        chained = f"\nChains a kernel could fuse: {'; '.join(fusable)}." if fusable else ""
        return head + "\n" + table(["#", "KIND", "WHERE", "TYPE", "SHARE", "US", "SPREAD", "CALLS", "ROOFLINE",
                                    "TOP KERNELS", "EXTRACTABLE"], rows) + more + "\n" + ranking + chained


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
        found = json.loads(out.read_text())
    if hasattr(os, "getloadavg"):  # what else the machine ran meanwhile: on a CPU it is in every time
        found["load"] = [round(os.getloadavg()[0], 1), os.cpu_count() or 1]
    return found


def profile_model(path: Path, device: str | None = None) -> ProfileReport:
    path = Path(os.path.normpath(path))  # named as the user gave it, with `..` folded
    return report_of(run_probe(path, device), str(path))


def report_of(found: dict[str, Any], model: str) -> ProfileReport:
    from okgit.eval.roofline import floor_us

    peaks = found.get("peaks")
    rows = []
    for r in found["rows"]:
        leaf = found["leaves"].get(r["name"], {}) if r["kind"] == "module" else {}
        row = ProfileRow(**{k: r.get(k) for k in ("kind", "name", "type", "time_us", "samples_us", "share", "calls", "flops",
                                                  "min_bytes")},
                         kernels=r.get("kernels") or [], refused=leaf.get("refused") if leaf else "a call site, not a module",
                         extractable=bool(leaf) and leaf.get("refused") is None)
        if peaks and row.flops is not None and row.min_bytes is not None:
            rate = peaks.get("matmul", {}).get(_rate_name(leaf.get("param_dtype")), 0.0)
            row.floor_us = floor_us(row.flops, row.min_bytes, peaks, rate) or None
            row.roofline_position = min(1.0, row.floor_us / row.time_us) if row.floor_us and row.time_us else None
        row.low_us, row.high_us, row.spread = middle_half(row.samples_us)
        rows.append(row)
    for row, after in zip(rows, rows[1:]):
        row.tied = within_noise(row, after)
    settled = ranked_past_noise(rows)
    timed = found["device"] == "cuda"
    note = ("Device time of the kernels launched in each module (torch.profiler), roofline position against the "
            "measured peaks." if timed else
            "Profiled on the CPU, on one thread: these are CPU times (a GPU's ranking may differ); no roofline position."
            + _load_note(found))
    return ProfileReport(model=model, device=found["device"], timed=timed, note=note, repeats=found["repeats"],
                         total_us=found["total_us"], total_spread=middle_half(found["total_samples_us"])[2],
                         settled=settled, rows=rows, chains=found.get("chains") or [])


def middle_half(samples: list[float]) -> tuple[float | None, float | None, float | None]:
    """(first quartile, third quartile, their distance as a fraction of the median)."""
    if len(samples) < 2:
        return None, None, None
    low, mid, high = statistics.quantiles(samples, n=4, method="inclusive")
    return low, high, (high - low) / mid if mid else None


def order_groups(rows: list[ProfileRow]) -> list[list[int]]:
    """The ranking cut where the noise allows (row numbers from 1): a cut falls after a row when
    the first quartiles of it and every row above are above the third quartiles of every row
    below. Within a group the order is not a finding."""
    below = [float("-inf")] * (len(rows) + 1)  # the highest third quartile from each row down
    for i in range(len(rows) - 1, -1, -1):
        high = rows[i].high_us
        below[i] = max(below[i + 1], float("inf") if high is None else high)
    groups: list[list[int]] = [[]]
    lowest = float("inf")  # the lowest first quartile of the rows so far
    for i, row in enumerate(rows):
        groups[-1].append(i + 1)
        lowest = min(lowest, float("-inf") if row.low_us is None else row.low_us)
        if i + 1 < len(rows) and lowest > below[i + 1]:
            groups.append([])
    return groups if rows else []


def ranked_past_noise(rows: list[ProfileRow]) -> int:
    """How many rows from the top are each apart from every row below them (its first quartile
    above their third quartiles): the groups of one row at the head of the order."""
    groups = order_groups(rows)
    return next((i for i, g in enumerate(groups) if len(g) > 1), len(groups))


def within_noise(higher: ProfileRow, lower: ProfileRow) -> bool:
    """Whether two rows' order is within the noise: the middle halves of their repeats overlap."""
    if higher.low_us is None or lower.high_us is None:
        return False
    return higher.low_us <= lower.high_us


def _load_note(found: dict[str, Any]) -> str:
    """The machine's load while a CPU profile ran: other work's share of the CPU is in its times."""
    if not found.get("load"):
        return ""
    load, cores = found["load"]
    busy = load >= cores / 2
    return (f" Load average {load} on {cores} cores" + (": other work shares the CPU, so the times and their order "
            "may move from one run to the next." if busy else "."))


def _order_text(groups: list[list[int]], shown: int) -> str:
    """`1-2 > 3 > 4-5`: the groups that start by row `shown` (`...` for the groups after them)."""
    parts = [f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups if g[0] <= shown]
    return " > ".join(parts) + (" > ..." if len(parts) < len(groups) else "")


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "-"


def _rate_name(dtype: str | None) -> str:
    return {"float16": "fp16", "bfloat16": "bf16"}.get(dtype or "", "fp32")
