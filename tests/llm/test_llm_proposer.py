"""LLMProposer's loops, driven through the real search driver with models scripted by
litellm's mock_response and judged by an in-memory evaluator."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from scripted_model import OP

from okgit import llm
from okgit.config import Config, SearchSettings
from okgit.eval.base import InMemoryEvaluator
from okgit.eval.types import EvalError, EvalResult, Status
from okgit.problem import load_problem
from okgit.search.driver import Budget, Search
from okgit.search.memory import SkillLibrary
from okgit.search.proposers.llm import LLMProposer
from okgit.search.types import Context

serial = itertools.count()


def candidate(marker: str) -> str:
    """A distinct op file; the marker tells the judge what it is (BUG, WRONG, OK, SPEED=x)."""
    return OP.replace("return torch.relu(x) * 2.0", f"return torch.relu(x) * 2.0  # {marker} #{next(serial)}")


def judge(source: str) -> EvalResult:
    if "BUG" in source:
        return EvalResult(status=Status.compile_error, error=EvalError(gate="compile", message="NameError: name 'tl' is not defined"))
    if "WRONG" in source:
        return EvalResult(status=Status.incorrect, max_abs_error=0.25, error=EvalError(gate="outputs", message="mismatch"))
    speed = re.search(r"SPEED=([\d.]+)", source)
    if speed:
        s = float(speed.group(1))
        return EvalResult(status=Status.correct, correct=True, timed=True, speedup=s, runtime_us=100 / s, ref_runtime_us=100)
    return EvalResult(status=Status.correct, correct=True, timed=False)


def fenced(source: str) -> str:
    return f"```python\n{source}```"


class Scripted:
    """A `complete` that answers each role from its script through litellm's mock_response."""

    ROLES = (("performance critic", "critic"), ("tree of intents", "intents"), ("library of optimization", "reflection"))

    def __init__(self, **scripts):
        self.scripts = scripts
        self.calls: list[tuple[str, list[dict]]] = []

    def __call__(self, messages, **kwargs):
        role = next((r for marker, r in self.ROLES if marker in messages[0]["content"]), "generator")
        self.calls.append((role, messages))
        script = self.scripts.get(role, ["[]"])
        reply = script(len([c for c in self.calls if c[0] == role])) if callable(script) else (script.pop(0) if len(script) > 1 else script[0])
        if isinstance(reply, Exception):
            raise reply
        return llm.complete(messages, **kwargs, mock_response=reply)

    def prompts(self, role="generator") -> list[str]:
        return ["\n".join(m["content"] for m in msgs) for r, msgs in self.calls if r == role]


INTENTS = '[{"description": "fused single kernel", "priority": 0.9}, {"description": "vectorized loads", "priority": 0.5}]'
DIAG = '{"bottleneck_type": "memory", "specific_issue": "extra pass", "recommendation": "drop the extra pass", "confidence": 0.7}'


def run(tmp_path, model: Scripted, *, iterations=6, usd=None, config_budget=None, **options):
    events: list[dict] = []
    problem = load_problem("relu2.py", source=OP)
    evaluator = InMemoryEvaluator(judge)
    ctx = Context(problem=problem, reference=evaluator.reference(problem), backend="triton", device="cpu",
                  log=lambda type, **f: events.append({"type": type, **f}))
    config = Config(model="gpt-4o", budget_usd=config_budget, search=SearchSettings(**options.pop("search", {})),
                    prices={"gpt-4o": {"input": 2.5e-6, "output": 1e-5}}, **options)
    proposer = LLMProposer(config, complete=model, library=SkillLibrary.load(tmp_path / "skills.json"))
    search = Search(ctx, evaluator, Budget(iterations=iterations, patience=50, usd=usd), accept=lambda a: f"t/{a.cand}")
    reason = search.run([proposer])
    return ctx, events, reason, proposer


def intent_events(events, op=None):
    return [e for e in events if e["type"] == "intent" and (op is None or e["op"] == op)]


