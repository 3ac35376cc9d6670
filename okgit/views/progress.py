"""Plain-mode progress: one line per stage, printed from journal events as they are written.

The printer folds events into the same RunView the watch view uses, so "iteration k of N",
"best so far" and the dollars spent agree with `okgit watch`. Colour (rich) only on a terminal:
a pipe or a CI log gets plain text. A campaign prints a line of its own per stage and each
problem's run as a run prints (`CampaignPrinter`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import IO, Any

from rich.text import Text

from okgit.fmt import fmt_count, fmt_error, fmt_outcome, fmt_speed, fmt_us
from okgit.journal.campaign import (
    CampaignEvent,
    CampaignPreparing,
    CampaignStarted,
    ModelChecked,
    Planned,
    ProblemFinished,
    ProblemStarted,
    Screened,
)
from okgit.journal.events import (
    Accepted,
    DiagnosisEvent,
    Evaluated,
    Event,
    GateEvent,
    InterruptedEvent,
    LlmCall,
    Note,
    Preparing,
    Profiled,
    ProposalEvent,
    ReferenceEvent,
    Resumed,
    RunFinished,
    RunStarted,
)
from okgit.journal.runview import RunView
from okgit.search.profile_text import summary
from okgit.status import Status

STATUS_STYLE = {Status.correct: "green", Status.incorrect: "red", Status.compile_error: "magenta", Status.rejected: "yellow",
                Status.error: "red"}
INDENT = "        "  # result lines sit under their "[k/N] cand" line


def _standing(view: RunView) -> str:
    """Best so far and money spent, appended to every result line."""
    if view.timed:
        best = view.best_speedup()
        lead = max((c for c in view.candidates.values() if c.correct and c.timed and c.speedup),
                   key=lambda c: c.speedup or 0.0, default=None)
        standing = f"best {fmt_speed(best)} ({lead.cand})" if lead else "best: none correct yet"
    else:
        standing = f"{sum(c.correct for c in view.candidates.values())} correct so far (untimed)"
    return standing + (f" | ${view.cost_usd:.4f}" if view.cost_usd else "")


def describe(event: Event, view: RunView, path: str | None = None) -> Text | None:
    """The line for `event`, given `view` with the event already folded in; None prints nothing.
    `path`: the op file as the user named it (the resume hint), else the run's own op path."""
    line = _LINES.get(type(event))
    return line(event, view, path) if line else None


def _preparing(e: Preparing, view: RunView, path: str | None) -> Text:
    return Text.assemble(("okgit ", "bold"), f"run {e.run}: preparing {e.op} "
                         f"(starting the {e.eval} evaluator; the reference runs next)")


def _run_started(e: RunStarted, view: RunView, path: str | None) -> Text:
    model = f", {view.model}" if view.model else ""
    budget = f", {view.iterations} iteration{'s' if view.iterations != 1 else ''}" if view.iterations else ""
    return Text.assemble(("okgit ", "bold"), f"run {view.run}: {view.op} on {view.device} ({view.backend}, {view.mode}{model}{budget})")


def _reference(e: ReferenceEvent, view: RunView, path: str | None) -> Text:
    if e.timed and e.runtime_us is not None:
        return Text.assemble(("baseline ", "bold"), f"{e.runtime_us:.1f} us on {e.device}")
    return Text.assemble(("baseline ", "bold"), f"correct on {e.device}; timings are not claimed there")


def _proposal(e: ProposalEvent, view: RunView, path: str | None) -> Text:
    c = view.candidates[e.cand]
    total = f"/{view.iterations}" if view.iterations else ""
    return Text.assemble((f"[{view.evaluated + 1}{total}] ", "bold"), f"{c.cand} {c.origin}" + (f": {c.intent}" if c.intent else ""))


