"""The skill library: signatures, Pareto frontier, retrieval, persistence, reflection.
(A second run seeded by the first is in test_llm_proposer.py.)"""

from __future__ import annotations

from okgit.eval.types import ProfileData, Reference
from okgit.paths import skills_path
from okgit.problem import load_problem
from okgit.search import memory
from okgit.search.intents import IntentTree
from okgit.search.memory import Outcome, Signature, SkillLibrary, signature, similarity

SOFTMAX = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.softmax(self.lin(x), dim=-1).sum(dim=0)


batch_size = 16
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''


def test_signature_reads_ops_bottleneck_and_size():
    problem = load_problem("softmax.py", source=SOFTMAX)
    ref = Reference(device="cuda", timed=True, profile=ProfileData(bottleneck_type="memory"))
    sig = signature(problem, ref, "triton")
    assert sig.ops == ["linear", "softmax", "sum"]  # calls of the Model class, noise left out
    assert (sig.bottleneck, sig.log2_size, sig.backend) == ("memory", 14.0, "triton")


def test_similarity_orders_problems():
    a = Signature(ops=["softmax", "sum"], bottleneck="memory", log2_size=14)
    assert similarity(a, a) == 1.0
    near = Signature(ops=["softmax"], bottleneck="memory", log2_size=16)
    far = Signature(ops=["conv2d"], bottleneck="compute", log2_size=30, backend="cuda")
    assert similarity(a, near) > similarity(a, far)


def outcome(name, attempts, correct, speed=None, first=None, lesson=""):
    return Outcome(strategy=name, description=f"try {name}", attempts=attempts, correct=correct, improved=bool(speed),
                   best_speedup=speed, first_correct_at=first, lesson=lesson)


def test_pareto_frontier_and_retrieval(tmp_path):
    lib = SkillLibrary(tmp_path / "skills.json")
    sig = Signature(ops=["softmax"], bottleneck="memory", log2_size=14)
    other = Signature(ops=["conv2d"], bottleneck="compute", log2_size=24)
    lib.record(sig, [outcome("row softmax", 4, 3, 2.0, 1, "one row per program"), outcome("fused epilogue", 4, 1, 1.1, 3)])
    lib.record(other, [outcome("implicit gemm", 2, 2, 1.5, 1), outcome("never works", 3, 0)])
    front = {s.name for s in lib.pareto()}
    assert "row softmax" in front and "fused epilogue" not in front and "never works" not in front
    names = [s.name for s, _ in lib.retrieve(sig)]
    assert names[0] == "row softmax" and "never works" not in names
    # The same strategy under a close name merges into one record.
    lib.record(sig, [outcome("Row softmax!", 2, 2, 2.5, 1)])
    row = lib.find("row softmax")
    assert (row.runs, row.attempts, row.best_speedup, row.converge) == (2, 6, 2.5, [1, 1])


def test_save_load_and_damaged_file(tmp_path):
    path = tmp_path / "deep" / "skills.json"
    lib = SkillLibrary(path)
    lib.record(Signature(ops=["relu"]), [outcome("fused", 2, 1, None, 2, "works")])
    lib.save()
    again = SkillLibrary.load(path)
    assert [s.name for s in again.strategies] == ["fused"] and again.strategies[0].lessons == ["works"]
    path.write_text("{not json")
    broken = SkillLibrary.load(path)
    assert broken.strategies == [] and "unreadable" in broken.load_error


