"""The LLM search's spend and its continuity: the rules of the gates in the prompt, rendered
prompts pinned, truncated replies, the call budget, refusals before a run starts, a resumed
run continuing its tree, and a batch of the model's candidates evaluated at once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from scripted_model import HARDWARE, OP, REFERENCE, ContentModel, judge
from test_llm_e2e import GOOD, ScriptedServer

from okgit.config import Config, SearchSettings
from okgit.eval.base import InMemoryEvaluator
from okgit.eval.parent.device_pool import DevicePool
from okgit.eval.parent.gates import gate_names, gates, rules_text
from okgit.journal.files import JsonlWriter, read_jsonl
from okgit.problem import load_problem
from okgit.search.driver import Budget, Search
from okgit.search.memory import SkillLibrary
from okgit.search.proposers.llm import LLMProposer
from okgit.search.types import Context

SNAPSHOTS = Path(__file__).parents[1] / "snapshots"
A, B = "one fused kernel for relu and scale", "vectorized loads with a wider block"
PLAN = {"ops": [{"op": "insert", "description": A, "priority": 0.9}, {"op": "insert", "description": B, "priority": 0.5}]}


def context(events: list[dict], **fields) -> Context:
    problem = load_problem("relu2.py", source=OP)
    return Context(problem=problem, reference=REFERENCE, backend="triton", device="cuda", hardware=HARDWARE,
                   log=lambda type, **f: events.append({"type": type, **f}) or {"type": type, **f}, **fields)


def proposer(tmp_path, model, **config) -> LLMProposer:
    search = config.pop("search", {})
    return LLMProposer(Config(model="gpt-4o", search=SearchSettings(**search), **config), complete=model,
                       library=SkillLibrary.load(tmp_path / "skills.json"))


def test_every_gate_has_a_rule_and_the_generator_prompt_states_them(tmp_path):
    assert all(g.rule_text().strip() for g in gates())  # every gate states its rule (Gate.rule)
    model = ContentModel(outcomes={A: ["1.2"]}, plans=[PLAN])
    events: list[dict] = []
    proposer(tmp_path, model).propose(context(events))
    system = model.prompts()[0].system
    for gate in gate_names():
        assert f"[{gate}]" in system
    for forbidden in ("threading", "subprocess", "ctypes", "okgit", "open()", "exec()"):
        assert forbidden in system
    assert "Bitwise deterministic" in system and "Never write to the inputs" in system


@pytest.mark.parametrize("name", ["generator_triton.v2", "critic.v2", "intents.v2"])
def test_rendered_prompts_match_their_snapshots(tmp_path, name):
    """A change to what a model is shown is a reviewed change: UPDATE_SNAPSHOTS=1 rewrites them."""
    model = ContentModel(outcomes={A: ["BUG", "1.2", "1.1"]}, plans=[PLAN])
    events: list[dict] = []
    ctx = context(events)
    search = Search(ctx, InMemoryEvaluator(judge, device="cuda"), Budget(iterations=3), accept=lambda a: None)
    search.run([proposer(tmp_path, model)])
    role = {"generator_triton.v2": "generator", "critic.v2": "critic", "intents.v2": "intents"}[name]
    shown = [m for m in model.shown if m.role == role][-1]
    text = f"{shown.system}\n=== user ===\n{shown.user}\n"
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()
    assert rules_text() in text or name != "generator_triton.v2"


def test_a_truncated_reply_is_detected_and_the_model_told(tmp_path, monkeypatch):
    cut = f"CUT:Here it is.\n```python\n{GOOD[:400]}"
    server = ScriptedServer({"intents": ['["one fused Triton kernel for relu and scale"]'],
                             "generator": [cut, f"```python\n{GOOD}```"], "critic": ["{}"], "reflection": ["[]"]})
    try:
        monkeypatch.setenv("OKGIT_DATA_DIR", str(tmp_path / "data"))
        events: list[dict] = []
        ctx = context(events)
        config = Config(model="scripted-coder", api_base=server.url, search=SearchSettings(max_tokens=2000))
        p = LLMProposer(config, library=SkillLibrary.load(tmp_path / "skills.json"))
        Search(ctx, InMemoryEvaluator(judge, device="cuda"), Budget(iterations=1), accept=lambda a: None).run([p])
    finally:
        server.close()
    calls = [e for e in events if e["type"] == "llm_call" and e["role"] == "generator"]
    assert [(c["ok"], c["truncated"]) for c in calls] == [(False, True), (True, False)]
    assert all(r["max_tokens"] == 2000 for r in server.requests)
    assert "cut off at max_tokens (2000)" in server.generator_prompts()[1]
    assert p.tree["i1"].candidates == 2  # the cut reply counted against the idea


def test_unusable_replies_count_and_the_call_budget_ends_the_search(tmp_path):
    class Mute(ContentModel):
        def generator(self, s):
            super().generator(s)
            return "I would rather not."

    model = Mute(outcomes={A: ["1.2"]}, plans=[PLAN])
    events: list[dict] = []
    ctx = context(events)
    p = proposer(tmp_path, model, search={"max_calls": 9})
    reason = Search(ctx, InMemoryEvaluator(judge, device="cuda"), Budget(iterations=10), accept=lambda a: None).run([p])
    assert not ctx.attempts and reason == "proposers exhausted"
    assert len([e for e in events if e["type"] == "llm_call"]) == 9
    # 4 unusable replies (3 repairs) fail an attempt; two failed attempts prune i1
    assert p.tree["i1"].status == "pruned" and p.tree["i1"].candidates == 8
    assert any("call budget spent (9 model calls" in e.get("message", "") for e in events)


def test_the_time_budget_is_checked_before_each_call(tmp_path):
    model = ContentModel(outcomes={A: ["BUG"]}, plans=[PLAN])
    events: list[dict] = []
    ctx = context(events)
    p = proposer(tmp_path, model)
    ctx.deadline = time.monotonic() - 1
    assert p.propose(ctx) is None and not model.shown
    assert any(e.get("message") == "llm: time budget spent" for e in events)


def test_a_resumed_run_continues_its_tree(tmp_path):
    """Run 1 prunes idea A and starts B; the resumed run rebuilds the tree, the failures and the
    spent calls from the journal: no new plan, A never proposed again, B continued from its base."""
    from okgit.run import _restore

    run_dir = tmp_path / "runs" / "r1"
    journal, traces = JsonlWriter(run_dir / "journal.jsonl", "r1"), JsonlWriter(run_dir / "traces.jsonl", "r1")
    first = ContentModel(outcomes={A: ["WRONG"], B: ["1.3", "1.1"]}, plans=[PLAN])
    ctx = context([])
    ctx.log, ctx.trace = journal.write, traces.write
    Search(ctx, InMemoryEvaluator(judge, device="cuda"), Budget(iterations=9), accept=lambda a: None).run(
        [proposer(tmp_path, first, search={"mismatch_retries": 3})])
    assert [a.proposal.intent for a in ctx.attempts] == [A] * 8 + [B]

    second = ContentModel(outcomes={B: ["1.5"]}, plans=[{"ops": [{"op": "insert", "description": A}]}])
    resumed = context([])
    resumed.log = JsonlWriter(run_dir / "journal.jsonl", "r1").write
    _restore(type("Space", (), {"run_dir": run_dir})(), resumed)
    p = proposer(tmp_path, second)
    Search(resumed, InMemoryEvaluator(judge, device="cuda"), Budget(iterations=11), accept=lambda a: None).run([p])
    assert not second.prompts("intents")  # no new plan: the tree was there, with B live
    new = resumed.attempts[9:]
    assert new and all(a.proposal.intent == B for a in new[:1]) and A not in [a.proposal.intent for a in new]
    assert new[0].proposal.parent == "c009"  # B's base from run 1
    assert p.tree["i1"].status == "pruned" and p.calls.made > 9
    gen = second.prompts()[0]
    assert f"({A})" in gen.sections["Already tried and failed (do not repeat)"]  # run 1's failures
    trajectory = second.prompts("critic")[0].sections["What this idea has tried so far (oldest first)"]
    assert trajectory.startswith("- c009 ")  # and B's trajectory, run 1's part included
    events, _ = read_jsonl(run_dir / "journal.jsonl")
    assert any(e.get("message", "").startswith("llm: resumed with 1 live intents of 2") for e in events)


class Slot:
    """One CPU worker slot's evaluator: records when it evaluated what, and takes a while."""

    spans: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def __init__(self, device: str) -> None:
        self.device = device

    def evaluate(self, problem, source, *, mode="fast", backend="triton"):
        start = time.monotonic()
        time.sleep(0.4)
        with Slot.lock:
            Slot.spans.append((self.device, start, time.monotonic()))
        return judge(source)

    def reference(self, problem):
        return REFERENCE

    def close(self) -> None:
        pass


