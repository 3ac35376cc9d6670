"""What each role of the LLM search is shown, checked by a scripted model that reads its
prompts (tests/scripted_model.py), and the inner and middle loops' budgets, through the real
driver with an in-memory judge on a timed "GPU" reference."""

from __future__ import annotations

import pytest
from scripted_model import HARDWARE, OP, REFERENCE, ContentModel, judge

from okgit.config import DEFAULT_MODEL_ITERATIONS, Config, SearchSettings
from okgit.eval.base import InMemoryEvaluator
from okgit.problem import load_problem
from okgit.search.driver import Budget, Search
from okgit.search.memory import SkillLibrary
from okgit.search.proposers import llm as llm_proposer
from okgit.search.proposers.llm import LLMProposer
from okgit.search.types import Context

A, B = "one fused kernel for relu and scale", "vectorized loads with a wider block"
CHILD = "the fused kernel with two elements per thread"


def plan(*ops):
    return {"ops": list(ops)}


def insert(description, priority=0.5, parent=None):
    return {"op": "insert", "description": description, "priority": priority, "parent": parent}


def run(tmp_path, model, *, iterations=None, patience=6, width=1, **search):
    events: list[dict] = []
    problem = load_problem("relu2.py", source=OP)
    evaluator = InMemoryEvaluator(judge, device="cuda", width=width)
    ctx = Context(problem=problem, reference=REFERENCE, backend="triton", device="cuda", hardware=HARDWARE,
                  log=lambda type, **f: events.append({"type": type, **f}))
    config = Config(model="gpt-4o", search=SearchSettings(**search))
    proposer = LLMProposer(config, complete=model, library=SkillLibrary.load(tmp_path / "skills.json"))
    budget = Budget(iterations=iterations or config.iteration_budget, patience=patience)
    reason = Search(ctx, evaluator, budget, accept=lambda a: f"t/{a.cand}").run([proposer])
    return ctx, events, reason, proposer


def scenario() -> ContentModel:
    """Every piece of context has a moment it matters: a compile error and a mismatch repaired,
    a diagnosed version, a correct-but-not-faster one, a child idea, a rejected other idea."""
    return ContentModel(
        outcomes={A: ["BUG", "WRONG", "1.5", "1.2", "1.8", "1.7"], CHILD: ["2.0", "1.9"], B: ["REJECT", "1.3"]},
        plans=[plan(insert(A, 0.9), insert(B, 0.5)),
               plan(insert(CHILD, 0.95, parent="i1"), {"op": "update", "id": "i2", "priority": 0.9})],
    )


def test_every_role_is_shown_what_it_needs(tmp_path):
    model = scenario()
    ctx, events, _, proposer = run(tmp_path, model, iterations=14)
    assert model.missing == []
    statuses = [a.result.status.value for a in ctx.attempts]
    assert statuses[:2] == ["compile_error", "incorrect"] and "rejected" in statuses
    assert [a.proposal.intent for a in ctx.attempts].count(CHILD) >= 1 and model.prompts("critic")
    assert proposer.tree["i3"].parent == "i1"
    # c004 (1.2x) was correct but slower than c003 (1.5x): the next prompt says so, with the critic's word on c004
    feedback = model.prompts()[4].sections["Result of your previous attempt"]
    assert "c004 was correct but no faster (1.20x)" in feedback and "The critic on c004:" in feedback
    assert "at 83.33 us, drop the extra pass" in feedback


GENERATOR_FIELDS = ["reference_source", "current_source", "current_figures", "hardware", "reference_figures", "intent",
                    "diagnosis", "failures", "feedback", "gate_rules"]
CRITIC_FIELDS = ["reference_source", "candidate_source", "evaluation", "profile", "reference_figures", "trajectory"]
PLANNER_FIELDS = ["reference_source", "tried", "event"]


@pytest.mark.parametrize("prompt,name", [("generator_triton.v2", f) for f in GENERATOR_FIELDS]
                         + [("critic.v2", f) for f in CRITIC_FIELDS] + [("intents.v2", f) for f in PLANNER_FIELDS])
def test_dropping_any_piece_of_context_is_noticed(tmp_path, monkeypatch, prompt, name):
    """The test above can fail: with one field of one prompt blanked, the model misses it."""
    from okgit.llm import prompt_messages
    from okgit.search import critic

    def blanked(which, **fields):
        if which == prompt:
            fields[name] = ""
        return prompt_messages(which, **fields)

    monkeypatch.setattr(llm_proposer, "prompt_messages", blanked)
    monkeypatch.setattr(critic, "prompt_messages", blanked)
    model = scenario()
    run(tmp_path, model, iterations=14)
    assert model.missing, f"blanking {name} of {prompt} went unnoticed"


