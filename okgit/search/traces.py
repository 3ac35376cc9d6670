"""`okgit traces export`: a run's model calls as training records (prompt, completion, reward).

Reads traces.jsonl (llm and candidate records) and journal.jsonl of each run. A generator
call is rewarded by what its candidate did in the evaluator:

    -1      no usable code, compile error, incorrect, rejected, crashed
     0.1    correct, but not faster (or not timed: a CPU claims no speed)
     s      correct and timed with speedup s > 1

Other roles (critic, intents, reflection) are exported with reward null. Candidates are
matched by source, so a reply that repeated an earlier candidate gets that candidate's result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from okgit.errors import OkgitError
from okgit.git.rundir import RunDir
from okgit.journal.events import Evaluated, RunStarted
from okgit.journal.files import read_jsonl
from okgit.search.types import source_key


class RunStore(Protocol):
    """What export needs of okgit.git.repo.Repo."""

    @property
    def runs_dir(self) -> Path: ...

    def run_dir(self, run_id: str) -> Path: ...


def reward(result: dict[str, Any] | None) -> float:
    if not result or not result.get("correct"):
        return -1.0
    speedup = result.get("speedup")
    if result.get("timed") and speedup and speedup > 1.0:
        return float(speedup)
    return 0.1


def run_records(run_dir: Path) -> list[dict[str, Any]]:
    """The training records of one run directory."""
    traces, _ = read_jsonl(RunDir(run_dir).traces)
    journal = RunDir(run_dir).events()
    started = next((e for e in journal if isinstance(e, RunStarted)), None)
    by_key = _candidates(traces, {e.cand: e.model_dump(mode="json") for e in journal if isinstance(e, Evaluated)})
    out = []
    for rec in traces:
        if rec.get("type") != "llm":
            continue
        if not rec.get("messages"):
            continue  # a run with record_prompts = false kept only the call's size and cost
        cand_rec = by_key.get(rec.get("source_key") or "")
        if rec.get("role") == "generator" and rec.get("source_key") and cand_rec is None:
            continue  # its candidate was never evaluated (the run stopped first): no reward to give
        out.append(_record(rec, cand_rec, run_dir.name, started.op if started else None))
    return out


def _candidates(traces: list[dict[str, Any]], evaluated: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Candidate records by source key, each with its result: the trace's, which is whole, else
    the journal's `evaluated` event (a run cut short)."""
    by_key: dict[str, dict[str, Any]] = {}
    for rec in traces:
        if rec.get("type") == "candidate" and isinstance(rec.get("source"), str):
            result = rec.get("result") or evaluated.get(rec.get("cand") or "")
            by_key.setdefault(source_key(rec["source"]), {**rec, "result": result})
    return by_key


def _record(rec: dict[str, Any], cand_rec: dict[str, Any] | None, run: str, op: str | None) -> dict[str, Any]:
    """One model call as a training record; a generator's is rewarded by its candidate's result."""
    role = rec.get("role")
    result = (cand_rec["result"] if cand_rec else None) if role == "generator" else None
    usage = rec.get("usage") or {}
    return {
        "run": run,
        "op": op,
        "cand": cand_rec.get("cand") if cand_rec else rec.get("cand"),
        "role": role,
        "model": rec.get("model"),
        "messages": rec.get("messages") or [],
        "completion": rec.get("reply") or "",
        "status": (result or {}).get("status") if role == "generator" else None,
        "speedup": (result or {}).get("speedup") if role == "generator" else None,
        "reward": reward(result) if role == "generator" else None,
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "cost_usd": rec.get("cost_usd"),
    }


# Said with every export: what the file holds and so where it may go.
CONTENTS = ("each record: the prompt messages (the op's source, its candidates, device figures), "
            "the model's reply, and the evaluator's reward; no keys")


class Exported(BaseModel):
    """What `okgit traces export` did (its --json output)."""

    path: Path | None  # None: there were no records, so no file was written
    records: int
    runs: list[str]  # the runs read

    def text(self) -> str:
        if self.path is not None:
            return (f"wrote {self.records} record{'s' if self.records != 1 else ''} to {self.path}\n"
                    f"{CONTENTS}")
        # Common, not an error: offline runs (templates, autotune) make no model calls.
        if not self.runs:
            why = "no runs yet"
        elif len(self.runs) == 1:
            why = f"no model calls in run {self.runs[0]}"
        else:
            why = f"no model calls in any of {len(self.runs)} runs"
        return f"0 records ({why}): nothing written"


def export(repo: RunStore, run_id: str | None = None, fmt: str = "jsonl", out: str | Path | None = None) -> Exported:
    """Write the training records of one run (or every run) as JSONL or Parquet; no file when there are none."""
    if fmt not in ("jsonl", "parquet"):
        raise OkgitError(f"traces export: unknown format {fmt} (jsonl or parquet)")
    dirs = _run_dirs(repo, run_id)
    records = [r for d in dirs for r in run_records(d)]
    runs = [d.name for d in dirs]
    if not records:
        return Exported(path=None, records=0, runs=runs)
    target = Path(out) if out else (dirs[0] if run_id else Path(repo.runs_dir)) / f"training.{fmt}"
    target.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        _write_parquet(records, target)
    else:
        with open(target, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    return Exported(path=target, records=len(records), runs=runs)


def _run_dirs(repo: RunStore, run_id: str | None) -> list[Path]:
    """The run directories selected: an unknown run is the store's error, while a run without
    traces.jsonl (or a repository with no runs yet) is a selection with nothing to export."""
    if run_id:
        return [Path(repo.run_dir(run_id))]
    root = Path(repo.runs_dir)
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _write_parquet(records: list[dict[str, Any]], target: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise OkgitError("parquet export needs pyarrow: pip install 'okgit[parquet]'") from None
    pq.write_table(pa.Table.from_pylist(records), target)
