"""The LLM proposer's spend: every model call made, bounded, journaled and traced.

A call is refused (the proposer stops) once the dollar budget is spent, the time budget has
run out, `search.max_calls` calls were made, or three calls in a row failed after their
retries. A call never waits past the time budget, and a reply cut off at max_tokens is
unusable. `call` only talks to the model, so that several may run at once in threads;
`record` then journals and traces each reply in order, on the driver's thread.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from okgit import llm
from okgit.config import Config
from okgit.errors import OkgitError
from okgit.llm import Completion, Message
from okgit.search import critic
from okgit.search.types import Context, source_key

MAX_CALL_FAILURES = 3  # model calls failing in a row (after retries) before the proposer gives up
CALLS_PER_ITERATION = 4  # the default call budget: a generator, a critic, a planner share and slack


class ModelCalls:
    def __init__(self, config: Config, complete: Callable[..., Completion] | None = None) -> None:
        assert config.model
        self.config = config
        self.model = config.model
        if complete is None:
            llm.require()  # no litellm: one line now, not three failed calls later
            complete = llm.complete
        self.complete = complete
        llm.check_price(config.model, config.api_base, config.prices, config.budget_usd)
        self.max_calls = config.search.max_calls or CALLS_PER_ITERATION * config.iteration_budget
        self.made = 0
        self.failures = 0
        self.price_noted = False
        self.lock = threading.Lock()

    def stopped(self, ctx: Context, quiet: bool = False) -> bool:
        budget = self.config.budget_usd
        why = ""
        if budget is not None and ctx.spent_usd >= budget:
            why = f"dollar budget ${budget:.2f} spent (${ctx.spent_usd:.4f})"
        elif ctx.deadline is not None and time.monotonic() >= ctx.deadline:
            why = "time budget spent"
        elif self.made >= self.max_calls:
            why = f"call budget spent ({self.max_calls} model calls, search.max_calls)"
        elif self.failures >= MAX_CALL_FAILURES:
            why = f"{self.failures} model calls failed in a row; giving up"
        if why and not quiet:
            ctx.log("note", message=f"llm: {why}")
        return bool(why)

    def asker(self, ctx: Context) -> critic.Ask:
        return lambda role, messages, cand, parse: self.ask(ctx, role, messages, cand, parse)

    def ask(self, ctx: Context, role: str, messages: list[Message], cand: str | None,
            parse: Callable[[str], Any]) -> tuple[Completion | None, Any]:
        """One model call, journaled and traced; (reply, parse(reply text)) or (None, None)."""
        return self.record(ctx, role, messages, cand, parse, self.call(ctx, messages))

    def call(self, ctx: Context, messages: list[Message]) -> Completion | OkgitError | None:
        """The reply, the one-line error of a failed call, or None when no call may be made."""
        with self.lock:
            if self.stopped(ctx, quiet=True):
                return None
            self.made += 1
        s = self.config.search
        timeout, wait = s.call_timeout_s, s.max_wait_s
        if ctx.deadline is not None:  # a call never outlasts the time budget
            left = max(ctx.deadline - time.monotonic(), 1.0)
            timeout, wait = min(timeout, left), min(wait, left)
        try:
            return self.complete(messages, model=self.model, api_base=self.config.api_base, prices=self.config.prices,
                                 timeout_s=timeout, max_wait_s=wait, max_tokens=s.max_tokens)
        except llm.LLMAuthError:
            raise  # a refused key fails every later call too: stop the run with the one-line reason
        except OkgitError as e:
            return e

    def record(self, ctx: Context, role: str, messages: list[Message], cand: str | None,
               parse: Callable[[str], Any], reply: Completion | OkgitError | None) -> tuple[Completion | None, Any]:
        if reply is None:
            return None, None
        if isinstance(reply, OkgitError):
            self.failures += 1
            ctx.log("llm_call", role=role, model=self.model, prompt_tokens=0, completion_tokens=0, cost_usd=0.0,
                    latency_s=0.0, ok=False)
            ctx.log("note", message=f"llm: {role} call failed: {reply}")
            return None, None
        self.failures = 0
        parsed = None if reply.truncated else parse(reply.text)
        usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
        ctx.log("llm_call", role=role, model=reply.model, **usage, cost_usd=reply.cost_usd, latency_s=reply.latency_s,
                ok=parsed is not None, truncated=reply.truncated)
        extra: dict[str, Any] = {"source_key": source_key(parsed)} if isinstance(parsed, str) else {}
        if self.config.record_prompts:  # off: the call's size, cost and outcome only (docs/models.md, "Privacy")
            extra.update(messages=messages, reply=reply.text)
        ctx.trace("llm", cand=cand, role=role, model=reply.model, usage=usage, cost_usd=reply.cost_usd,
                  ok=parsed is not None, **extra)
        if not reply.cost_known and not self.price_noted:
            self.price_noted = True
            ctx.log("note", message=f"llm: no price known for {self.model}; its calls count as $0 (set [prices] in okgit.toml)")
        return reply, parsed