def test_default_path_order(monkeypatch, tmp_path):
    monkeypatch.setenv("OKGIT_DATA_DIR", str(tmp_path / "d"))
    assert skills_path() == tmp_path / "d" / "skills.json"
    assert skills_path(str(tmp_path / "x.json")) == tmp_path / "x.json"
    monkeypatch.delenv("OKGIT_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert skills_path() == tmp_path / "xdg" / "okgit" / "skills.json"


def test_reflection_without_a_model_is_a_deterministic_summary():
    tree = IntentTree()
    node = tree.insert("one kernel per row")
    tree.insert("never tried")
    tree.candidate(node.id, correct=True, speedup=1.3)
    tree.end_attempt(node.id, "progress", base="c001")
    outcomes, bred = memory.reflect(None, tree, "softmax")
    assert len(outcomes) == 1 and bred == []
    o = outcomes[0]
    assert (o.strategy, o.attempts, o.correct, o.improved, o.best_speedup) == ("one kernel per row", 1, 1, True, 1.3)
    assert o.lesson == "1/1 correct, best 1.30x, ended open"


def test_dominated_strategies_are_pruned_after_enough_runs(tmp_path):
    lib = SkillLibrary(tmp_path / "skills.json")
    sig = Signature(ops=["softmax"], bottleneck="memory", log2_size=14)
    lib.record(sig, [outcome("row softmax", 4, 4, 2.0, 1), outcome("fused epilogue", 4, 1, 1.1, 3)])
    lib.save()
    assert {s.name for s in SkillLibrary.load(lib.path).strategies} == {"row softmax", "fused epilogue"}  # one run: kept
    lib.record(sig, [outcome("row softmax", 2, 2, 2.1, 1), outcome("fused epilogue", 2, 1, 1.0, 2)])
    lib.save()
    assert [s.name for s in SkillLibrary.load(lib.path).strategies] == ["row softmax"]  # dominated twice: gone


def test_retrieval_needs_a_similar_problem_and_keeps_evidence(tmp_path):
    lib = SkillLibrary(tmp_path / "skills.json")
    sig = Signature(ops=["softmax", "sum"], bottleneck="memory", log2_size=14)
    far = Signature(ops=["conv2d"], bottleneck="compute", log2_size=24, backend="cuda")
    won = outcome("row softmax", 2, 2, 1.8, 1)
    won.code = "class Model: ...\n"
    lib.record(sig, [won], hardware="NVIDIA H200")
    assert lib.retrieve(far) == []  # below the similarity threshold: not seeded however good
    (s, score), = lib.retrieve(sig)
    assert score > 0.8 and s.template == "class Model: ...\n"
    assert (s.backends, s.hardware, s.problem_types) == (["triton"], ["NVIDIA H200"], ["softmax", "sum"])
    assert "on NVIDIA H200" in s.text()


def test_a_library_of_the_first_version_loads():
    old = {"name": "fused", "description": "try fused", "runs": 1, "attempts": 2, "correct": 1,
           "problems": [{"ops": ["relu"], "bottleneck": "unknown", "log2_size": 6.0, "backend": "triton"}]}
    s = memory.Strategy.model_validate(old)
    assert s.evidence[0].signature.ops == ["relu"] and s.problem_types == ["relu"]


def test_bred_strategies_are_kept_untried_and_retrieved(tmp_path):
    tree = IntentTree()
    node = tree.insert("one kernel per row")
    tree.candidate(node.id, correct=True, speedup=1.3)
    tree.end_attempt(node.id, "progress", base="c001")
    reply = ('{"lessons": [{"strategy": "row softmax", "intent": "i1", "lesson": "rows fit"}], "new": ['
             '{"strategy": "row softmax with split rows", "description": "split long rows over two programs", '
             '"parents": ["row softmax"], "how": "mutation"}, {"strategy": "x", "parents": [], "how": "magic"}]}')
    seen = []

    def ask(role, messages, cand, parse):
        seen.append(messages[-1]["content"])
        return None, parse(reply)

    lib = SkillLibrary(tmp_path / "skills.json")
    outcomes, bred = memory.reflect(ask, tree, "softmax", lib)
    assert [o.strategy for o in outcomes] == ["row softmax"] and [b.strategy for b in bred] == ["row softmax with split rows"]
    sig = Signature(ops=["softmax"], bottleneck="memory", log2_size=14)
    lib.update(sig, outcomes, bred)
    again = SkillLibrary.load(lib.path)
    child = again.find("row softmax with split rows")
    assert child.origin == "mutation" and child.parents == ["row softmax"] and child.runs == 0
    assert [s.name for s, _ in again.retrieve(sig)] == ["row softmax", "row softmax with split rows"]  # tried ones first
    assert "untried, a mutation of row softmax" in child.text()


def test_the_library_survives_two_concurrent_runs(tmp_path):
    """Two processes each record 12 runs' strategies at once: every one of them is in the file."""
    import subprocess
    import sys

    path = tmp_path / "skills.json"
    script = (
        "import sys\n"
        "from okgit.search.memory import Outcome, Signature, SkillLibrary\n"
        "for i in range(12):\n"
        "    o = Outcome(strategy=f'{sys.argv[1]} strategy {i}', description='d', attempts=1, correct=1, improved=True)\n"
        f"    SkillLibrary.load({str(path)!r}).update(Signature(ops=['relu']), [o], [])\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, name]) for name in ("alpha", "beta")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    names = {s.name for s in SkillLibrary.load(path).strategies}
    assert len(names) == 24 and all(f"{w} strategy {i}" in names for w in ("alpha", "beta") for i in range(12))
