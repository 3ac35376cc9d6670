"""okgit.llm: the litellm client (scripted with litellm's mock_response) and prompt rendering."""

from __future__ import annotations

import json
import re

import pytest

from okgit import llm
from okgit.errors import OkgitError

MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.slow  # litellm's import and its cost map
def test_completion_carries_text_usage_and_cost():
    c = llm.complete(MSG, model="gpt-4o", mock_response="hello")
    assert c.text == "hello" and c.model == "gpt-4o"
    assert c.prompt_tokens > 0 and c.completion_tokens > 0
    assert c.cost_known and c.cost_usd > 0  # from litellm's local cost map


def test_unknown_model_costs_zero_unless_priced_in_config():
    c = llm.complete(MSG, model="house-model", api_base="http://127.0.0.1:9/v1", mock_response="x")
    assert (c.cost_usd, c.cost_known) == (0.0, False)
    priced = llm.complete(MSG, model="house-model", api_base="http://127.0.0.1:9/v1", mock_response="x",
                          prices={"house-model": {"input": 1e-6, "output": 2e-6}})
    assert priced.cost_known and priced.cost_usd == pytest.approx(priced.prompt_tokens * 1e-6 + priced.completion_tokens * 2e-6)


def test_model_behind_api_base_speaks_openai_and_needs_no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OKGIT_API_KEY", raising=False)
    assert llm.resolve_model("qwen-coder", "http://127.0.0.1:8000/v1") == "openai/qwen-coder"
    assert llm.resolve_model("ollama/qwen", "http://127.0.0.1:11434") == "ollama/qwen"
    assert llm.resolve_model("gpt-4o", None) == "gpt-4o"
    assert llm._api_key("openai/qwen-coder", "http://127.0.0.1:8000/v1", None) == "no-key"
    monkeypatch.setenv("OKGIT_API_KEY", "sk-from-okgit-env")
    assert llm._api_key("openai/qwen-coder", "http://127.0.0.1:8000/v1", None) == "sk-from-okgit-env"


def test_transient_errors_are_retried_then_succeed(monkeypatch):
    lt = llm._litellm()
    real = lt.completion
    seen = []

    def flaky(**kwargs):
        seen.append(kwargs)
        if len(seen) < 3:
            raise lt.InternalServerError(message="upstream 503", llm_provider="openai", model="gpt-4o")
        return real(**kwargs)

    monkeypatch.setattr(lt, "completion", flaky)
    c = llm.complete(MSG, model="gpt-4o", mock_response="fine", max_retries=3, backoff_s=0)
    assert c.text == "fine" and len(seen) == 3
    assert all(k["num_retries"] == 0 for k in seen)  # litellm's own retries stay off


def test_rate_limit_gives_up_after_bounded_tries():
    with pytest.raises(OkgitError, match="gave up after 3 tries: RateLimitError"):
        llm.complete(MSG, model="gpt-4o", mock_response="litellm.RateLimitError", max_retries=2, backoff_s=0)


def test_auth_error_is_not_retried_and_hides_the_key(monkeypatch, capfd):
    lt = llm._litellm()
    calls = []
    real = lt.completion

    def count(**kwargs):
        calls.append(1)
        return real(**kwargs)

    monkeypatch.setattr(lt, "completion", count)
    refusal = lt.AuthenticationError(message="Incorrect API key provided: sk-live-abcdef123456", llm_provider="openai", model="gpt-4o")
    with pytest.raises(llm.LLMAuthError) as info:
        llm.complete(MSG, model="gpt-4o", api_key="sk-live-abcdef123456", mock_response=refusal, backoff_s=0)
    message = str(info.value)
    assert len(calls) == 1 and "\n" not in message and "sk-live-abcdef123456" not in message
    assert "credentials refused" in message
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # litellm's banners stay silent


def test_bad_request_is_one_line_error():
    lt = llm._litellm()
    with pytest.raises(OkgitError, match="BadRequestError"):
        llm.complete(MSG, model="gpt-4o", mock_response=lt.BadRequestError(message="bad\nrequest", llm_provider="openai", model="gpt-4o"))