def _evaluated(e: Evaluated, view: RunView, path: str | None) -> Text:
    c = view.candidates[e.cand]
    line = Text(INDENT)
    line.append(c.status, style=STATUS_STYLE.get(Status(c.status), "") if c.status in Status.__members__ else "")
    if c.timed and c.speedup is not None:
        line.append(f" {fmt_speed(c.speedup)} ({fmt_us(c.runtime_us)} us)")
    if c.error:
        line.append(f" {fmt_error(c.error, 100)}", style="dim")
    line.append(f" | {_standing(view)}", style="dim")
    return line


def _profiled(e: Profiled, view: RunView, path: str | None) -> Text:
    tools = ", ".join(e.tools) or "no counters"
    return Text(f"{INDENT}profiled {e.cand or 'the baseline'} ({tools}, {e.seconds:.1f} s): {summary(e.profile)}", style="dim")


def _accepted(e: Accepted, view: RunView, path: str | None) -> Text:
    return Text(f"{INDENT}tagged {e.tag}", style="dim")


def _diagnosis(e: DiagnosisEvent, view: RunView, path: str | None) -> Text:
    return Text(f"{INDENT}critic: {e.specific_issue or e.bottleneck_type}"
                + (f" -> {e.recommendation}" if e.recommendation else ""), style="italic")


def _llm_call(e: LlmCall, view: RunView, path: str | None) -> Text | None:
    return None if e.ok else Text(f"{INDENT}llm {e.role} call to {e.model} failed", style="yellow")


def _message(e: Note | Resumed, view: RunView, path: str | None) -> Text:
    return Text(e.message)


def _interrupted(e: InterruptedEvent, view: RunView, path: str | None) -> Text:
    return Text(f"interrupted ({e.reason}); to continue: okgit optimize {path or view.op or 'PATH'} --resume {e.run}",
                style="bold red")


def _gate(e: GateEvent, view: RunView, path: str | None) -> Text:
    return Text.assemble(f"final gate {e.name} on {e.cand}: ", ("passed" if e.passed else "failed", "green" if e.passed else "red"),
                         f" ({e.detail})" if e.detail else "")


_LINES: dict[type[Event], Callable[[Any, RunView, str | None], Text | None]] = {
    Preparing: _preparing, RunStarted: _run_started, ReferenceEvent: _reference, ProposalEvent: _proposal,
    Evaluated: _evaluated, Profiled: _profiled, Accepted: _accepted, DiagnosisEvent: _diagnosis, LlmCall: _llm_call, Note: _message,
    Resumed: _message, InterruptedEvent: _interrupted, GateEvent: _gate,
}


class Printer:
    """The `on_event` of plain mode: one line per event on `stream`.

    `preload` folds a resumed run's earlier events in without printing them, so counters and
    the best so far go on from where it stopped. While `muted` answers True (the live view of
    `optimize --watch` holds the terminal) events are folded, not printed; `view_closed` then
    says where the run stands, and printing goes on (unless Ctrl-C closed it: the run stops).
    """

    def __init__(self, stream: IO[str], path: str | None = None) -> None:
        self.stream = stream
        self.path = path
        self.view = RunView()
        self.muted: Callable[[Event], bool] | None = None
        self.finished = False  # run_finished printed: a view closed after it needs no word
        self._console = None
        if stream.isatty():
            from rich.console import Console

            self._console = Console(file=stream, highlight=False, soft_wrap=True)
        self._closed = False  # the reader went away (`okgit optimize | head`): the run goes on, silently
        self._missed = False  # events folded while muted, not yet summarised
        self._lock = threading.Lock()  # view_closed comes from another thread

    def preload(self, events: list[Event]) -> None:
        self.view.apply(events)

    def __call__(self, event: Event) -> None:
        with self._lock:
            try:
                self.view.fold(event)
                line = describe(event, self.view, self.path)
            except Exception as e:  # noqa: BLE001 (a progress line is never worth stopping the run it reports)
                line = Text(f"(progress: cannot show a {event.type} event: {type(e).__name__}: {e})", style="dim")
            self.finished = self.finished or isinstance(event, RunFinished)
            if self.muted and self.muted(event):
                self._missed = True
                return
            if self._missed and not isinstance(event, InterruptedEvent):  # stopping: its own line says all
                self._catch_up()
            self._missed = False
            self._print(line)

    def view_closed(self, stopping: bool = False) -> None:
        """`stopping`: Ctrl-C in the view, which is interrupting the run: it does not go on here."""
        with self._lock:
            if self._missed and not self.finished and not stopping:
                self._catch_up()
            self._missed = self._missed and not stopping

    def _catch_up(self) -> None:
        self._missed = False
        self._print(Text(f"live view closed; run {self.view.run} goes on here (Ctrl-C stops it): "
                         f"{self.view.evaluated} evaluated, {_standing(self.view)}", style="dim"))

    def _print(self, line: Text | None) -> None:
        if line is None or self._closed:
            return
        try:
            if self._console:
                self._console.print(line)
            else:
                print(line.plain, file=self.stream, flush=True)
        except BrokenPipeError:
            self._closed = True


