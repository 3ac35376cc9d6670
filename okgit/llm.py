"""The one door to language models: litellm, offline and quiet, with okgit's own retry loop.

litellm is imported lazily (it takes seconds and is only needed with --model). Its cost map
is read from the installed package, never fetched, and its debug output is silenced so that
nothing it prints corrupts the terminal view. Its retries are off: okgit retries transient
failures itself (timeouts, rate limits, 5xx) with backoff, and turns everything else into a
one-line OkgitError.

Prompts are versioned text files in okgit/prompts; `prompt_messages` fills one into chat messages.
"""

from __future__ import annotations

import logging
import os
import random
import re
import string
import time
from functools import lru_cache
from importlib import resources
from typing import Any

from pydantic import BaseModel

from okgit.errors import OkgitError

Message = dict[str, str]
MIN_TIMEOUT_S = 30.0  # the shortest limit a retry after a timeout gets


class Completion(BaseModel):
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True  # False: no price for this model; cost_usd is 0, not the truth
    latency_s: float = 0.0
    truncated: bool = False  # the reply stopped at max_tokens (finish_reason "length"): it is incomplete


class LLMAuthError(OkgitError):
    """The provider refused the credentials: nothing later in the run can succeed."""


@lru_cache(maxsize=1)
def _litellm() -> Any:
    debug = bool(os.environ.get("OKGIT_DEBUG"))  # leaves litellm's own logging as configured
    # Both must be set before the import: the cost map is loaded at import time.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if not debug:
        os.environ.setdefault("LITELLM_LOG", "CRITICAL")
    try:
        import litellm
    except ImportError:
        raise OkgitError(NOT_INSTALLED) from None

    litellm.telemetry = False  # older litellm versions phone home unless told not to
    litellm.num_retries = 0
    if not debug:
        litellm.suppress_debug_info = True  # the "Provider List" / "Give Feedback" banners
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx"):
            logger = logging.getLogger(name)
            logger.setLevel(logging.CRITICAL)
            logger.propagate = False
    return litellm


NOT_INSTALLED = "a model needs litellm, which is not installed: pip install 'okgit[llm]' (or scripts/install.sh)"


def require() -> None:
    """Refuse at once, in one line, a model run without litellm installed."""
    _litellm()


def resolve_model(model: str, api_base: str | None) -> str:
    """An endpoint given by --api-base speaks the OpenAI protocol unless the model names a provider."""
    if not api_base:
        return model
    lt = _litellm()
    try:
        lt.get_llm_provider(model)
        return model
    except Exception:  # noqa: BLE001 - litellm raises BadRequestError for a name without a provider
        return f"openai/{model}"


def price_known(model: str, api_base: str | None, prices: dict[str, dict[str, float]]) -> bool:
    """Whether a call's cost can be counted: a price in okgit.toml, or litellm's cost map knows it."""
    resolved = resolve_model(model, api_base)
    if any(name in prices for name in (model, resolved, resolved.split("/", 1)[-1])):
        return True
    try:
        info = _litellm().get_model_info(resolved)
    except Exception:  # noqa: BLE001 - an unknown model: litellm raises rather than guess
        return False
    return info.get("input_cost_per_token") is not None


def check_price(model: str, api_base: str | None, prices: dict[str, dict[str, float]], budget_usd: float | None) -> None:
    """A dollar budget needs a price: refuse in one line rather than count every call as $0."""
    if budget_usd is not None and not price_known(model, api_base, prices):
        raise OkgitError(f"--budget-usd needs a price for {model}, which litellm does not know: set "
                         f'[prices."{model}"] input and output ($ per token) in okgit.toml')


def _api_key(model: str, api_base: str | None, api_key: str | None) -> str | None:
    key = api_key or os.environ.get("OKGIT_API_KEY")
    if key:
        return key
    # A local OpenAI-compatible server (vLLM, Ollama, llama.cpp) needs no key, but the OpenAI
    # client refuses to start without one, and litellm reports that as a 500.
    if api_base and model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
        return "no-key"
    return None  # litellm reads the provider's variable (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...)


# What the OpenAI client and litellm say when no key reached them; litellm reports some of
# these as a 500, which would otherwise be retried as if the provider were down.
_NO_KEY = re.compile(r"missing credentials|api_key client option must be set|no api key|api key (is )?(missing|not (set|found|provided))",
                     re.IGNORECASE)


# The variables the providers most models come from read (as litellm's validate_environment
# checks them), so a missing key is told without importing litellm, which takes seconds.
_PROVIDER_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "deepseek": ("DEEPSEEK_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",), "groq": ("GROQ_API_KEY",), "mistral": ("MISTRAL_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY",), "xai": ("XAI_API_KEY",),
}
_BARE_NAMES = re.compile(r"(?P<openai>gpt-|chatgpt-|o\d(?:-|$))|(?P<anthropic>claude-)|(?P<gemini>gemini-)")