@pytest.mark.parametrize("name", ["generator_triton.v2", "generator_cuda.v2", "critic.v2", "intents.v2", "reflection.v2"])
def test_every_prompt_renders_with_its_fields(name):
    fields = set(re.findall(r"\$(\w+)", llm.prompt_text(name)))
    messages = llm.prompt_messages(name, **{f: f"<{f}>" for f in fields})
    assert [m["role"] for m in messages] == ["system", "user"]
    text = "".join(m["content"] for m in messages)
    assert all(f"<{f}>" in text for f in fields) and "$" not in text


def test_render_marks_empty_sections_and_names_missing_fields():
    messages = llm.prompt_messages("reflection.v2", problem_summary="", outcomes=None, frontier="", count=3)
    assert "(none)" in messages[1]["content"]
    with pytest.raises(OkgitError, match="no value for \\$count"):
        llm.prompt_messages("reflection.v2", problem_summary="x")


def test_recommended_models_are_well_formed():
    """okgit/data/models.json (docs/models.md): a few models worth starting with."""
    from importlib import resources

    models = json.loads((resources.files("okgit") / "data" / "models.json").read_text(encoding="utf-8"))["models"]
    assert models and all({"name", "provider", "strengths", "cost_tier"} <= set(m) for m in models)


def test_a_timed_out_call_is_retried_shorter_within_a_cap(monkeypatch):
    lt = llm._litellm()
    limits: list[float] = []

    def slow(**kwargs):
        limits.append(kwargs["timeout"])
        raise lt.Timeout(message="timed out", model="gpt-4o", llm_provider="openai")

    monkeypatch.setattr(lt, "completion", slow)
    with pytest.raises(OkgitError, match="gave up after 4 tries"):
        llm.complete(MSG, model="gpt-4o", timeout_s=240, max_retries=3, backoff_s=0)
    assert limits == [240, 120, 60, 30]  # halved each time, never below MIN_TIMEOUT_S
    limits.clear()
    clock = iter(range(0, 10_000, 100))  # each look at the clock: 100 s later
    monkeypatch.setattr(llm.time, "monotonic", lambda: next(clock))
    with pytest.raises(OkgitError, match="gave up after 2 tries"):
        llm.complete(MSG, model="gpt-4o", timeout_s=240, max_retries=5, max_wait_s=450, backoff_s=0)
    assert limits[0] == 240 and len(limits) == 2  # the cap on all the waiting ended it


def test_a_reply_cut_off_at_max_tokens_is_marked_truncated(monkeypatch):
    lt = llm._litellm()
    real = lt.completion

    def cut(**kwargs):
        response = real(**kwargs)
        response.choices[0].finish_reason = "length"
        return response

    monkeypatch.setattr(lt, "completion", cut)
    c = llm.complete(MSG, model="gpt-4o", max_tokens=300, mock_response="```python\nimport torch\n")
    assert c.truncated
    monkeypatch.setattr(lt, "completion", real)
    assert not llm.complete(MSG, model="gpt-4o", mock_response="ok").truncated


def test_a_dollar_budget_needs_a_price():
    llm.check_price("gpt-4o", None, {}, 1.0)  # litellm's cost map knows it
    llm.check_price("house-model", "http://127.0.0.1:9/v1", {}, None)  # no budget: nothing to count
    llm.check_price("house-model", "http://127.0.0.1:9/v1", {"house-model": {"input": 0.0, "output": 0.0}}, 1.0)
    with pytest.raises(OkgitError) as info:
        llm.check_price("house-model", "http://127.0.0.1:9/v1", {}, 1.0)
    assert str(info.value) == ('--budget-usd needs a price for house-model, which litellm does not know: set '
                               '[prices."house-model"] input and output ($ per token) in okgit.toml')


def test_the_system_prompt_is_marked_for_prompt_caching_where_the_provider_needs_asking(monkeypatch):
    lt = llm._litellm()
    sent = []
    real = lt.completion
    monkeypatch.setattr(lt, "completion", lambda **kw: sent.append(kw["messages"]) or real(**kw))
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "task"}]
    llm.complete(messages, model="anthropic/claude-sonnet-4-5", mock_response="ok")
    llm.complete(messages, model="gpt-4o", mock_response="ok")
    assert sent[0][0]["content"] == [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}]
    assert sent[1] == messages  # OpenAI caches long prefixes by itself
