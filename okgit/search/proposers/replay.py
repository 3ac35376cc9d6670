"""Replay: play a recorded run's candidates back, in order, without any model.

`--model replay:PATH` (PATH a traces.jsonl) re-runs a search deterministically, to debug a run
or to test everything around the model. Each candidate record's source is proposed again,
after re-recording the llm records that led to it, so the new run's traces read like the
original's. Replayed calls cost nothing and say so (`replayed: true`, cost 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from okgit.errors import OkgitError
from okgit.journal.files import read_jsonl
from okgit.search.types import Context, Proposal, source_key


class ReplayProposer:
    name = "replay"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise OkgitError(f"replay: {self.path}: no such traces file")
        records, _ = read_jsonl(self.path)
        # Each step: the llm records since the previous candidate, then the candidate.
        self.steps: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
        calls: list[dict[str, Any]] = []
        for record in records:
            if record.get("type") == "llm":
                calls.append(record)
            elif record.get("type") == "candidate" and isinstance(record.get("source"), str):
                self.steps.append((calls, record))
                calls = []
        if not self.steps:
            raise OkgitError(f"replay: {self.path} holds no candidate records")
        self.position = 0

    def propose(self, ctx: Context) -> Proposal | None:
        seen = {source_key(a.proposal.source) for a in ctx.attempts}
        while self.position < len(self.steps):
            calls, record = self.steps[self.position]
            self.position += 1
            # A candidate this run already has (say, from the templates both runs ran first)
            # is not proposed again: the driver would count it as a duplicate.
            if source_key(record["source"]) in seen:
                continue
            for call in calls:
                self._replay_call(ctx, call)
            return Proposal(
                source=record["source"],
                origin="replay",
                intent=record.get("intent") or "",
                parent=record.get("parent"),
                backend=record.get("backend") or ctx.backend,
                meta={"replayed_cand": record.get("cand"), "replayed_origin": record.get("origin")},
            )
        return None

    @staticmethod
    def _replay_call(ctx: Context, call: dict[str, Any]) -> None:
        usage = call.get("usage") or {}
        ctx.log(
            "llm_call", role=call.get("role"), model=call.get("model"),
            prompt_tokens=usage.get("prompt_tokens", 0), completion_tokens=usage.get("completion_tokens", 0),
            cost_usd=0.0, latency_s=0.0, ok=call.get("ok", True), replayed=True,
        )
        fields = {k: v for k, v in call.items() if k not in ("type", "ts", "run", "cost_usd")}
        ctx.trace("llm", **fields, cost_usd=0.0, replayed=True)