def test_defaults_are_pinned():
    s = SearchSettings()
    assert (s.compile_retries, s.mismatch_retries, s.attempts_per_intent, s.failed_attempts, s.intent_patience) == (3, 3, 5, 2, 2)
    assert (s.plan_rounds, s.intents_per_round, s.max_tokens, s.call_timeout_s, s.max_wait_s) == (8, 4, 16384, 300.0, 900.0)
    assert Config(model="m").iteration_budget == DEFAULT_MODEL_ITERATIONS == 30 and Config().iteration_budget == 12
    assert Config().patience == 6


def test_a_default_run_completes_two_intents_fully(tmp_path):
    """All defaults: the first idea improves five times (K), the second makes progress within
    itself but never beats the run's best; both get their K attempts before patience ends it."""
    model = ContentModel(outcomes={A: ["1.1", "1.2", "1.3", "1.4", "1.5"], B: ["1.01", "1.02", "1.03", "1.04", "1.05"]},
                         plans=[plan(insert(A, 0.9), insert(B, 0.5))])
    ctx, events, reason, proposer = run(tmp_path, model)
    assert [proposer.tree[i].attempts for i in ("i1", "i2")] == [5, 5]
    assert [proposer.tree[i].status for i in ("i1", "i2")] == ["done", "done"]
    assert model.missing == []


def test_three_compile_and_three_mismatch_repairs_within_one_attempt(tmp_path):
    model = ContentModel(outcomes={A: ["BUG", "BUG", "BUG", "WRONG", "WRONG", "WRONG", "1.5"]}, plans=[plan(insert(A, 0.9))])
    ctx, _, _, proposer = run(tmp_path, model, iterations=7)
    assert [a.result.status.value for a in ctx.attempts] == ["compile_error"] * 3 + ["incorrect"] * 3 + ["correct"]
    assert [a.proposal.parent for a in ctx.attempts[1:]] == [a.cand for a in ctx.attempts[:-1]]  # each repairs the last
    assert proposer.tree["i1"].attempts == 1 and proposer.tree["i1"].live
    assert model.missing == []


def test_a_spent_repair_budget_fails_the_attempt_and_the_next_starts_afresh(tmp_path):
    model = ContentModel(outcomes={A: ["BUG", "BUG", "BUG", "1.5"]}, plans=[plan(insert(A, 0.9))])
    ctx, events, _, proposer = run(tmp_path, model, iterations=4, compile_retries=2)
    assert proposer.tree["i1"].attempts == 2 and proposer.tree["i1"].failed_in_row == 0
    assert ctx.attempts[3].proposal.parent is None  # a fresh implementation from the reference, not c003
    prompts = model.prompts()
    assert "Your last attempt at this idea failed (3 compile and 0 mismatch failures)" in \
        prompts[3].sections["Result of your previous attempt"]


def test_two_failed_attempts_prune_the_intent(tmp_path):
    model = ContentModel(outcomes={A: ["WRONG"], B: ["1.2"]}, plans=[plan(insert(A, 0.9), insert(B, 0.5))])
    ctx, events, _, proposer = run(tmp_path, model, iterations=9, mismatch_retries=3)
    assert [a.proposal.intent for a in ctx.attempts] == [A] * 8 + [B]
    prune = [e for e in events if e["type"] == "intent" and e["op"] == "prune"]
    assert [(e["id"], e["reason"]) for e in prune] == [("i1", "2 failed attempts in a row")]


def test_k_attempts_per_intent(tmp_path):
    model = ContentModel(outcomes={A: [f"1.{i}" for i in range(1, 10)], B: ["1.0"]}, plans=[plan(insert(A, 0.9), insert(B, 0.1))])
    ctx, events, _, proposer = run(tmp_path, model, iterations=8, attempts_per_intent=4)
    assert [a.proposal.intent for a in ctx.attempts][:5] == [A] * 4 + [B]
    done = [e for e in events if e["type"] == "intent" and e.get("reason") == "4 attempts"]
    assert [e["id"] for e in done] == ["i1"]


def test_progress_within_an_idea_is_its_base_when_not_the_runs_best(tmp_path):
    model = ContentModel(outcomes={A: ["2.0", "1.0"], B: ["1.2", "1.5", "1.4"]},
                         plans=[plan(insert(A, 0.9), insert(B, 0.5))])
    ctx, _, _, proposer = run(tmp_path, model, iterations=6)
    b = [a for a in ctx.attempts if a.proposal.intent == B]
    assert ctx.best.result.speedup == 2.0
    # B's second version (1.5x, not the run's best) was built on its first (1.2x), its third on its second
    assert [a.proposal.parent for a in b[1:]] == [b[0].cand, b[1].cand]
    assert model.missing == []


def test_stagnation_switches_strategy(tmp_path):
    model = ContentModel(outcomes={A: ["1.5", "1.4", "1.3"], B: ["1.1"]}, plans=[plan(insert(A, 0.9), insert(B, 0.2))])
    ctx, events, _, _ = run(tmp_path, model, iterations=4)
    assert [a.proposal.intent for a in ctx.attempts] == [A, A, A, B]
    retired = [e for e in events if e["type"] == "intent" and e.get("reason", "").startswith("stagnated")]
    assert [e["id"] for e in retired] == ["i1"]
    # the planner heard about it, with the tree and the outcome
    assert "i1 (" + A + ") ended done" in model.prompts("intents")[1].sections["What just happened"]


