"""Where candidates run: the built-in evaluators `--eval` chooses from (registered in
`okgit.config.EVALUATORS`, which config checks `--eval` against), and the one place that
builds one.

`optimize`, `verify` and the KernelBench sweep all get their evaluator here. A factory takes
the run's `Config` and options of its own kind (the sweep's share of Modal containers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from okgit.config import EVALUATORS, Config

if TYPE_CHECKING:
    from okgit.eval.base import Evaluator

evaluator = EVALUATORS.register  # the registry is config's, which checks `--eval` against it


@evaluator("local", order=0)
def _local(config: Config) -> Evaluator:
    """Worker processes on this machine: its GPUs (every visible one when there are several), or
    its CPU through the Triton interpreter."""
    from okgit.eval.parent.device_pool import local_evaluator

    return local_evaluator(config.device, reference_timeout_s=config.reference_timeout_s, profiler=config.profiler)


@evaluator("modal", order=1)
def _modal(config: Config, **options: Any) -> Evaluator:
    """The same judge and workers in a Modal GPU function."""
    from okgit.eval.modal.client import ModalEvaluator

    evaluator = ModalEvaluator(gpu=config.modal_gpu, **options)
    if config.modal_usd_per_s is not None:
        evaluator.usd_per_s = config.modal_usd_per_s
    return evaluator


def make_evaluator(config: Config, *, on_note: Callable[[str], None] | None = None, **options: Any) -> Evaluator:
    """The evaluator `config.eval` names; `on_note` gets what it says while it starts (the CLI's progress)."""
    evaluator = EVALUATORS.get(config.eval).factory(config, **options)
    if on_note is not None:
        evaluator.on_note = on_note
    return evaluator
