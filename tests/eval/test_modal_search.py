"""Modal as the search's engine: the version floor (refused in one line, named by doctor),
transient service errors retried within a bound, GPU-seconds priced into the dollar budget,
the GPU chosen by a flag. No Modal account: the remote function is replaced in-process."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from okgit.config import Config, load_config
from okgit.errors import OkgitError
from okgit.eval.base import InMemoryEvaluator
from okgit.eval.modal import client as om
from okgit.eval.modal.image import MIN_MODAL, version_problem
from okgit.eval.types import EvalResult, Status
from okgit.problem import Problem
from okgit.search.driver import Budget, Search
from okgit.search.types import Context, Proposal

modal = pytest.importorskip("modal")
PROBLEM = Problem(path="op.py", source="import torch\n")


@pytest.fixture
def credentials(tmp_path, monkeypatch):
    if sys.version_info < (3, 11):  # --eval modal refuses there before it reads them (docs/modal.md)
        pytest.skip("--eval modal needs Python 3.11 or newer")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")


def test_the_floor_is_what_okgit_calls_need():
    assert MIN_MODAL == (1, 5)  # Function.with_options; startup_timeout needs 1.1.4
    assert version_problem("1.5.0") is None and version_problem(modal.__version__) is None
    assert version_problem("1.4.2") == "modal 1.5 or newer (this is 1.4.2): pip install -U 'okgit[modal]'"


def test_an_old_modal_is_refused_in_one_line_and_named_by_doctor(credentials, monkeypatch):
    from okgit import doctor

    monkeypatch.setattr(modal, "__version__", "1.1.0")
    with pytest.raises(OkgitError) as info:
        om.ModalEvaluator()
    assert str(info.value) == "--eval modal needs modal 1.5 or newer (this is 1.1.0): pip install -U 'okgit[modal]'"
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.1.0" if name == "modal" else real(name))
    (check,) = doctor._modal_version()
    assert not check.ok and check.detail == "too old: --eval modal needs modal 1.5 or newer (this is 1.1.0): pip install -U 'okgit[modal]'"
    monkeypatch.setattr(importlib.metadata, "version", real)
    assert doctor._modal_version()[0].ok


class Flaky:
    """A remote function whose service drops the first `drops` calls."""

    def __init__(self, drops: int, error: type[BaseException] = ConnectionError) -> None:
        self.drops, self.error, self.calls = drops, error, 0

    def remote(self, payload):
        self.calls += 1
        if self.calls <= self.drops:
            raise self.error("connection reset by peer")
        return {"result": {"timed": False}}

    def map(self, payloads, **kwargs):
        self.calls += 1
        if self.calls <= self.drops:
            raise self.error("connection reset by peer")
        for p in payloads:
            yield {"index": p["index"], "result": EvalResult(status=Status.correct, correct=True).model_dump(mode="json")}


def test_transient_service_errors_are_retried_within_a_bound(credentials, monkeypatch):
    monkeypatch.setattr(om, "SERVICE_BACKOFF_S", 0.0)
    ev = om.ModalEvaluator()
    flaky = Flaky(drops=2)
    monkeypatch.setattr(ev, "_function", lambda: flaky)
    assert ev.reference(PROBLEM).device == "modal:H100" and flaky.calls == 3
    flaky = Flaky(drops=2)
    assert ev.evaluate(PROBLEM, "x").correct and flaky.calls == 3
    down = Flaky(drops=99)
    monkeypatch.setattr(ev, "_function", lambda: down)
    with pytest.raises(OkgitError, match="^Modal: ConnectionError: connection reset by peer$"):
        ev.reference(PROBLEM)
    assert down.calls == 1 + om.SERVICE_RETRIES
    refused = Flaky(drops=99, error=PermissionError)  # not transient: no retry
    monkeypatch.setattr(ev, "_function", lambda: refused)
    with pytest.raises(OkgitError):
        ev.reference(PROBLEM)
    assert refused.calls == 1


def test_gpu_seconds_are_priced_into_the_dollar_budget(monkeypatch):
    class Priced(InMemoryEvaluator):
        usd_per_s = 0.001

    def judge(source):
        return EvalResult(status=Status.correct, correct=True, wall_s=100.0, queue_s=20.0, cold_start=source == "cold")

    events: list[dict] = []
    ctx = Context(problem=PROBLEM, reference=Priced(judge).reference(PROBLEM), backend="triton", device="cuda",
                  log=lambda type, **f: events.append({"type": type, **f}))

    class Two:
        name = "two"
        queue = ["cold", "warm", "third"]

        def propose(self, ctx):
            return Proposal(source=self.queue.pop(0), origin="test") if self.queue else None

    reason = Search(ctx, Priced(judge), Budget(iterations=5, usd=0.2), accept=lambda a: None).run([Two()])
    costs = [e["cost_usd"] for e in events if e["type"] == "evaluated"]
    assert costs == [0.12, 0.1]  # the cold start's 20 s billed too
    assert ctx.spent_usd == pytest.approx(0.22) and reason.startswith("dollar budget")


def test_the_gpu_and_its_price_come_from_flags_or_okgit_toml(credentials, tmp_path):
    from okgit.eval.registry import make_evaluator

    (tmp_path / "okgit.toml").write_text('modal_gpu = "A100-80GB"\nmodal_usd_per_s = 0.0005\n')
    config = load_config(tmp_path, {"modal_gpu": "H200"})
    ev = make_evaluator(config.model_copy(update={"eval": "modal"}))
    assert (ev.gpu, ev.usd_per_s) == ("H200", 0.0005)
    assert make_evaluator(Config(eval="modal", modal_gpu="h100")).usd_per_s == pytest.approx(3.95 / 3600)
    assert make_evaluator(Config(eval="modal", modal_gpu="H200")).usd_per_s is None  # no listed price
