"""One registry per seam: the CLI's choices and Config's accepted values come from it."""

import pytest

from okgit.cli import build_parser
from okgit.config import Config, load_config
from okgit.errors import UsageError
from okgit.eval.registry import EVALUATORS, evaluator, make_evaluator
from okgit.search.registry import PROPOSERS, make_proposers


def test_builtins_are_registered_in_order():
    assert EVALUATORS.names() == ("local", "modal")
    assert PROPOSERS.names() == ("templates", "inductor", "model", "autotune")


def test_offline_run_gets_templates_the_inductor_seed_then_autotune():
    names = [type(p).__name__ for p in make_proposers(Config())]
    assert names == ["TemplatesProposer", "InductorProposer", "AutotuneProposer"]
    assert "InductorProposer" not in [type(p).__name__ for p in make_proposers(Config(inductor=False))]


def test_a_registered_evaluator_is_a_choice_everywhere(monkeypatch):
    monkeypatch.setattr(EVALUATORS, "_entries", dict(EVALUATORS._entries))
    made = []
    evaluator("fake", order=5)(lambda config, **options: made.append(config.eval) or "ev")
    assert load_config(None, {"eval": "fake"}).eval == "fake"
    assert make_evaluator(Config(eval="fake")) == "ev" and made == ["fake"]
    args = build_parser().parse_args(["verify", "x.diff", "--eval", "fake"])
    assert args.eval == "fake"
    with pytest.raises(UsageError, match="^--eval nope: input should be 'local', 'modal' or 'fake'$"):
        load_config(None, {"eval": "nope"})