def _known_provider(model: str) -> str | None:
    prefix, slash, _ = model.partition("/")
    if slash:
        return prefix if prefix in _PROVIDER_KEYS else None
    bare = _BARE_NAMES.match(model)
    return bare.lastgroup if bare else None


def missing_keys(model: str, api_base: str | None = None) -> list[str]:
    """The environment variables the provider of `model` reads, when none of them is set.

    Empty when a key is there (OKGIT_API_KEY or the provider's own), when `--api-base` names
    an endpoint (a local server may need no key; it says so itself when it does), and when
    litellm does not know which variables the provider reads."""
    if api_base or os.environ.get("OKGIT_API_KEY"):
        return []
    provider = _known_provider(model)
    if provider:
        keys = _PROVIDER_KEYS[provider]
        return [] if any(os.environ.get(k) for k in keys) else list(keys)
    resolved = resolve_model(model, api_base)
    try:
        found = _litellm().validate_environment(model=resolved)
    except OkgitError:
        raise
    except Exception:  # noqa: BLE001 (an unknown provider: let the first call say what is wrong)
        return []
    return [str(k) for k in found.get("missing_keys") or []]


def check_credentials(model: str, api_base: str | None = None) -> None:
    """Refuse at once, in one line naming the variable to set, a model whose key is not set
    (and a model at all when litellm is not installed)."""
    missing = missing_keys(model, api_base)  # first: a missing key is told without importing litellm (seconds)
    if missing:
        raise LLMAuthError(f"model {model}: no API key: set {' or '.join(missing)} (or OKGIT_API_KEY)")
    require()


def _redact(text: str, key: str | None) -> str:
    """Error text fit for a terminal and a journal: no secret in it, no colour codes, one line."""
    secrets = {key} | {v for k, v in os.environ.items() if k.endswith(("_API_KEY", "_TOKEN"))}
    for secret in secrets:
        if secret and len(secret) >= 8:
            text = text.replace(secret, "***")
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # litellm colours some messages
    return " ".join(text.split())[:300]


def _retryable(err: Exception) -> bool:
    lt = _litellm()
    fatal = (lt.AuthenticationError, lt.PermissionDeniedError, lt.BadRequestError, lt.NotFoundError)
    if isinstance(err, fatal):
        return False  # includes ContextWindowExceededError, a BadRequestError
    transient = (lt.Timeout, lt.RateLimitError, lt.APIConnectionError, lt.InternalServerError, lt.ServiceUnavailableError)
    if isinstance(err, transient):
        return True
    status = getattr(err, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status == 429)


def _cost(response: Any, model: str, resolved: str, prices: dict[str, dict[str, float]], prompt: int, completion: int) -> tuple[float, bool]:
    for name in (model, resolved, resolved.split("/", 1)[-1]):  # as the user wrote it, or as litellm names it
        if name in prices:
            p = prices[name]
            return prompt * p.get("input", 0.0) + completion * p.get("output", 0.0), True
    try:
        return float(_litellm().completion_cost(completion_response=response, model=resolved)), True
    except Exception:  # noqa: BLE001 - an unknown model: litellm raises rather than guess
        return 0.0, False


# Providers that cache a prompt's prefix only when asked (OpenAI, DeepSeek and Gemini cache on their own).
_ASK_TO_CACHE = ("anthropic/", "claude", "bedrock/anthropic", "vertex_ai/claude")


def cached(resolved: str, messages: list[Message]) -> list[Any]:
    """The messages with the system prompt marked for the provider's prompt cache, where it needs
    asking: the system prompt (rules, gates, format) is the same in every call of a role."""
    if not resolved.startswith(_ASK_TO_CACHE) or not messages or messages[0]["role"] != "system":
        return messages
    system = {"role": "system", "content": [{"type": "text", "text": messages[0]["content"],
                                             "cache_control": {"type": "ephemeral"}}]}
    return [system, *messages[1:]]