def test_the_model_builds_reprioritises_and_prunes_a_tree(tmp_path):
    plans = [
        plan(insert(A, 0.9), insert(B, 0.5), insert("split the row across programs", 0.4)),
        plan(insert(CHILD, 0.95, parent="i1"), insert("grandchild: unroll the loop", 0.2, parent="i4"),
             insert("under B: float4 loads", 0.3, parent="i2"),
             {"op": "update", "id": "i3", "priority": 0.99}, {"op": "prune", "id": "i2", "reason": "B cannot pay here"},
             {"op": "prune", "id": "i42"}, {"op": "frobnicate"}),
    ]
    model = ContentModel(outcomes={A: ["1.5", "1.4", "1.3"]}, plans=plans)
    ctx, events, _, proposer = run(tmp_path, model, iterations=4)
    t = proposer.tree
    assert t["i5"].parent == "i4" and t["i4"].parent == "i1" and t.depth("i5") == 2  # two levels under a root
    assert t["i3"].priority == 0.99
    assert t["i2"].status == "pruned" and t["i6"].status == "pruned"  # the subtree went with it
    ops = [(e["op"], e["id"]) for e in events if e["type"] == "intent" and e["op"] != "update"]
    assert ("prune", "i2") in ops and ("prune", "i6") in ops
    notes = [e["message"] for e in events if e["type"] == "note"]
    assert any("prune of unknown intent i42" in n for n in notes)
    assert ctx.attempts[3].proposal.intent == "split the row across programs"  # the re-prioritised one runs next


def test_an_unusable_plan_falls_back_to_fixed_arithmetic(tmp_path):
    plans = [plan(insert(A, 0.9), insert(CHILD, 0.4, parent="i1"), insert(B, 0.3)), "not a plan"]
    model = ContentModel(outcomes={A: ["1.5", "1.4", "1.3"], CHILD: ["1.6"]}, plans=plans)
    ctx, events, _, proposer = run(tmp_path, model, iterations=4)
    # i1 made progress, so without a usable reply its child rose by the fixed factor (0.4 x 1.25)
    rises = [e["priority"] for e in events if e["type"] == "intent" and e["op"] == "update" and e["id"] == "i2"]
    assert rises[0] == pytest.approx(0.5)
    assert proposer.tree["i3"].priority == pytest.approx(0.3)  # not under i1: unchanged
    assert ctx.attempts[3].proposal.intent == CHILD


def test_a_bred_strategy_is_retrieved_by_a_later_run(tmp_path):
    reflection = ('{"lessons": [{"strategy": "fused elementwise", "intent": "i1", "lesson": "one pass pays"},'
                  ' {"strategy": "wide vector loads", "intent": "i2", "lesson": "wider helps"}],'
                  ' "new": [{"strategy": "fused wide elementwise", "description": "one fused pass with float4 vector loads",'
                  ' "parents": ["fused elementwise", "wide vector loads"], "how": "crossover"}]}')
    first = ContentModel(outcomes={A: ["1.5", "1.4", "1.3"], B: ["1.2", "1.1", "1.0"]}, plans=[plan(insert(A, 0.9), insert(B, 0.5))],
                         reflection_reply=reflection)
    run(tmp_path, first, iterations=6)
    second = ContentModel(outcomes={}, plans=[plan()])
    _, events, _, _ = run(tmp_path, second, iterations=1)
    seeded = [e for e in events if e["type"] == "intent" and e["op"] == "insert" and e["origin"] == "skill"]
    assert "one fused pass with float4 vector loads" in [e["description"] for e in seeded]
    skills = second.prompts()[0].sections["Strategies that worked on similar problems"]
    assert "fused wide elementwise (untried, a crossover of fused elementwise and wide vector loads)" in skills
    assert "The code with which fused elementwise won" in skills  # its winning code came along as a template


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_measured_peaks_carry_the_figures_the_generator_is_shown(tmp_path):
    import torch

    from okgit.eval.roofline import measure_peaks
    from okgit.search.critic import describe_hardware

    peaks = measure_peaks(torch.device("cuda"))
    major, minor = torch.cuda.get_device_capability()
    assert peaks["compute_capability"] == f"{major}.{minor}"
    assert peaks["registers_per_sm"] > 0 and peaks["shared_memory_per_sm_bytes"] > 0
    ctx = Context(problem=load_problem("relu2.py", source=OP), reference=REFERENCE.model_copy(update={"hardware": peaks}),
                  backend="triton", device="cuda")
    text = describe_hardware(ctx)
    assert f"compute capability: {major}.{minor}" in text and "registers per SM" in text and "B/s" in text