def printer(stream: IO[str], path: str | None = None) -> Printer:
    return Printer(stream, path)


def watch_end(view: RunView) -> str:
    """The last line of a plain `okgit watch`: how the run ended, or that it stopped without an end."""
    f = view.finished
    if f is None:
        return f"run {view.run or '?'}: no process holds it and its journal has no end (interrupted or killed)"
    return f"run {f.run} finished: {f.status}, {fmt_outcome(f.speedup, f.status)}" + (f", best {f.best_tag}" if f.best_tag else "")


class CampaignPrinter:
    """The `on_event` of a campaign in plain mode: its own events one line each, the events of
    each problem's run through a `Printer` of that run."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.problem: Printer | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, ProblemStarted):
            self.problem = Printer(self.stream, event.op)
        if isinstance(event, CampaignEvent):
            line = campaign_line(event)
            if line:
                print(line, file=self.stream, flush=True)
        elif self.problem:  # an event of the problem's run
            self.problem(event)
        elif isinstance(event, Note):  # the campaign's own, before its first problem: files skipped, what was profiled
            print(f"  {event.message}", file=self.stream, flush=True)


def campaign_line(event: CampaignEvent) -> str:
    """The line for one of the campaign's own events; "" for those that print nothing (the
    problem's run announces itself; the summary follows the campaign's end)."""
    line = _CAMPAIGN_LINES.get(type(event))
    return line(event) if line else ""


def _campaign_preparing(e: CampaignPreparing) -> str:
    return f"okgit campaign {e.run}: {e.doing}"


def _campaign_started(e: CampaignStarted) -> str:
    return (f"okgit campaign {e.run}: {fmt_count(len(e.ops), 'problem')} on {e.device} "
            f"({e.backend}, {fmt_count(e.iterations, 'iteration')} per problem on average)")


def _screened(e: Screened) -> str:
    if e.refused:
        return f"  screen {e.op}: refused: {e.refused}"
    where = f"{fmt_us(e.runtime_us)} us" if e.timed else "untimed"
    floor = f", floor {fmt_us(e.floor_us)} us" if e.floor_us else ""  # none without a device's peaks (a CPU)
    return f"  screen {e.op}: {where}{floor}" + (f", headroom {e.headroom:.0%}" if e.headroom is not None else "")


def _planned(e: Planned) -> str:
    return f"  plan by {e.ordered_by}: " + ", ".join(f"{op} {n}" for op, n in zip(e.order, e.iterations))


def _problem_finished(e: ProblemFinished) -> str:
    extra = e.reason or (fmt_outcome(e.speedup, e.status) + (f", {e.best_tag}" if e.best_tag else ""))
    return f"  problem {e.op}: {e.status}: {extra}"


def _model_checked(e: ModelChecked) -> str:
    return f"  whole model: {e.status}: {e.reason}"


_CAMPAIGN_LINES: dict[type[CampaignEvent], Callable[[Any], str]] = {
    CampaignPreparing: _campaign_preparing, CampaignStarted: _campaign_started, Screened: _screened, Planned: _planned, ProblemFinished: _problem_finished,
    ModelChecked: _model_checked,
}