def complete(
    messages: list[Message],
    *,
    model: str,
    api_base: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 180.0,
    max_retries: int = 3,
    max_wait_s: float | None = None,
    backoff_s: float = 2.0,
    temperature: float | None = None,
    max_tokens: int | None = None,
    prices: dict[str, dict[str, float]] | None = None,
    mock_response: Any = None,
) -> Completion:
    """One chat completion. Transient failures are retried; others raise a one-line OkgitError.

    A retry after a timeout gets half the previous limit (at least MIN_TIMEOUT_S): a model
    that did not answer in the full time is retried quickly rather than waited on again at
    full length; `max_wait_s` caps the time of all tries and their backoff together.
    `prices` (model -> {"input", "output"} dollars per token, from config) win over litellm's
    cost map. `mock_response` is litellm's scripted reply, for tests.
    """
    lt = _litellm()
    resolved = resolve_model(model, api_base)
    key = _api_key(resolved, api_base, api_key)
    kwargs: dict[str, Any] = {"model": resolved, "messages": cached(resolved, messages), "timeout": timeout_s, "num_retries": 0}
    for name, value in (("api_base", api_base), ("api_key", key), ("temperature", temperature),
                        ("max_tokens", max_tokens), ("mock_response", mock_response)):
        if value is not None:
            kwargs[name] = value
    last = ""
    give_up = time.monotonic() + (max_wait_s if max_wait_s is not None else (timeout_s + 60) * (max_retries + 1))
    limit, tried = timeout_s, 0
    for attempt in range(max_retries + 1):
        started = time.monotonic()
        left = give_up - started
        if left <= 1.0:
            break
        tried += 1
        kwargs["timeout"] = min(limit, left)
        try:
            response = lt.completion(**kwargs)
        except Exception as e:  # noqa: BLE001 - litellm maps every provider's errors onto its own types
            last = _redact(f"{type(e).__name__}: {e}", key)
            if isinstance(e, lt.Timeout):
                limit = max(MIN_TIMEOUT_S, limit / 2)
            if isinstance(e, (lt.AuthenticationError, lt.PermissionDeniedError)) or _NO_KEY.search(str(e)):
                wanted = " or ".join(missing_keys(model, api_base) or ["the provider's key"])
                raise LLMAuthError(f"model {model}: credentials refused ({last}); set {wanted} or OKGIT_API_KEY") from None
            if not _retryable(e):
                raise OkgitError(f"model {model}: {last}") from None
            if attempt < max_retries:
                # Exponential backoff with jitter, so parallel runs do not retry in lockstep.
                time.sleep(min(backoff_s * (2**attempt) * (0.5 + random.random()), max(give_up - time.monotonic(), 0.0)))
            continue
        latency = time.monotonic() - started
        choice = response.choices[0]
        text = choice.message.content or ""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        cost, known = _cost(response, model, resolved, prices or {}, prompt_tokens, completion_tokens)
        return Completion(
            text=text, model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cost_usd=cost, cost_known=known, latency_s=round(latency, 3),
            truncated=getattr(choice, "finish_reason", None) == "length",
        )
    tries = f"{tried} tries" if tried != 1 else "1 try"
    raise OkgitError(f"model {model}: gave up after {tries}: {last or 'no time left to wait'}")


def ping(model: str, api_base: str | None = None) -> str:
    """One tiny call, for `okgit doctor`: a line saying the model answers, or an OkgitError."""
    check_credentials(model, api_base)
    # doctor answers within seconds: one try, a short timeout (a run still retries transient errors)
    c = complete(
        [{"role": "user", "content": "Reply with the single word: ok"}],
        model=model, api_base=api_base, timeout_s=10.0, max_retries=0, max_tokens=5,
    )
    price = f"${c.cost_usd:.6f}" if c.cost_known else "price unknown"
    return f"answered {c.text.strip()[:20]!r} in {c.latency_s:.1f} s ({c.prompt_tokens}+{c.completion_tokens} tokens, {price})"


# ---- prompts -------------------------------------------------------------------------------

USER_MARK = "=== user ==="


@lru_cache(maxsize=None)
def prompt_text(name: str) -> str:
    """The text of okgit/prompts/<name>.txt, e.g. "generator_triton.v2"."""
    try:
        return (resources.files("okgit") / "prompts" / f"{name}.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OkgitError(f"no prompt named {name} in okgit/prompts") from None


def prompt_messages(name: str, **fields: Any) -> list[Message]:
    """Fill a prompt's $placeholders; the part above the '=== user ===' line is the system message.

    An empty field reads "(none)" so that every section of a prompt stays in place.
    """
    values = {k: (str(v).strip() if v not in (None, "", [], {}) else "(none)") for k, v in fields.items()}
    try:
        text = string.Template(prompt_text(name)).substitute(values)
    except KeyError as e:
        raise OkgitError(f"prompt {name}: no value for ${e.args[0]}") from None
    system, sep, user = text.partition(USER_MARK)
    if not sep:
        return [{"role": "user", "content": text.strip()}]
    return [{"role": "system", "content": system.strip()}, {"role": "user", "content": user.strip()}]

