"""The proposers of a run, in the order the search runs them.

Templates seed the search, then torch.compile's own kernels; a model, when given, continues from their best; autotune then
tunes the launch settings of whatever is best by then. A factory returns None when the run's
settings do not call for it (no --model: no model proposer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from okgit.registry import Registry

if TYPE_CHECKING:
    from okgit.config import Config
    from okgit.search.types import Proposer

PROPOSERS: Registry[Callable[["Config"], "Proposer | None"]] = Registry("proposer", "okgit.proposers")
proposer = PROPOSERS.register


@proposer("templates", order=0)
def _templates(config: Config) -> Proposer:
    """Kernel templates recognised on the reference's graph (offline)."""
    from okgit.search.proposers.templates import TemplatesProposer

    return TemplatesProposer()


@proposer("inductor", order=5)
def _inductor(config: Config) -> Proposer | None:
    """torch.compile's kernels as a standalone file (on a GPU; on a CPU with `inductor = true`)."""
    if config.inductor is None:
        import torch

        on = (config.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda"
    else:
        on = config.inductor
    if not on:
        return None
    from okgit.search.proposers.inductor import InductorProposer

    return InductorProposer()


@proposer("model", order=10)
def _model(config: Config) -> Proposer | None:
    """--model: a generator and a critic through litellm, or replay:TRACES.jsonl."""
    if not config.model:
        return None
    from okgit.search.proposers.llm import proposer_for_model

    return proposer_for_model(config)


@proposer("autotune", order=20)
def _autotune(config: Config) -> Proposer:
    """Launch-setting variants of the Triton kernels in the best file so far."""
    from okgit.search.proposers.autotune import AutotuneProposer

    return AutotuneProposer()


def make_proposers(config: Config) -> list[Proposer]:
    made = (entry.factory(config) for entry in PROPOSERS.entries())
    return [p for p in made if p is not None]
