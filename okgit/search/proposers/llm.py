"""The LLM proposer: a generator and a critic (separate roles and prompts) driven by the
three loops of the search, for any model litellm can reach.

The driver calls `propose(ctx)` for one candidate at a time and evaluates it; this class
keeps all loop state itself and reads each result back from `ctx.attempts` (matched by the
`llm_id` it puts in `Proposal.meta`). The driver may have run other proposers first, so
`ctx.best` can be a template kernel.

- inner loop: generate; on a compile error, a mismatch or a rejection, the next prompt
  carries the error, the differences and toolchain look-ups, and asks for a fix; on a correct
  candidate the critic diagnoses it and the next prompt asks for the improved version;
- middle loop: the intent tree (okgit.search.intents) picks the idea to work on;
- outer loop: the skill library (okgit.search.memory) seeds intents and, in `finish`,
  learns from the run.

Every model call is an `llm_call` journal event (its cost counts against the dollar budget)
and an `llm` trace record with the full messages and reply.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

from okgit import llm
from okgit.config import Config
from okgit.errors import OkgitError
from okgit.eval.types import Status
from okgit.llm import Completion, Message, prompt_messages
from okgit.paths import skills_path
from okgit.problem import top_level_names
from okgit.search import critic, memory
from okgit.search.critic import Diagnosis, describe_hardware, describe_reference, describe_result
from okgit.search.extract import PatchError, apply_patch, extract_code, extract_patch, lookup_symbols
from okgit.search.intents import SEEDS, Intent, IntentTree, parse_intents
from okgit.search.types import Attempt, Context, Proposal, Proposer, source_key

MAX_FAILURES_SHOWN = 6
MAX_CALL_FAILURES = 3  # model calls failing in a row (after retries) before the proposer gives up


@dataclass
class _Pending:
    """The proposal handed to the driver, whose result the next `propose` reads back."""

    llm_id: str
    intent: str
    source: str


class LLMProposer:
    name = "llm"

    def __init__(
        self,
        config: Config,
        *,
        complete: Callable[..., Completion] = llm.complete,
        library: memory.SkillLibrary | None = None,
        attempts_per_intent: int = 4,
        max_buggy: int = 3,
        intent_rounds: int = 2,
        intents_per_round: int = 4,
        timeout_s: float = 300.0,  # reasoning models can think for minutes on a large prompt
        max_retries: int = 3,
    ) -> None:
        if not config.model:
            raise OkgitError("the llm proposer needs --model")
        self.config = config
        self.model = config.model
        self.complete = complete
        self.library = library or memory.SkillLibrary.load(skills_path(config.skills_path))
        self.tree = IntentTree(max_attempts=attempts_per_intent, max_buggy=max_buggy)
        self.intent_rounds = intent_rounds
        self.intents_per_round = intents_per_round
        self.call_options = {"timeout_s": timeout_s, "max_retries": max_retries}
        self.ids = itertools.count(1)
        self.started = False
        self.call_failures = 0
        self.price_noted = False
        self.sig: memory.Signature | None = None
        self.skills_text = ""
        self.current: Intent | None = None
        self.pending: _Pending | None = None
        self.fix_from: Attempt | None = None  # a failed candidate the next prompt asks to repair
        self.feedback = ""  # what the last reply or candidate came to, for the next prompt
        self.retry = False  # the last step failed: stay on the intent and try again
        self.intent_best: dict[str, Attempt] = {}  # an intent's latest correct candidate
        self.diagnoses: dict[str, Diagnosis] = {}  # cand -> the critic's diagnosis
        self.failures: list[tuple[str, str]] = []  # (cand, one line) of failed candidates

    # ---- the driver's interface --------------------------------------------------------

    def propose(self, ctx: Context) -> Proposal | None:
        self.tree.log = lambda **fields: ctx.log("intent", **fields)
        if not self.started:
            self._start(ctx)
        if self.pending:
            self._absorb(ctx, self.pending)
            self.pending = None
        while True:
            if self._stopped(ctx):
                return None
            intent = self._choose(ctx)
            if intent is None:
                ctx.log("note", message="llm: no live intents left")
                return None
            proposal = self._generate(ctx, intent)
            if proposal is not None:
                return proposal

    def finish(self, ctx: Context) -> None:
        """Reflect on the run and update the skill library (the outer loop)."""
        if not self.started or self.sig is None:
            return
        if self.pending:  # the driver stopped right after evaluating it: count it, diagnose nothing
            self._absorb(ctx, self.pending, diagnose=False)
            self.pending = None
        ask = None if self._stopped(ctx, quiet=True) else self._asker(ctx)
        summary = f"{ctx.problem.name} ({ctx.backend}, {ctx.device}); ops: {', '.join(self.sig.ops) or 'unknown'}"
        outcomes = memory.reflect(ask, self.tree, summary)
        if not outcomes:
            return
        self.library.record(self.sig, outcomes)
        try:
            self.library.save()
        except OSError as e:
            ctx.log("note", message=f"skill library not saved: {e}")
            return
        ctx.log("note", message=f"skill library: {len(outcomes)} strategies updated in {self.library.path}")

    # ---- the loops ---------------------------------------------------------------------

    def _start(self, ctx: Context) -> None:
        self.started = True
        if self.library.load_error:
            ctx.log("note", message=self.library.load_error)
        self.sig = memory.signature(ctx.problem, ctx.reference, ctx.backend)
        retrieved = self.library.retrieve(self.sig)
        self.skills_text = "\n".join(s.text() for s, _ in retrieved)
        for strategy, score in retrieved:
            self.tree.insert(strategy.description, priority=0.3 + 0.5 * score, origin="skill")
        planned = self._plan(ctx)
        if not planned and not self.tree.live():
            for description, priority in SEEDS.get(ctx.backend, SEEDS["triton"]):
                self.tree.insert(description, priority=priority, origin="seed")
        ctx.log("note", message=f"llm: {self.model}, {len(retrieved)} skills retrieved, {len(self.tree.live())} intents")

    def _plan(self, ctx: Context) -> int:
        """Ask the model for intents; the number inserted."""
        if self.intent_rounds <= 0:
            return 0
        self.intent_rounds -= 1
        messages = prompt_messages(
            "intents.v1",
            count=self.intents_per_round,
            op_name=ctx.problem.name,
            backend=ctx.backend,
            reference_source=ctx.problem.source,
            best_summary=self._best_summary(ctx),
            hardware=describe_hardware(ctx),
            reference_figures=describe_reference(ctx),
            skills=self.skills_text,
            tried=self.tree.summary(),
        )
        _, ideas = self._ask(ctx, "intents", messages, None, parse_intents)
        inserted = [self.tree.insert(d, priority=p, origin="model") for d, p in (ideas or [])[: self.intents_per_round]]
        return sum(n is not None for n in inserted)

    def _choose(self, ctx: Context) -> Intent | None:
        """Stay on the current intent while it is alive and being repaired or improving."""
        if self.current is not None and self.current.live and (self.retry or self.current.stale_in_row == 0):
            return self.current
        intent = self.tree.select()
        if intent is None and self._plan(ctx):
            intent = self.tree.select()
        if intent is not self.current:
            # What happened to another idea does not help this one.
            self.fix_from, self.feedback, self.retry = None, "", False
        self.current = intent
        return intent

    def _absorb(self, ctx: Context, pending: _Pending, diagnose: bool = True) -> None:
        """Read back what the driver made of the last proposal, and update the loops."""
        attempt = next((a for a in reversed(ctx.attempts) if a.proposal.meta.get("llm_id") == pending.llm_id), None)
        intent = self.tree[pending.intent]
        if attempt is None:  # the driver skips a source it has already evaluated
            self.tree.record(intent.id, None, improved=False)
            self.feedback = "Your last file was identical to a candidate already evaluated. Make a real change."
            self.retry = True
            return
        result = attempt.result
        if not result.correct:
            self.tree.record(intent.id, result, improved=False)
            self.fix_from, self.retry = attempt, True
            self.feedback = self._failure_feedback(attempt)
            first = (result.error.message.strip().splitlines() or [""])[-1][:160] if result.error else ""
            self.failures.append((attempt.cand, f"- {attempt.cand} ({intent.description}): {result.status.value} {first}".rstrip()))
            return
        before = [a.result.speedup or 0.0 for a in ctx.attempts if a is not attempt and a.result.correct and a.result.timed]
        if result.timed:
            improved = (result.speedup or 0.0) > max(before, default=1.0)
        else:  # nothing is timed here: a first working version of an idea is the progress there is
            improved = intent.correct == 0
        diagnosis = None
        if diagnose and not self._stopped(ctx, quiet=True):
            diagnosis = critic.diagnose(self._asker(ctx), ctx, attempt, describe_hardware(ctx))
        self.tree.record(intent.id, result, improved=improved, profile=diagnosis.text() if diagnosis else "")
        if diagnosis:
            self.diagnoses[attempt.cand] = diagnosis
        if improved or intent.id not in self.intent_best:
            self.intent_best[intent.id] = attempt
        self.fix_from, self.retry = None, False
        self.feedback = "" if improved else f"{attempt.cand} was correct but no faster than what came before; change something else."

    def _generate(self, ctx: Context, intent: Intent) -> Proposal | None:
        """One generator call; a Proposal, or None after recording a reply with no usable code."""
        base, label, parent = self._base(ctx, intent)
        diagnosis = self.diagnoses.get(parent or "")
        backend = ctx.backend
        fields: dict[str, Any] = {
            "entry": self._entry(ctx),
            "op_name": ctx.problem.name,
            "reference_source": ctx.problem.source,
            "current_label": label,
            "current_source": base,
            "hardware": describe_hardware(ctx),
            "reference_figures": describe_reference(ctx),
            "intent": intent.description,
            "diagnosis": diagnosis.text() if diagnosis else "",
            "skills": self.skills_text,
            # The candidate being repaired is described in full under feedback, not listed here.
            "failures": "\n".join([line for cand, line in self.failures if cand != parent][-MAX_FAILURES_SHOWN:]),
            "feedback": self.feedback,
            "edit_instructions": self._edit_instructions(ctx),
        }
        if backend == "cuda":
            fields["arch"] = self._arch(ctx)
        messages = prompt_messages(f"generator_{backend}.v1", **fields)
        problem: list[str] = []
        cand = f"c{len(ctx.attempts) + 1:03d}"  # the driver numbers candidates in order

        def parse(text: str) -> str | None:
            source, why = self._candidate(text, base, ctx)
            problem.append(why)
            return source

        reply, source = self._ask(ctx, "generator", messages, cand, parse)
        if source is None:
            if reply is not None:  # a failed call is already logged; a useless reply is recorded here
                ctx.log("note", message=f"llm: reply for {intent.id} had no usable code: {problem[-1]}")
                self.tree.record(intent.id, None, improved=False)
                self.feedback = f"Your previous reply could not be used: {problem[-1]}"
                self.retry = True
            return None
        llm_id = f"L{next(self.ids)}"
        self.pending = _Pending(llm_id=llm_id, intent=intent.id, source=source)
        return Proposal(
            source=source, origin=f"llm:{self.model}", intent=intent.description, parent=parent,
            backend=backend, meta={"llm_id": llm_id, "intent_id": intent.id},
        )

    # ---- pieces ------------------------------------------------------------------------

    def _base(self, ctx: Context, intent: Intent) -> tuple[str, str, str | None]:
        """The file the prompt asks to change, its heading, and its candidate id."""
        if self.fix_from is not None:
            a = self.fix_from
            return a.proposal.source, f"Current version: {a.cand}, your previous attempt, which failed (see the end)", a.cand
        own = self.intent_best.get(intent.id)
        if own is not None:
            return own.proposal.source, f"Current version: {own.cand}, your correct version of this idea", own.cand
        if ctx.best is not None:
            return ctx.best_source, f"Current version: {ctx.best.cand}, the best so far ({self._speed(ctx.best)})", ctx.best.cand
        return ctx.problem.source, "Current version: the reference itself (nothing faster found yet)", None

    def _candidate(self, text: str, base: str, ctx: Context) -> tuple[str | None, str]:
        source: str | None
        if self.config.edit_mode == "patch":
            diff = extract_patch(text)
            if diff is None:
                return None, "no unified diff found; reply with one ```diff block"
            try:
                source = apply_patch(base, diff, filename=ctx.problem.name + ".py")
            except PatchError as e:
                return None, str(e)
        else:
            source = extract_code(text, self._entry(ctx))
            if source is None:
                return None, "no complete op file found; reply with the whole file in one ```python block"
        if source.strip() == base.strip():
            return None, "the file is unchanged"
        return source, ""

    def _failure_feedback(self, attempt: Attempt) -> str:
        result = attempt.result
        lines = [f"{attempt.cand} failed.", describe_result(result)]
        if result.status is Status.incorrect:
            lines.append("Find where the computation departs from the reference (indexing, masks, dtype, accumulation).")
        elif result.status is Status.rejected:
            lines.append("The evaluator rejected it; the gate's message says why.")
        if result.error and result.status in (Status.compile_error, Status.error):
            found = lookup_symbols(result.error.message, attempt.proposal.backend)
            if found:
                lines.append("From the installed toolchain:\n" + found)
        lines.append("Fix it, keeping the idea.")
        return "\n".join(lines)

    def _edit_instructions(self, ctx: Context) -> str:
        if self.config.edit_mode == "patch":
            name = ctx.problem.name + ".py"
            return (
                "Reply with a unified diff against the file shown as the current version, in one ```diff block: "
                f"headers --- a/{name} and +++ b/{name}, @@ hunks with three lines of unchanged context. "
                "Change only what the idea needs."
            )
        return "Reply with the complete file in one ```python block. A sentence before it may say what you changed."

    @staticmethod
    def _entry(ctx: Context) -> str:
        return "ModelNew" if "ModelNew" in top_level_names(ctx.problem.source) else "Model"

    @staticmethod
    def _arch(ctx: Context) -> str:
        figures = {**ctx.reference.hardware, **ctx.hardware}
        cc = figures.get("compute_capability")
        if cc:
            major, _, minor = str(cc).partition(".")
            return f"sm_{major}{minor or '0'} (compute capability {cc}); pass -gencode=arch=compute_{major}{minor or '0'},code=sm_{major}{minor or '0'}"
        return "read it at import with torch.cuda.get_device_capability() and pass the matching -gencode flag"

    @staticmethod
    def _speed(a: Attempt) -> str:
        return f"{a.result.speedup:.2f}x" if a.result.timed and a.result.speedup else "correct, not timed"

    def _best_summary(self, ctx: Context) -> str:
        if ctx.best is None:
            return "nothing faster than the reference yet"
        return f"{ctx.best.cand} ({ctx.best.proposal.origin}, {self._speed(ctx.best)}):\n```python\n{ctx.best_source}\n```"

    # ---- talking to the model ----------------------------------------------------------

    def _stopped(self, ctx: Context, quiet: bool = False) -> bool:
        budget = self.config.budget_usd
        if budget is not None and ctx.spent_usd >= budget:
            if not quiet:
                ctx.log("note", message=f"llm: dollar budget ${budget:.2f} spent (${ctx.spent_usd:.4f})")
            return True
        if self.call_failures >= MAX_CALL_FAILURES:
            if not quiet:
                ctx.log("note", message=f"llm: {self.call_failures} model calls failed in a row; giving up")
            return True
        return False

    def _asker(self, ctx: Context) -> critic.Ask:
        return lambda role, messages, cand, parse: self._ask(ctx, role, messages, cand, parse)

    def _ask(self, ctx: Context, role: str, messages: list[Message], cand: str | None, parse: Callable[[str], Any]) -> tuple[Completion | None, Any]:
        """One model call, journaled and traced; (reply, parse(reply text)) or (None, None)."""
        if self._stopped(ctx, quiet=True):
            return None, None
        try:
            reply = self.complete(messages, model=self.model, api_base=self.config.api_base, prices=self.config.prices, **self.call_options)
        except llm.LLMAuthError:
            raise  # a refused key fails every later call too: stop the run with the one-line reason
        except OkgitError as e:
            self.call_failures += 1
            ctx.log("llm_call", role=role, model=self.model, prompt_tokens=0, completion_tokens=0, cost_usd=0.0, latency_s=0.0, ok=False)
            ctx.log("note", message=f"llm: {role} call failed: {e}")
            return None, None
        self.call_failures = 0
        parsed = parse(reply.text)
        usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
        ctx.log("llm_call", role=role, model=reply.model, **usage, cost_usd=reply.cost_usd, latency_s=reply.latency_s, ok=parsed is not None)
        extra = {"source_key": source_key(parsed)} if isinstance(parsed, str) else {}
        ctx.trace("llm", cand=cand, role=role, model=reply.model, messages=messages, reply=reply.text, usage=usage,
                  cost_usd=reply.cost_usd, ok=parsed is not None, **extra)
        if not reply.cost_known and not self.price_noted:
            self.price_noted = True
            ctx.log("note", message=f"llm: no price known for {self.model}; its calls count as $0 (set [prices] in okgit.toml)")
        return reply, parsed


def proposer_for_model(config: Config) -> Proposer:
    """The proposer --model selects: replay:PATH plays a traces file back, anything else is a model."""
    if config.model and config.model.startswith("replay:"):
        from okgit.search.proposers.replay import ReplayProposer

        return ReplayProposer(config.model[len("replay:"):])
    return LLMProposer(config)
