"""okgit: a git-native optimizer for GPU kernels.

The public API, imported lazily so that `okgit --help` stays instant:

    import okgit
    result = okgit.optimize("ops/softmax.py", flags={"device": "cuda"})   # a run, as the CLI does
    verdict = okgit.evaluate_file("cand.py", "ref.py")                    # one candidate, no git

Evaluators (`LocalEvaluator`, `InMemoryEvaluator`, or your own `Evaluator`) and proposers
(`Proposer`, returning `Proposal`s) are the two extension points.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "optimize": "okgit.run",
    "RunResult": "okgit.run",
    "evaluate_file": "okgit.eval.parent.local",
    "LocalEvaluator": "okgit.eval.parent.local",
    "Evaluator": "okgit.eval.base",
    "InMemoryEvaluator": "okgit.eval.base",
    "EvalResult": "okgit.eval.types",
    "ProfileData": "okgit.eval.types",
    "Status": "okgit.status",
    "Proposer": "okgit.search.types",
    "Proposal": "okgit.search.types",
    "Context": "okgit.search.types",
    "Problem": "okgit.problem",
    "load_problem": "okgit.problem",
    "Config": "okgit.config",
    "load_config": "okgit.config",
    "OkgitError": "okgit.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'okgit' has no attribute {name!r}")