def test_dollar_budget_in_llm_call_events_stops_the_driver(tmp_path):
    model = Scripted(intents=[INTENTS], generator=lambda n: fenced(candidate("OK")), critic=[DIAG])
    ctx, events, reason, _ = run(tmp_path, model, iterations=50, usd=0.001)
    assert reason.startswith("dollar budget")
    spent = sum(e["cost_usd"] for e in events if e["type"] == "llm_call")
    assert 0.001 <= spent < 0.002 and len(ctx.attempts) < 50


def test_proposer_keeps_within_its_own_budget(tmp_path):
    model = Scripted(intents=[INTENTS], generator=lambda n: fenced(candidate("OK")), critic=[DIAG])
    ctx, events, _, proposer = run(tmp_path, model, iterations=50, config_budget=0.001)
    per_call = max(e["cost_usd"] for e in events if e["type"] == "llm_call")
    assert 0.001 <= ctx.spent_usd < 0.001 + per_call  # stops at the first call past the budget
    assert any("dollar budget" in e.get("message", "") for e in events if e["type"] == "note")


def test_mismatch_feeds_max_difference_and_the_failed_file_back(tmp_path):
    wrong = candidate("WRONG")
    model = Scripted(intents=[INTENTS], generator=[fenced(wrong), fenced(candidate("OK"))], critic=[DIAG])
    ctx, _, _, _ = run(tmp_path, model, iterations=2)
    second = model.prompts()[1]
    assert "max abs difference: 0.25" in second and wrong.strip() in second
    assert ctx.attempts[1].proposal.parent == "c001"


def test_reply_without_code_is_a_recorded_failed_attempt(tmp_path):
    model = Scripted(intents=[INTENTS], generator=["I am sorry, I cannot write kernels.", fenced(candidate("OK"))], critic=[DIAG])
    ctx, events, _, proposer = run(tmp_path, model, iterations=1)
    generator_calls = [e for e in events if e["type"] == "llm_call" and e["role"] == "generator"]
    assert [c["ok"] for c in generator_calls] == [False, True]
    assert any("no usable code" in e["message"] for e in events if e["type"] == "note")
    assert "could not be used: no complete op file found" in model.prompts()[1]
    assert len(ctx.attempts) == 1 and proposer.tree["i1"].candidates == 2  # the empty reply counted


def test_repeated_candidate_is_answered_with_feedback(tmp_path):
    same = candidate("OK")
    script = [fenced(same), fenced(candidate("WRONG")), fenced(same), fenced(candidate("OK"))]
    model = Scripted(intents=[INTENTS], generator=script, critic=[DIAG])
    ctx, _, _, _ = run(tmp_path, model, iterations=3)
    assert len(ctx.attempts) == 3 and len(model.prompts()) == 4  # the driver skipped the repeat
    assert "the file is unchanged" not in model.prompts()[2]
    assert "identical to a candidate already evaluated" in model.prompts()[3]


def test_unchanged_file_is_caught_before_the_driver(tmp_path):
    same = candidate("OK")
    model = Scripted(intents=[INTENTS], generator=[fenced(same), fenced(same), fenced(candidate("OK"))], critic=[DIAG])
    ctx, _, _, _ = run(tmp_path, model, iterations=2)
    assert len(ctx.attempts) == 2
    assert "could not be used: the file is unchanged" in model.prompts()[2]


def test_patch_mode_applies_diffs_and_feeds_back_bad_ones(tmp_path):
    bad = "```diff\n--- a/relu2.py\n+++ b/relu2.py\n@@ -1,1 +1,1 @@\n-import numpy\n+import numpy as np\n```"
    good = ("```diff\n--- a/relu2.py\n+++ b/relu2.py\n@@ -6,3 +6,3 @@ class Model(nn.Module):\n"
            "     def forward(self, x):\n-        return torch.relu(x) * 2.0\n+        return torch.relu(x) + torch.relu(x)\n \n```")
    model = Scripted(intents=[INTENTS], generator=[bad, good], critic=[DIAG])
    ctx, _, _, _ = run(tmp_path, model, iterations=1, edit_mode="patch")
    assert "return torch.relu(x) + torch.relu(x)" in ctx.attempts[0].proposal.source
    assert "unified diff" in model.prompts()[0] and "does not apply" in model.prompts()[1]


