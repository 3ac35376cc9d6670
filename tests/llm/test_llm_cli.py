"""A new user's LLM run: `okgit optimize --model ... --api-base` against a scripted
OpenAI-compatible server on 127.0.0.1, with the real CPU evaluator and real git. The command runs
in this process (`cli`, the keys in its environment, the session's warm workers): a real okgit
process with a model is test_llm_real.py's interrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import sh
from test_llm_e2e import BUGGY, GOOD, OP, SECRET, WRONG, ScriptedServer


@pytest.fixture
def scripted():
    s = ScriptedServer({
        "intents": ['[{"description": "one fused Triton kernel for relu and scale", "priority": 0.9}]'],
        "generator": [f"```python\n{src}```" for src in (BUGGY, WRONG, GOOD)],
        "critic": ['{"bottleneck_type": "memory", "specific_issue": "none", "recommendation": "keep it", '
                   '"estimated_headroom": 1.0, "confidence": 0.5}'],
        "reflection": ["[]"],
    })
    yield s
    s.close()


@pytest.mark.slow  # okgit optimize with the keys in its environment, real evaluation
def test_optimize_with_a_model_on_loopback(git_repo: Path, tmp_path: Path, scripted: ScriptedServer, cli) -> None:
    (git_repo / "ops" / "relu2.py").write_text(OP)
    sh(git_repo, "add", "ops/relu2.py")
    sh(git_repo, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "relu2")
    keys = {"OKGIT_API_KEY": SECRET, "OPENAI_API_KEY": SECRET, "OKGIT_DATA_DIR": str(tmp_path / "data")}
    proc = cli("optimize", "ops/relu2.py", "--model", "openai/scripted-coder", "--api-base", scripted.url,
               "--device", "cpu", "--iterations", "4", "--json", cwd=git_repo, env=keys)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    run_dir = git_repo / ".okgit" / "runs" / result["run_id"]

    prompts = scripted.generator_prompts()
    assert prompts and "return torch.relu(x) * 2.0" in prompts[0]  # the reference reached the model
    assert "maxmium" in prompts[1]  # the real evaluator's error on the buggy kernel came back
    history = json.loads(cli("history", result["run_id"], "--json", cwd=git_repo).stdout)
    from_model = [c for c in history["candidates"] if c["origin"].startswith("llm")]
    assert [c["status"] for c in from_model] == ["compile_error", "incorrect", "correct"], from_model
    assert from_model[-1]["tag"] == f"okgit/{result['run_id']}/{from_model[-1]['cand']}"
    sh(git_repo, "rev-parse", "--verify", from_model[-1]["tag"])

    records = [json.loads(line) for line in (run_dir / "traces.jsonl").read_text().splitlines()]
    calls = [r for r in records if r["type"] == "llm"]
    assert calls and all(r["usage"]["prompt_tokens"] == 1000 for r in calls)
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert any(e["type"] == "llm_call" and e["completion_tokens"] == 200 for e in events)
    for path in (git_repo / ".okgit").rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
