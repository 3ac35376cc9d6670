"""The LLM proposer: a generator and a critic (separate roles and prompts) driven by the
three loops of the search, for any model litellm can reach.

The driver calls `propose(ctx)`, or `propose_batch(ctx, n)` where the evaluator runs several
candidates at once; this class keeps all loop state itself and reads each result back from
`ctx.attempts` (matched by the `llm_id` it puts in `Proposal.meta`). The driver may have run
other proposers first, so `ctx.best` can be a template kernel.

- inner loop (okgit.search.refine): generate; on a compile failure or a mismatch the next
  prompt carries the error, the differences and toolchain look-ups and asks for a repair,
  within separate repair budgets; on a correct, timed candidate the critic diagnoses it and
  the next prompt asks for the improved version;
- middle loop (okgit.search.intents): the model plans the intent tree with structured
  operations at the start and each time an intent ends; the best live intents are worked on,
  one per slot of a batch;
- outer loop (okgit.search.memory): the skill library seeds intents and, in `finish`, learns
  from the run.

Every model call is an `llm_call` journal event (its cost counts against the dollar budget,
the call itself against `search.max_calls`) and an `llm` trace record.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from okgit.config import Config
from okgit.errors import OkgitError
from okgit.eval.parent.gates import rules_text
from okgit.journal.events import IntentEvent, LlmCall
from okgit.llm import Completion, Message, prompt_messages
from okgit.paths import skills_path
from okgit.problem import top_level_names
from okgit.search import critic, memory
from okgit.search.critic import Diagnosis, describe_current, describe_hardware, describe_reference
from okgit.search.extract import PatchError, apply_patch, extract_code, extract_patch
from okgit.search.intents import SEEDS, Intent, IntentTree, parse_ops
from okgit.search.model_calls import ModelCalls
from okgit.search.refine import Refine, failure_feedback, failure_of
from okgit.search.types import Attempt, Context, Proposal, Proposer

MAX_FAILURES_SHOWN = 6
TEMPLATE_SCORE = 0.8  # a retrieved strategy this close brings its winning code along
GENERATOR, PLANNER = "generator_{backend}.v2", "intents.v2"  # the critic's prompt is okgit.search.critic's


@dataclass
class _Pending:
    """A proposal handed to the driver, whose result a later call reads back."""

    llm_id: str
    intent: str


class LLMProposer:
    name = "llm"

    def __init__(self, config: Config, *, complete: Callable[..., Completion] | None = None,
                 library: memory.SkillLibrary | None = None) -> None:
        if not config.model:
            raise OkgitError("the llm proposer needs --model")
        self.config = config
        self.settings = s = config.search
        self.model = config.model
        self.calls = ModelCalls(config, complete)  # refuses a missing litellm, or --budget-usd without a price
        self.library = library or memory.SkillLibrary.load(skills_path(config.skills_path))
        self.tree = IntentTree(attempts_per_intent=s.attempts_per_intent, failed_attempts=s.failed_attempts,
                               patience=s.intent_patience)
        self.plan_rounds = s.plan_rounds
        self.ids = itertools.count(1)
        self.started = False
        self.sig: memory.Signature | None = None
        self.skills_text = ""
        self.working: list[str] = []  # the intents being worked on, one per slot of a batch
        self.refines: dict[str, Refine] = {}
        self.pending: list[_Pending] = []
        self.bases: dict[str, Attempt] = {}  # an intent's best correct version: its next attempt's base
        self.diagnoses: dict[str, Diagnosis] = {}  # cand -> the critic's diagnosis
        self.failures: list[tuple[str, str]] = []  # (cand, one line) of failed candidates
        self.stagnant = 0  # intents in a row that ended without progress

    # ---- the driver's interface --------------------------------------------------------

    def propose(self, ctx: Context) -> Proposal | None:
        batch = self.propose_batch(ctx, 1)
        return batch[0] if batch else None

    def propose_batch(self, ctx: Context, limit: int) -> list[Proposal]:
        """Up to `limit` candidates, each for a different intent, their model calls at once."""
        self.tree.log = lambda **fields: ctx.log("intent", **fields)
        if not self.started:
            self._start(ctx)
        for pending in self.pending:
            self._absorb(ctx, pending)
        self.pending = []
        while not self.calls.stopped(ctx):
            intents = self._choose(ctx, limit)
            if not intents:
                ctx.log("note", message="llm: no live intents left")
                return []
            made = [p for p in self._generate(ctx, intents) if p is not None]
            if made:
                return made
        return []

    def finish(self, ctx: Context) -> None:
        """Reflect on the run and update the skill library (the outer loop)."""
        if not self.started or self.sig is None:
            return
        for pending in self.pending:  # the driver stopped right after evaluating them: count, diagnose nothing
            self._absorb(ctx, pending, diagnose=False)
        self.pending = []
        ask = None if self.calls.stopped(ctx, quiet=True) else self.calls.asker(ctx)
        summary = f"{ctx.problem.name} ({ctx.backend}, {ctx.device}); ops: {', '.join(self.sig.ops) or 'unknown'}"
        # An idea's best version is kept as a template when it beat the reference.
        codes = {i: a.proposal.source for i, a in self.bases.items() if a.result.timed and (a.result.speedup or 0.0) > 1.0}
        outcomes, offspring = memory.reflect(ask, self.tree, summary, self.library, codes)
        if not outcomes:
            return
        hardware = str({**ctx.reference.hardware, **ctx.hardware}.get("device") or ctx.device)
        try:
            self.library.update(self.sig, outcomes, offspring, hardware)
        except OSError as e:
            ctx.log("note", message=f"skill library not saved: {e}")
            return
        bred = f", {len(offspring)} new ones bred" if offspring else ""
        ctx.log("note", message=f"skill library: {len(outcomes)} strategies updated{bred} in {self.library.path}")

    # ---- the loops ---------------------------------------------------------------------

    def _start(self, ctx: Context) -> None:
        self.started = True
        if self.library.load_error:
            ctx.log("note", message=self.library.load_error)
        self.sig = memory.signature(ctx.problem, ctx.reference, ctx.backend)
        retrieved = self.library.retrieve(self.sig)
        self.skills_text = "\n".join(s.text() for s, _ in retrieved)
        if retrieved and retrieved[0][1] >= TEMPLATE_SCORE and retrieved[0][0].template:
            top = retrieved[0][0]
            self.skills_text += (f"\nThe code with which {top.name} won on a very similar problem (a template to adapt, "
                                 f"not to copy):\n```python\n{top.template}```")
        if any(isinstance(e, IntentEvent) for e in ctx.earlier):
            self._resume(ctx)
            ctx.log("note", message=f"llm: resumed with {len(self.tree.live())} live intents of {len(self.tree.nodes)}")
            return
        for strategy, score in retrieved:
            self.tree.insert(strategy.description, priority=0.3 + 0.5 * score, origin="skill")
        if not self._plan(ctx, "The search starts: plan the first intents.") and not self.tree.live():
            self._seed(ctx)
        ctx.log("note", message=f"llm: {self.model}, {len(retrieved)} skills retrieved, {len(self.tree.live())} intents")

    def _resume(self, ctx: Context) -> None:
        """Continue an interrupted run: its tree, its intents' bases, its failures, its calls."""
        log = self.tree.log
        self.tree = IntentTree.from_events(ctx.earlier, log=log, attempts_per_intent=self.tree.attempts_per_intent,
                                           failed_attempts=self.tree.failed_attempts, patience=self.tree.patience)
        by_cand = {a.cand: a for a in ctx.attempts}
        for node in self.tree.nodes.values():
            if node.base in by_cand:
                self.bases[node.id] = by_cand[node.base]
        by_description = {n.description: n for n in self.tree.nodes.values()}
        for a in ctx.attempts:
            owner = by_description.get(a.proposal.intent)
            if owner is not None and not a.result.correct:
                self.failures.append((a.cand, self._failure_line(a, owner)))
        calls = [e for e in ctx.earlier if isinstance(e, LlmCall)]
        self.plan_rounds -= sum(1 for e in calls if e.role == "intents")
        self.calls.made = len(calls)

    def _seed(self, ctx: Context) -> None:
        for description, priority in SEEDS.get(ctx.backend, SEEDS["triton"]):
            self.tree.insert(description, priority=priority, origin="seed")

    def _plan(self, ctx: Context, event: str) -> bool:
        """Ask the model to change the tree; False when no round is left or its reply was unusable."""
        if self.plan_rounds <= 0:
            return False
        self.plan_rounds -= 1
        messages = prompt_messages(
            PLANNER, count=self.settings.intents_per_round, op_name=ctx.problem.name, backend=ctx.backend,
            reference_source=ctx.problem.source, best_summary=self._best_summary(ctx), hardware=describe_hardware(ctx),
            reference_figures=describe_reference(ctx), skills=self.skills_text, tried=self.tree.summary(), event=event,
        )
        _, ops = self.calls.ask(ctx, "intents", messages, None, parse_ops)
        if not ops:
            return False
        kept, inserts = [], 0
        for op in ops:
            inserts += op.op == "insert"
            if op.op != "insert" or inserts <= self.settings.intents_per_round:
                kept.append(op)
        problems = self.tree.apply(kept)
        for problem in problems:
            ctx.log("note", message=f"llm: planner operation not applied: {problem}")
        return True

    def _choose(self, ctx: Context, limit: int) -> list[Intent]:
        """The intents for the next batch: those being worked on, then the best of the rest."""
        self.working = [i for i in self.working if self.tree[i].live][:limit]
        while len(self.working) < limit:
            found = self.tree.select(exclude=tuple(self.working))
            if found is None and not self.working and self._plan(ctx, "No live intents are left: insert new ones."):
                found = self.tree.select()
            if found is None:
                break
            intent = found
            self.working.append(intent.id)
            self.refines.setdefault(intent.id, Refine(self.settings.compile_retries, self.settings.mismatch_retries))
        return [self.tree[i] for i in self.working]

    def _absorb(self, ctx: Context, pending: _Pending, diagnose: bool = True) -> None:
        """Read back what the driver made of a proposal, and update the loops."""
        attempt = next((a for a in reversed(ctx.attempts) if a.proposal.meta.get("llm_id") == pending.llm_id), None)
        intent, refine = self.tree[pending.intent], self.refines[pending.intent]
        if attempt is None:  # the driver skips a source it has already evaluated
            self.tree.candidate(intent.id, correct=False)
            self._failed(ctx, intent, refine, None, "Your last file was identical to a candidate already evaluated. Make a real change.")
            return
        result = attempt.result
        if not result.correct:
            self.tree.candidate(intent.id, correct=False)
            self.failures.append((attempt.cand, self._failure_line(attempt, intent)))
            refine.fix_from = attempt
            self._failed(ctx, intent, refine, result, failure_feedback(attempt))
            return
        self._correct(ctx, attempt, intent, refine, diagnose)

    def _correct(self, ctx: Context, attempt: Attempt, intent: Intent, refine: Refine, diagnose: bool) -> None:
        """A correct candidate: the idea's progress (faster than its best version, or its first
        working one where nothing is timed), the critic's word, the attempt ended."""
        result = attempt.result
        self.tree.candidate(intent.id, correct=True, speedup=result.speedup if result.timed else None)
        before = self.bases.get(intent.id)
        if result.timed:
            progress = before is None or (result.speedup or 0.0) > (before.result.speedup or 0.0)
        else:  # nothing is timed here: a first working version of an idea is the progress there is
            progress = before is None
        diagnosis = self._diagnosis(ctx, attempt, intent) if diagnose else None
        if progress:
            self.bases[intent.id] = attempt
            feedback = ""
        else:
            base_speed = f" ({self._speed(before)})" if before is not None else ""
            feedback = (f"{attempt.cand} was correct but no faster ({self._speed(attempt)}) than this idea's best version "
                        f"{before.cand if before else ''}{base_speed}, which stays the current version; change something else.")
            if diagnosis:
                feedback += f"\nThe critic on {attempt.cand}:\n{diagnosis.text()}"
        refine.restart(feedback)
        self.tree.end_attempt(intent.id, "progress" if progress else "stale", base=attempt.cand if progress else None,
                              profile=diagnosis.text() if diagnosis and progress else "")
        self._after_attempt(ctx, intent, progress)

    def _diagnosis(self, ctx: Context, attempt: Attempt, intent: Intent) -> Diagnosis | None:
        """The critic's diagnosis of a correct candidate, kept by its name; it reads
        measurements: without timing it has nothing to go on."""
        if not attempt.result.timed or self.calls.stopped(ctx, quiet=True):
            return None
        # By description too: a resumed run's earlier candidates carry no meta
        trajectory = critic.describe_trajectory([a for a in ctx.attempts if a.proposal.meta.get("intent_id") == intent.id
                                                 or (not a.proposal.meta and a.proposal.intent == intent.description)])
        diagnosis = critic.diagnose(self.calls.asker(ctx), ctx, attempt, describe_hardware(ctx), trajectory)
        if diagnosis:
            self.diagnoses[attempt.cand] = diagnosis
        return diagnosis

    def _failed(self, ctx: Context, intent: Intent, refine: Refine, result: Any, feedback: str) -> None:
        """A failed candidate or reply: repair within the budget, else the attempt has failed."""
        if not refine.failed(failure_of(result)):
            refine.feedback = feedback
            return
        spent = refine.repairs()
        refine.restart(f"Your last attempt at this idea failed ({spent}); the last failure was:\n{feedback}\n"
                       "Start again from the current version shown, with a different implementation of the idea.")
        self.tree.end_attempt(intent.id, "failed")
        self._after_attempt(ctx, intent, progress=False)

    def _after_attempt(self, ctx: Context, intent: Intent, progress: bool) -> None:
        if intent.live:
            return
        improved = intent.improved > 0
        self.stagnant = 0 if improved else self.stagnant + 1
        outcome = f"{intent.id} ({intent.description}) ended {intent.status} after {intent.attempts} attempts, " \
                  f"{intent.correct} correct candidates" + (f", best {intent.best_speedup:.2f}x" if intent.best_speedup else "")
        if self.stagnant >= 2:
            outcome += (f".\nThe last {self.stagnant} intents made no progress: switch strategy (a different algorithm "
                        "or decomposition, not a variant of those), and prune what cannot pay.")
        if not self._plan(ctx, outcome):
            self.tree.fallback(intent)
            if self.stagnant >= 2:
                self._seed(ctx)  # a seed not tried yet is the strategy switch there is without a model

    def _generate(self, ctx: Context, intents: list[Intent]) -> list[Proposal | None]:
        """One generator call per intent, at once; a Proposal each, or None for an unusable reply."""
        jobs = []
        for intent in intents:
            base, label, parent, current = self._base(ctx, intent)
            jobs.append((intent, base, parent, self._messages(ctx, intent, base, label, parent, current)))
        first = len(ctx.attempts) + 1
        cands = [f"c{first + i:03d}" for i in range(len(jobs))]  # the driver numbers candidates in order
        if len(jobs) == 1:
            replies = [self.calls.call(ctx, jobs[0][3])]
        else:
            with ThreadPoolExecutor(max_workers=min(len(jobs), self.settings.concurrent_calls)) as pool:
                replies = list(pool.map(lambda job: self.calls.call(ctx, job[3]), jobs))
        out: list[Proposal | None] = []
        for (intent, base, parent, messages), cand, call in zip(jobs, cands, replies):
            problem: list[str] = []

            def parse(text: str, base: str = base, problem: list[str] = problem) -> str | None:
                source, why = self._candidate(text, base, ctx)
                problem.append(why)
                return source

            reply, source = self.calls.record(ctx, "generator", messages, cand, parse, call)
            if source is None:
                if reply is not None:  # a failed call is already logged; an unusable reply is counted here
                    why = (f"it was cut off at max_tokens ({self.settings.max_tokens}); reply with a shorter file"
                           if reply.truncated else problem[-1])
                    ctx.log("note", message=f"llm: reply for {intent.id} had no usable code: {why}")
                    self.tree.candidate(intent.id, correct=False)
                    self._failed(ctx, intent, self.refines[intent.id], None, f"Your previous reply could not be used: {why}")
                out.append(None)
                continue
            llm_id = f"L{next(self.ids)}"
            self.pending.append(_Pending(llm_id=llm_id, intent=intent.id))
            out.append(Proposal(source=source, origin=f"llm:{self.model}", intent=intent.description, parent=parent,
                                backend=ctx.backend, meta={"llm_id": llm_id, "intent_id": intent.id}))
        return out

    # ---- pieces ------------------------------------------------------------------------

    def _messages(self, ctx: Context, intent: Intent, base: str, label: str, parent: str | None,
                  current: Attempt | None) -> list[Message]:
        diagnosis = self.diagnoses.get(parent or "")
        fields: dict[str, Any] = {
            "entry": self._entry(ctx),
            "op_name": ctx.problem.name,
            "reference_source": ctx.problem.source,
            "current_label": label,
            "current_source": base,
            "current_figures": describe_current(current),
            "hardware": describe_hardware(ctx),
            "reference_figures": describe_reference(ctx),
            "intent": intent.description,
            "diagnosis": diagnosis.text() if diagnosis else "",
            "skills": self.skills_text,
            # The candidate being repaired is described in full under feedback, not listed here.
            "failures": "\n".join([line for cand, line in self.failures if cand != parent][-MAX_FAILURES_SHOWN:]),
            "feedback": self.refines[intent.id].feedback,
            "edit_instructions": self._edit_instructions(ctx),
            "gate_rules": rules_text(),
        }
        if ctx.backend == "cuda":
            fields["arch"] = self._arch(ctx)
        return prompt_messages(GENERATOR.format(backend=ctx.backend), **fields)

    def _base(self, ctx: Context, intent: Intent) -> tuple[str, str, str | None, Attempt | None]:
        """The file the prompt asks to change, its heading, its candidate id and its attempt."""
        fix_from = self.refines[intent.id].fix_from
        if fix_from is not None:
            return fix_from.proposal.source, f"Current version: {fix_from.cand}, your previous attempt, which failed (see the end)", \
                fix_from.cand, fix_from
        own = self.bases.get(intent.id) or (self.bases.get(intent.parent) if intent.parent else None)
        if own is not None:
            whose = "this idea" if own is self.bases.get(intent.id) else "the idea this one refines"
            return own.proposal.source, f"Current version: {own.cand}, the best version of {whose} ({self._speed(own)})", \
                own.cand, own
        if ctx.best is not None:
            return ctx.best_source, f"Current version: {ctx.best.cand}, the best so far ({self._speed(ctx.best)})", ctx.best.cand, ctx.best
        return ctx.problem.source, "Current version: the reference itself (nothing faster found yet)", None, None

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

    @staticmethod
    def _failure_line(attempt: Attempt, intent: Intent) -> str:
        result = attempt.result
        first = (result.error.message.strip().splitlines() or [""])[-1][:160] if result.error else ""
        return f"- {attempt.cand} ({intent.description}): {result.status.value} {first}".rstrip()

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


def proposer_for_model(config: Config) -> Proposer:
    """The proposer --model selects: replay:PATH plays a traces file back, anything else is a model."""
    if config.model and config.model.startswith("replay:"):
        from okgit.search.proposers.replay import ReplayProposer

        return ReplayProposer(config.model[len("replay:"):])
    return LLMProposer(config)