def test_critic_is_reasked_once_then_the_run_goes_on(tmp_path):
    model = Scripted(intents=[INTENTS], generator=lambda n: fenced(candidate(f"SPEED={1 + n / 10}")),
                     critic=["slow, I think", "still not json"])
    ctx, events, _, _ = run(tmp_path, model, iterations=3)
    assert len(ctx.attempts) == 3
    first_critique = [msgs for role, msgs in model.calls if role == "critic"][:2]
    assert first_critique[1][-1]["content"].startswith("That reply was not one valid JSON object")
    assert any("no usable diagnosis" in e.get("message", "") for e in events)
    assert not [e for e in events if e["type"] == "diagnosis"]


def test_unparsable_intents_fall_back_to_seeds(tmp_path):
    model = Scripted(intents=["no idea"], generator=lambda n: fenced(candidate("OK")), critic=[DIAG])
    ctx, events, _, _ = run(tmp_path, model, iterations=1)
    assert {e["origin"] for e in intent_events(events, "insert")} == {"seed"}


def test_refused_key_stops_the_run_with_one_line(tmp_path):
    model = Scripted(intents=[llm.LLMAuthError("model gpt-4o: credentials refused")])
    with pytest.raises(llm.LLMAuthError):
        run(tmp_path, model)


def test_unreachable_model_gives_up_after_a_few_failed_calls(tmp_path):
    from okgit.errors import OkgitError

    model = Scripted(intents=[INTENTS], generator=[OkgitError("model gpt-4o: gave up after 4 tries: APIConnectionError")])
    ctx, events, reason, _ = run(tmp_path, model)
    assert reason == "proposers exhausted" and not ctx.attempts
    assert sum(1 for e in events if e["type"] == "llm_call" and not e["ok"]) == 3


def test_a_second_run_is_seeded_by_the_first(tmp_path):
    """Run 1 learns a strategy in the skill library; run 2 gets it as an intent and in its prompts."""
    reflection = '[{"strategy": "fused relu scale", "intent": "i1", "lesson": "one pass is enough"}]'
    first = Scripted(intents=[INTENTS], generator=lambda n: fenced(candidate("OK")), critic=[DIAG], reflection=[reflection])
    run(tmp_path, first, iterations=2)
    saved = json.loads((tmp_path / "skills.json").read_text())
    assert [s["name"] for s in saved["strategies"]] == ["fused relu scale"]

    second = Scripted(intents=["[]"], generator=lambda n: fenced(candidate("OK")), critic=[DIAG], reflection=["[]"])
    _, events, _, _ = run(tmp_path, second, iterations=2)
    inserted = intent_events(events, "insert")
    assert inserted[0]["origin"] == "skill" and inserted[0]["description"] == "fused single kernel"
    assert "fused relu scale" in second.prompts()[0] and "one pass is enough" in second.prompts()[0]
    assert "fused relu scale" in second.prompts("intents")[0]


def test_cuda_prompt_builds_for_the_device_architecture(tmp_path):
    model = Scripted(intents=[INTENTS], generator=[fenced(candidate("OK"))])
    problem = load_problem("relu2.py", source=OP)
    ctx = Context(problem=problem, reference=InMemoryEvaluator(judge).reference(problem), backend="cuda", device="cuda",
                  hardware={"name": "NVIDIA H200", "compute_capability": "9.0", "peak_bandwidth_gbs": 4180})
    proposal = LLMProposer(Config(model="gpt-4o", backend="cuda"), complete=model, library=SkillLibrary(tmp_path / "s.json")).propose(ctx)
    assert proposal is not None and proposal.backend == "cuda"
    prompt = model.prompts()[0]
    assert "load_inline" in prompt and "sm_90" in prompt and "peak memory bandwidth: 4180 GB/s" in prompt
    assert "Triton runs under its interpreter" not in prompt


def test_no_critic_call_on_an_untimed_run(tmp_path):
    """On a CPU nothing is timed: the critic would have no measurements to read, so it is not paid."""
    model = Scripted(intents=[INTENTS], generator=lambda n: fenced(candidate("OK")), critic=[DIAG])
    ctx, events, _, _ = run(tmp_path, model, iterations=3)
    assert len(ctx.attempts) == 3 and all(a.result.correct and not a.result.timed for a in ctx.attempts)
    assert not model.prompts("critic")
