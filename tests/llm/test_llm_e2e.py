"""End to end: LLMProposer through the real driver against a scripted OpenAI-compatible
server on 127.0.0.1, then `traces export` and a replay of the recorded traces."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from okgit import llm
from okgit.config import Config
from okgit.eval.base import InMemoryEvaluator
from okgit.eval.types import EvalError, EvalResult, Status
from okgit.journal.files import JsonlWriter, read_jsonl
from okgit.problem import load_problem
from okgit.search.driver import Budget, Search
from okgit.search.proposers.llm import LLMProposer, proposer_for_model
from okgit.search.proposers.replay import ReplayProposer
from okgit.search.traces import export
from okgit.search.types import Context

SECRET = "sk-okgit-SECRET-0123456789"

OP = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0


N = 1024


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


def kernel(body: str, tag: str) -> str:
    """A plausible Triton candidate; `tag` is what the scripted evaluator reacts to."""
    return f'''import torch
import torch.nn as nn
import triton
import triton.language as tl

# {tag}


@triton.jit
def _relu2(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    {body}
    tl.store(out_ptr + offs, y, mask=mask)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        _relu2[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024, num_warps=4)
        return out


N = 1024


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


BUGGY = kernel("y = tl.maxmium(x, 0.0) * 2.0", "v1")
WRONG = kernel("y = tl.maximum(x, 0.0) * 3.0", "v2")
GOOD = kernel("y = tl.maximum(x, 0.0) * 2.0", "v3")
BETTER = kernel("y = tl.where(x > 0, x + x, 0.0)", "v4")


def judge(source: str) -> EvalResult:
    if "maxmium" in source:
        return EvalResult(status=Status.compile_error, error=EvalError(
            gate="compile", message="Traceback ...\nAttributeError: module 'triton.language' has no attribute 'maxmium'"))
    if "* 3.0" in source:
        return EvalResult(status=Status.incorrect, max_abs_error=0.5, max_rel_error=0.5,
                          error=EvalError(gate="outputs", message="outputs differ from the reference"))
    speedup = 1.5 if "tl.where" in source else 1.2  # timed, so that the critic has figures to read
    return EvalResult(status=Status.correct, correct=True, timed=True, speedup=speedup, runtime_us=10 / speedup,
                      ref_runtime_us=10.0)


def role_of(messages: list[dict]) -> str:
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    for marker, role in (("performance critic", "critic"), ("tree of intents", "intents"),
                         ("library of optimization strategies", "reflection")):
        if marker in system:
            return role
    return "generator"


class ScriptedServer:
    """A threaded OpenAI-compatible endpoint answering each role from its own script."""

    def __init__(self, scripts: dict[str, list[str] | Callable[[list[dict]], str]]) -> None:
        self.scripts = {k: v if callable(v) else list(v) for k, v in scripts.items()}
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                role = role_of(body["messages"])
                server.requests.append({"path": self.path, "role": role, "auth": self.headers.get("authorization"),
                                        "messages": body["messages"], "max_tokens": body.get("max_tokens")})
                script = server.scripts.get(role) or ["(no more replies)"]
                if callable(script):  # a role that answers by what it is shown
                    text = script(body["messages"])
                else:
                    text = script.pop(0) if len(script) > 1 else script[0]
                # A reply scripted as "CUT:<text>" stops at max_tokens, as a long file does
                finish, text = ("length", text[4:]) if text.startswith("CUT:") else ("stop", text)
                data = json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
                }).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def generator_prompts(self) -> list[str]:
        return ["\n".join(m["content"] for m in r["messages"]) for r in self.requests if r["role"] == "generator"]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def run_search(tmp: Path, run: str, proposer, iterations: int) -> tuple[Search, Context]:
    run_dir = tmp / "runs" / run
    journal = JsonlWriter(run_dir / "journal.jsonl", run)
    traces = JsonlWriter(run_dir / "traces.jsonl", run)
    journal.write("run_started", op="relu2.py", model=getattr(proposer, "model", "replay"))
    problem = load_problem("relu2.py", source=OP)
    evaluator = InMemoryEvaluator(judge)
    ctx = Context(problem=problem, reference=evaluator.reference(problem), backend="triton", device="cpu",
                  log=journal.write, trace=traces.write)
    search = Search(ctx, evaluator, Budget(iterations=iterations, patience=10), accept=lambda a: f"okgit/{run}/{a.cand}")
    search.run([proposer])
    return search, ctx


@pytest.fixture
def server():
    s = ScriptedServer({
        "intents": ['```json\n[{"description": "one fused Triton kernel for relu and scale", "priority": 0.9},\n'
                    ' {"description": "vectorized loads with a larger block", "priority": 0.4},]\n```'],
        "generator": [f"Here is a kernel.\n```python\n{s}```" for s in (BUGGY, WRONG, GOOD, BETTER)],
        "critic": ['```json\n{"bottleneck_type": "Memory-bound", "roofline_position": "40%", '
                   '"specific_issue": "two passes over x", "recommendation": "compute x + x with one tl.where", '
                   '"estimated_headroom": "1.5x", "confidence": "high",}\n```'],
        "reflection": ['[{"strategy": "fused elementwise", "intent": "i1", "lesson": "one pass pays on relu chains"}]'],
    })
    yield s
    s.close()


@pytest.mark.slow  # a search with real evaluation, the model on loopback
def test_model_on_loopback_end_to_end(tmp_path, monkeypatch, server):
    monkeypatch.setenv("OKGIT_API_KEY", SECRET)
    monkeypatch.setenv("OKGIT_DATA_DIR", str(tmp_path / "data"))
    config = Config(model="scripted-coder", api_base=server.url, prices={"scripted-coder": {"input": 1e-6, "output": 2e-6}})
    proposer = proposer_for_model(config)
    assert isinstance(proposer, LLMProposer)
    search, ctx = run_search(tmp_path, "r1", proposer, iterations=4)

    prompts = server.generator_prompts()
    assert len(prompts) == 4 and [a.proposal.source for a in ctx.attempts] == [BUGGY, WRONG, GOOD, BETTER]
    assert "return torch.relu(x) * 2.0" in prompts[0]  # the reference reaches the model
    assert "has no attribute 'maxmium'" in prompts[1] and "tl.maximum(" in prompts[1]  # error + toolchain look-up
    assert "max abs difference: 0.5" in prompts[2]  # the mismatch reaches the next prompt
    assert "compute x + x with one tl.where" in prompts[3]  # the critic's diagnosis reaches the generator
    # The buggy implementation of the first intent was retried under the same intent.
    assert {a.proposal.intent for a in ctx.attempts[:3]} == {"one fused Triton kernel for relu and scale"}
    assert ctx.attempts[2].tag == "okgit/r1/c003" and ctx.attempts[1].proposal.parent == "c001"
    assert all(r["auth"] == f"Bearer {SECRET}" and r["path"].endswith("/chat/completions") for r in server.requests)

    run_dir = tmp_path / "runs" / "r1"
    events, _ = read_jsonl(run_dir / "journal.jsonl")
    calls = [e for e in events if e["type"] == "llm_call"]
    assert {c["role"] for c in calls} == {"intents", "generator", "critic", "reflection"}
    assert all(c["prompt_tokens"] == 1000 and c["cost_usd"] == pytest.approx(1.4e-3) for c in calls)
    assert search.spent_usd == pytest.approx(1.4e-3 * len(calls))
    diagnosis = next(e for e in events if e["type"] == "diagnosis")
    assert diagnosis["bottleneck_type"] == "memory" and diagnosis["roofline_position"] == pytest.approx(0.4)
    assert {e["op"] for e in events if e["type"] == "intent"} >= {"insert", "update"}
    records, _ = read_jsonl(run_dir / "traces.jsonl")
    llm_records = [r for r in records if r["type"] == "llm"]
    assert llm_records[0]["messages"] and llm_records[0]["usage"]["completion_tokens"] == 200
    for path in (run_dir / "journal.jsonl", run_dir / "traces.jsonl"):
        assert SECRET not in path.read_text()

    # The skill library learned the reflected strategy.
    skills = json.loads((tmp_path / "data" / "skills.json").read_text())
    assert any(s["name"] == "fused elementwise" and s["correct"] >= 1 for s in skills["strategies"])

    # Training records: prompt, completion, reward.
    repo = SimpleNamespace(runs_dir=tmp_path / "runs", run_dir=lambda run: tmp_path / "runs" / run)
    rows = [json.loads(line) for line in export(repo, "r1").path.read_text().splitlines()]
    gen = [r for r in rows if r["role"] == "generator"]
    assert [r["reward"] for r in gen] == [-1.0, -1.0, 1.2, 1.5]
    assert gen[0]["messages"][0]["role"] == "system" and gen[0]["completion"].startswith("Here is a kernel")

    # A replay of the recorded traces reproduces the candidates and the result, with no model.
    requests = len(server.requests)
    replay = proposer_for_model(Config(model=f"replay:{run_dir / 'traces.jsonl'}"))
    assert isinstance(replay, ReplayProposer)
    _, ctx2 = run_search(tmp_path, "r2", replay, iterations=10)
    assert [a.proposal.source for a in ctx2.attempts] == [a.proposal.source for a in ctx.attempts]
    assert [a.result.status for a in ctx2.attempts] == [a.result.status for a in ctx.attempts]
    assert ctx2.best.cand == ctx.best.cand
    assert len(server.requests) == requests


@pytest.mark.slow  # litellm over a loopback server
def test_ping_and_doctor_line(server):
    line = llm.ping("scripted-coder", api_base=server.url)
    assert line.startswith("answered 'ok' in") or line.startswith("answered "), line


@pytest.mark.slow  # two searches with real evaluation, the model on loopback
def test_a_resumed_run_counts_what_its_earlier_model_calls_cost(tmp_path, monkeypatch, server):
    """--resume rebuilds the spend from the journal's llm_call events: the dollar budget holds
    across the interruption instead of starting again at $0."""
    from okgit.run import _restore

    monkeypatch.setenv("OKGIT_API_KEY", SECRET)
    monkeypatch.setenv("OKGIT_DATA_DIR", str(tmp_path / "data"))
    prices = {"scripted-coder": {"input": 1e-6, "output": 2e-6}}
    first, _ = run_search(tmp_path, "r1", proposer_for_model(Config(model="scripted-coder", api_base=server.url, prices=prices)),
                          iterations=2)
    spent = first.spent_usd
    assert spent > 0
    run_dir = tmp_path / "runs" / "r1"
    problem = load_problem("relu2.py", source=OP)
    evaluator = InMemoryEvaluator(judge)
    ctx = Context(problem=problem, reference=evaluator.reference(problem), backend="triton", device="cpu",
                  log=JsonlWriter(run_dir / "journal.jsonl", "r1").write)
    _restore(SimpleNamespace(run_dir=run_dir), ctx)
    assert ctx.spent_usd == pytest.approx(spent) and len(ctx.attempts) == 2
    config = Config(model="scripted-coder", api_base=server.url, prices=prices, budget_usd=spent)
    resumed = Search(ctx, evaluator, Budget(iterations=10, patience=10, usd=spent), accept=lambda a: f"okgit/r1/{a.cand}")
    assert resumed.run([proposer_for_model(config)]).startswith("dollar budget")
    assert len(ctx.attempts) == 2 and ctx.spent_usd == pytest.approx(spent)
