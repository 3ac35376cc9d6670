"""The evaluator's gates, one object each (okgit.eval.parent.gates.base), registered in `GATES`
in the verdict's order:

| order | gates                                                      | module        |
|-------|------------------------------------------------------------|---------------|
| 0     | static                                                     | static.py     |
| 10-20 | compile, device                                            | loading.py    |
| 30    | entry_points                                               | integrity.py  |
| 40-80 | output_type, aliasing, inputs_unchanged, outputs_written, nan_pattern | outputs.py |
| 90-120| seeds, repeat, determinism, fresh_inputs                   | cases.py      |
| 130   | remembered                                                 | integrity.py  |
| 140-160 | distribution, extra_shapes, init_inputs                  | cases.py      |
| 170-190 | train_mode, state, eval_mode                             | modes.py      |
| 200   | backend_kernel                                             | integrity.py  |
| 210   | own_shape                                                  | own_shape.py  |
| 220-240 | streams, timed_outputs, roofline                         | timed.py      |

Adding a gate is one module with a `@gate(order)` class (docs/internals.md, "Adding a gate").
"""

from __future__ import annotations

# each built-in gate's module registers it on import
from okgit.eval.parent.gates import cases, integrity, loading, modes, outputs, own_shape, static, timed  # noqa: F401
from okgit.eval.parent.gates.base import GATES, Evidence, Findings, Gate

__all__ = ["Evidence", "Findings", "Gate", "call_gates", "gate_names", "gates", "rules_text"]

_made: dict[type[Gate], Gate] = {}


def gates() -> tuple[Gate, ...]:
    """One instance of each registered gate, in the verdict's order."""
    return tuple(_made.setdefault(e.factory, e.factory()) for e in GATES.entries())  # type: ignore[arg-type]


def gate_names() -> list[str]:
    return [g.name for g in gates()]


def call_gates() -> dict[str, str]:
    """The gate each part of the protocol is checked under, for the jobs (`Job.gates`)."""
    return {part: g.name for g in gates() for part in g.judges}


def rules_text() -> str:
    """The rules as prompt lines, one per gate, in the evaluator's order."""
    return "\n".join(f"- [{g.name}] {g.rule_text()}" for g in gates())
