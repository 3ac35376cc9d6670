"""ReplayProposer: a recorded traces.jsonl played back in order, with no model."""

from __future__ import annotations

import json

import pytest

from okgit.config import Config
from okgit.errors import OkgitError
from okgit.eval.base import InMemoryEvaluator
from okgit.eval.types import EvalResult, Status
from okgit.problem import load_problem
from okgit.search.driver import Budget, Search
from okgit.search.proposers.llm import proposer_for_model
from okgit.search.proposers.replay import ReplayProposer
from okgit.search.types import Context, Proposal

OP = "import torch\n\nclass Model:\n    pass\n\ndef get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n"


def src(n: int) -> str:
    return OP.replace("pass", f"pass  # v{n}")


def write_traces(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


RECORDS = [
    {"type": "llm", "cand": None, "role": "intents", "model": "gpt-4o", "messages": [{"role": "user", "content": "plan"}],
     "reply": "[]", "usage": {"prompt_tokens": 5, "completion_tokens": 2}, "cost_usd": 0.01},
    {"type": "candidate", "cand": "c001", "origin": "template:relu", "intent": "template", "parent": None, "source": src(1), "result": {}},
    {"type": "llm", "cand": "c002", "role": "generator", "model": "gpt-4o", "messages": [{"role": "user", "content": "go"}],
     "reply": "code", "usage": {"prompt_tokens": 7, "completion_tokens": 3}, "cost_usd": 0.02},
    {"type": "candidate", "cand": "c002", "origin": "llm:gpt-4o", "intent": "fuse", "parent": "c001", "source": src(2), "result": {}},
    {"type": "candidate", "cand": "c003", "origin": "llm:gpt-4o", "intent": "fuse", "parent": "c002", "source": src(3), "result": {}},
]


class Recorder:
    def __init__(self):
        self.events, self.traces = [], []

    def context(self):
        problem = load_problem("op.py", source=OP)
        return Context(problem=problem, reference=InMemoryEvaluator(judge).reference(problem), backend="triton", device="cpu",
                      log=lambda type, **f: self.events.append({"type": type, **f}),
                      trace=lambda type, **f: self.traces.append({"type": type, **f}))


def judge(source: str) -> EvalResult:
    return EvalResult(status=Status.correct, correct=True, timed=False)


def test_plays_back_candidates_and_their_llm_records_in_order(tmp_path):
    path = write_traces(tmp_path / "traces.jsonl", RECORDS)
    replay = proposer_for_model(Config(model=f"replay:{path}"))
    assert isinstance(replay, ReplayProposer)
    rec = Recorder()
    ctx = rec.context()
    proposals = []
    while (p := replay.propose(ctx)) is not None:
        proposals.append(p)
    assert [p.source for p in proposals] == [src(1), src(2), src(3)]
    assert proposals[1].origin == "replay" and proposals[1].meta["replayed_cand"] == "c002" and proposals[1].intent == "fuse"
    calls = [e for e in rec.events if e["type"] == "llm_call"]
    assert [(c["role"], c["cost_usd"], c["replayed"]) for c in calls] == [("intents", 0.0, True), ("generator", 0.0, True)]
    assert rec.traces[1]["messages"] == [{"role": "user", "content": "go"}] and rec.traces[1]["cand"] == "c002"


def test_skips_what_this_run_already_evaluated(tmp_path):
    """Both runs ran the templates first: replay must not offer the template candidate again."""
    replay = ReplayProposer(write_traces(tmp_path / "traces.jsonl", RECORDS))
    rec = Recorder()
    ctx = rec.context()
    evaluator = InMemoryEvaluator(judge)

    class Template:
        name = "templates"
        done = False

        def propose(self, ctx):
            if self.done:
                return None
            self.done = True
            return Proposal(source=src(1), origin="template:relu")

    Search(ctx, evaluator, Budget(iterations=10), accept=lambda a: None).run([Template(), replay])
    assert [a.proposal.source for a in ctx.attempts] == [src(1), src(2), src(3)]
    assert [a.proposal.origin for a in ctx.attempts] == ["template:relu", "replay", "replay"]


def test_bad_paths_are_one_line_errors(tmp_path):
    with pytest.raises(OkgitError, match="no such traces file"):
        ReplayProposer(tmp_path / "missing.jsonl")
    with pytest.raises(OkgitError, match="no candidate records"):
        ReplayProposer(write_traces(tmp_path / "t.jsonl", RECORDS[:1]))