def test_a_batch_of_the_models_candidates_is_evaluated_at_once(tmp_path):
    Slot.spans = []
    model = ContentModel(outcomes={A: ["1.2", "1.3"], B: ["1.1", "1.15"]}, plans=[PLAN])
    events: list[dict] = []
    with DevicePool(["cpu:0", "cpu:1"]).evaluator(Slot) as evaluator:
        ctx = context(events)
        p = proposer(tmp_path, model)
        Search(ctx, evaluator, Budget(iterations=4), accept=lambda a: None).run([p])
    assert [a.proposal.intent for a in ctx.attempts] == [A, B, A, B]  # two intents per batch, in order
    (d0, s0, e0), (d1, s1, e1) = sorted(Slot.spans[:2], key=lambda s: s[1])
    assert {d0, d1} == {"cpu:0", "cpu:1"} and s1 < e0  # the two spans overlap
    assert model.missing == []


def shadow_litellm(tmp_path: Path) -> dict[str, str]:
    shadow = tmp_path / "shadow" / "litellm"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named litellm')\n")
    return {**os.environ, "PYTHONPATH": f"{shadow.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


@pytest.mark.slow  # a process whose import path hides litellm
def test_model_without_litellm_fails_fast_in_one_line(git_repo: Path, tmp_path: Path):
    env = {**shadow_litellm(tmp_path), "OKGIT_API_KEY": "sk-test-0123456789"}
    proc = subprocess.run([sys.executable, "-m", "okgit", "optimize", "ops/softmax.py", "--model", "gpt-4o", "--device", "cpu"],
                          cwd=git_repo, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "needs litellm, which is not installed" in proc.stderr
    assert not (git_repo / ".okgit" / "runs").exists() or not list((git_repo / ".okgit" / "runs").iterdir())


def test_budget_without_a_price_is_refused_in_one_line(cli, git_repo: Path):
    proc = cli("optimize", "ops/softmax.py", "--model", "house-model", "--api-base", "http://127.0.0.1:9/v1",
                 "--budget-usd", "1", "--device", "cpu", cwd=git_repo)
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "--budget-usd needs a price for house-model" in proc.stderr and '[prices."house-model"]' in proc.stderr
    (git_repo / "okgit.toml").write_text('[prices."house-model"]\ninput = 0.0\noutput = 0.0\n')
    from okgit.config import load_config
    from okgit.llm import check_price

    config = load_config(git_repo, {"model": "house-model", "api_base": "http://127.0.0.1:9/v1", "budget_usd": 1.0})
    check_price(config.model, config.api_base, config.prices, config.budget_usd)  # a price given: accepted


def test_record_prompts_off_keeps_no_prompt_or_reply(tmp_path):
    model = ContentModel(outcomes={A: ["1.2"]}, plans=[PLAN])
    events: list[dict] = []
    records: list[dict] = []
    ctx = context(events)
    ctx.trace = lambda type, **f: records.append({"type": type, **f})
    p = proposer(tmp_path, model, record_prompts=False)
    Search(ctx, InMemoryEvaluator(judge, device="cuda"), Budget(iterations=1), accept=lambda a: None).run([p])
    calls = [r for r in records if r["type"] == "llm"]
    assert calls and all("messages" not in r and "reply" not in r for r in calls)
    assert all(r["usage"]["prompt_tokens"] > 0 for r in calls)  # what it cost is still there
    assert "torch.relu(x) * 2.0" not in str(calls)
