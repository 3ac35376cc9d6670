"""The model's search on real machinery: a batch of a scripted model's candidates evaluated at
once by two CPU worker slots (real workers, real Triton kernels under the interpreter), and an
interrupted `okgit optimize --model` resumed through the CLI, its intent tree continued."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import TimedSlot, overlaps, sh
from scripted_model import role_of, sections
from test_llm_e2e import BETTER, GOOD, OP, SECRET, WRONG, ScriptedServer

from okgit import llm
from okgit.config import Config
from okgit.eval.parent.device_pool import DevicePool
from okgit.journal.files import read_jsonl
from okgit.run import optimize
from okgit.search.memory import SkillLibrary
from okgit.search.proposers.llm import LLMProposer

A, B = "one fused Triton kernel for relu and scale", "vectorized loads with a wider block"
PLAN = json.dumps({"ops": [{"op": "insert", "description": A, "priority": 0.9},
                           {"op": "insert", "description": B, "priority": 0.5}]})
NO_CHANGE = json.dumps({"ops": []})
CRITIC = json.dumps({"bottleneck_type": "memory", "specific_issue": "none", "recommendation": "keep it", "confidence": 0.5})


def commit_op(repo: Path) -> str:
    (repo / "ops" / "relu2.py").write_text(OP)
    sh(repo, "add", "ops/relu2.py")
    sh(repo, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "relu2")
    return "ops/relu2.py"


def asked_for(messages: list[dict]) -> str:
    """The intent a generator prompt asks for."""
    return sections(messages[-1]["content"]).get("What to try now", "")


@pytest.mark.slow  # real worker processes, real Triton kernels under the interpreter
def test_a_batch_of_the_models_candidates_runs_on_two_cpu_workers_at_once(git_repo: Path, tmp_path: Path):
    """The LLM proposer's batch (one candidate for each of two intents) goes to a real pool of
    two CPU slots, each with its own worker: the two evaluations overlap in time."""
    op = commit_op(git_repo)
    kernels = {A: GOOD, B: BETTER}

    def model(messages, **kwargs):
        role = role_of(messages)
        reply = {"intents": PLAN, "critic": CRITIC, "reflection": "[]"}.get(role)
        if reply is None:
            reply = f"Here it is.\n```python\n{kernels[asked_for(messages)]}```"
        return llm.complete(messages, **kwargs, mock_response=reply)

    proposer = LLMProposer(Config(model="gpt-4o"), complete=model, library=SkillLibrary.load(tmp_path / "skills.json"))
    TimedSlot.spans = []
    with DevicePool(["cpu:0", "cpu:1"]).evaluator(TimedSlot) as evaluator:
        assert evaluator.width == 2
        result = optimize(git_repo / op, flags={"device": "cpu", "iterations": 2}, cwd=git_repo,
                          evaluator=evaluator, proposers=[proposer])
    events = read_jsonl(Path(result.report).parent / "journal.jsonl")[0]
    proposals = [e for e in events if e["type"] == "proposal"]
    assert [(e["cand"], e["intent"]) for e in proposals] == [("c001", A), ("c002", B)]
    evaluated = {e["cand"]: e["status"] for e in events if e["type"] == "evaluated"}
    assert evaluated == {"c001": "correct", "c002": "correct"}  # real kernels, really checked
    assert len(TimedSlot.spans) == 2 and {s[0] for s in TimedSlot.spans} == {"cpu:0", "cpu:1"}
    (_, start_a, end_a), (_, start_b, end_b) = TimedSlot.spans
    assert overlaps((start_a, end_a), (start_b, end_b)), TimedSlot.spans  # evaluated at the same time


class Interruptible:
    """The generator's side of a scripted server: idea A's kernel is always wrong, B's is right;
    the second request for B in the first run waits (the test interrupts the run there)."""

    def __init__(self) -> None:
        self.resumed = False
        self.b_requests = 0
        self.waiting = threading.Event()  # the first run is inside a model call for B
        self.release = threading.Event()

    def __call__(self, messages: list[dict]) -> str:
        intent = asked_for(messages)
        if intent == B and not self.resumed:
            self.b_requests += 1
            if self.b_requests == 2:
                self.waiting.set()
                self.release.wait(300)
        source = WRONG if intent == A else BETTER if self.resumed else GOOD
        return f"```python\n{source}```"


@pytest.mark.slow  # real worker processes, real Triton kernels under the interpreter
def test_an_interrupted_model_run_resumes_its_tree_through_the_cli(git_repo: Path, tmp_path: Path, cli):
    """Run 1 prunes idea A (its kernel is wrong) and starts B; Ctrl-C while the model is asked
    for B's next version. `okgit optimize --resume` rebuilds the tree from the journal: no plan
    from nothing (a planner asked later sees run 1's tree and its re-insert of A is refused),
    A never proposed again, B continued under its own id from its base. The interrupted run is a
    process of its own (its Ctrl-C); the resume runs in this process, on the session's warm workers."""
    op = commit_op(git_repo)
    (git_repo / "okgit.toml").write_text(
        "[search]\ncompile_retries = 0\nmismatch_retries = 0\nfailed_attempts = 1\n")
    generator = Interruptible()
    server = ScriptedServer({"intents": [PLAN, NO_CHANGE], "generator": generator, "critic": [CRITIC],
                             "reflection": ["[]"]})
    keys = {"OKGIT_API_KEY": SECRET, "OPENAI_API_KEY": SECRET, "OKGIT_DATA_DIR": str(tmp_path / "data")}
    env = {**os.environ, **keys}
    model = ["--model", "openai/scripted-coder", "--api-base", server.url, "--device", "cpu"]
    try:
        proc = subprocess.Popen([sys.executable, "-m", "okgit", "optimize", op, *model, "--iterations", "30"],
                                cwd=git_repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert generator.waiting.wait(600), "the first run never asked for B's second version"
            proc.send_signal(signal.SIGINT)
            time.sleep(1)
            generator.release.set()  # the model call in flight may now end
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err
        runs = list((git_repo / ".okgit" / "runs").iterdir())
        assert len(runs) == 1
        journal = runs[0] / "journal.jsonl"
        first = read_jsonl(journal)[0]
        tree = {e["id"]: e for e in first if e["type"] == "intent"}  # each intent's last state
        ids = {e["description"]: e["id"] for e in first if e["type"] == "intent" and e["op"] == "insert"}
        assert set(ids) == {A, B} and tree[ids[A]]["status"] == "pruned" and tree[ids[B]]["status"] != "pruned"
        before = {e["cand"]: e for e in first if e["type"] == "proposal"}
        from_model = [e for e in before.values() if e["origin"].startswith("llm")]
        assert [e["intent"] for e in from_model] == [A, B]
        b_base = from_model[-1]["cand"]
        asked_before = len(server.requests)

        server.scripts["intents"] = [PLAN]  # a planner that forgot the tree would insert A again
        generator.resumed = True
        proc2 = cli("optimize", "--resume", runs[0].name, *model, "--iterations", str(len(before) + 2), "--json",
                    cwd=git_repo, env=keys)
    finally:
        server.close()
    assert proc2.returncode == 0, proc2.stderr
    events = read_jsonl(journal)[0]
    after = events[len(first):]
    assert any(e["type"] == "resumed" for e in after)
    assert any(e.get("message", "").startswith("llm: resumed with 1 live intents of 2") for e in after)
    assert not [e for e in after if e["type"] == "intent" and e["op"] == "insert"]  # the tree continues
    asked = server.requests[asked_before:]
    assert asked[0]["role"] == "generator" and asked_for(asked[0]["messages"]) == B  # no plan from nothing: B goes on
    for plan in (r for r in asked if r["role"] == "intents"):  # a planner asked later sees run 1's tree
        tree_shown = sections(plan["messages"][-1]["content"])["The intent tree so far (status, priority, outcomes)"]
        assert f"- {ids[A]} [pruned," in tree_shown and f"- {ids[B]} [" in tree_shown
    new = [e for e in after if e["type"] == "proposal"]
    assert new and {e["intent"] for e in new} == {B}  # A, pruned in run 1, is not proposed again
    assert new[0]["parent"] == b_base and new[0]["cand"] not in before  # B from its base, numbering continued
    assert all(e["id"] in (ids[A], ids[B]) for e in after if e["type"] == "intent")  # run 1's ids reused
