"""The gates of every output the judge checks, whichever call made it: its type and structure,
aliasing, untouched inputs, every element written, NaN and inf where the reference has them.

Their findings come from `compare_call`, which the verdict runs for each call in order
(okgit.eval.parent.verdict), over the worker's facts and the judge's per-leaf answers
(okgit.eval.judge.tolerance names these gates too); they have no check of their own.
"""

from __future__ import annotations

from okgit.eval.parent.gates.base import Evidence, Findings, Gate, gate
from okgit.eval.protocol.checks import LeafCheck
from okgit.eval.protocol.keys import CallKey
from okgit.eval.types import Status


@gate(40)
class OutputType(Gate):
    name = "output_type"
    rule = "Return exactly the reference's structure: same number of outputs, shapes, dtypes and device, plain tensors."


@gate(50)
class Aliasing(Gate):
    name = "aliasing"
    rule = "An output must not alias an input (no returning an input or a view of one) unless the reference's does."
    rejects = True


@gate(60)
class InputsUnchanged(Gate):
    name = "inputs_unchanged"
    rule = "Never write to the inputs: the inputs must be unchanged after the call."


@gate(70)
class OutputsWritten(Gate):
    name = "outputs_written"
    rule = "Write every element of every output (masked stores must still cover the whole tensor)."


@gate(80)
class NanPattern(Gate):
    name = "nan_pattern"
    rule = "NaN and inf must appear exactly where the reference has them."


def compare_call(ev: Evidence, found: Findings, case_id: str, key: CallKey, gate: str, what: str | None = None) -> None:
    """One call's outputs against its case's reference: its facts (structure, devices, aliasing,
    inputs changed) against the reference's own, then the judge's answer for each leaf. `gate`
    names a leaf's plain mismatch; the output gates name the rest."""
    where = key.format() if what is None else f"{key.format()} ({what})"
    facts, answer = ev.calls.get(key.format()), ev.checks.get(key.format())
    if facts is None or answer is None:
        found.fail(gate, f"{where}: no outputs recorded", Status.error)
        return
    ref_facts = ev.prep.calls.get(case_id, {})
    if facts["spec"] != ref_facts.get("spec", facts["spec"]):
        found.fail(OutputType.name, f"{where}: returned structure {facts['spec']}, expected {ref_facts.get('spec')}")
        return
    for j, leaf in enumerate(facts["leaves"]):
        ref_leaf = ref_facts["leaves"][j] if j < len(ref_facts.get("leaves", [])) else {}
        if leaf["alias"] is not None and leaf["alias"] != ref_leaf.get("alias"):
            found.fail(Aliasing.name, f"{where}: output {j} aliases input {leaf['alias']} (the reference's does not)")
        if leaf["device"] != ref_leaf.get("device", leaf["device"]):
            found.fail(OutputType.name, f"{where}: output {j} on {leaf['device']}, expected {ref_leaf.get('device')}")
    changed = set(facts.get("inputs_changed", [])) - set(ref_facts.get("inputs_changed", []))
    if changed:
        found.fail(InputsUnchanged.name, f"{where}: the call modified input(s) {sorted(changed)}")
    parts = ref_facts.get("parts") or []  # the modes case: which mode, or which buffer, each output is
    for j, check in enumerate(answer["checks"]):
        _leaf(found, LeafCheck(**check), f"{where}, {parts[j][1] if j < len(parts) else f'output {j}'}")


def _leaf(found: Findings, check: LeafCheck, where: str) -> None:
    if check.ok:
        found.max_abs, found.max_rel = max(found.max_abs, check.max_abs), max(found.max_rel, check.max_rel)
        return
    # an output that is not exactly a tensor (a subclass) is a cheat, whichever gate it fails
    subclass = check.gate == OutputType.name and "not exactly" in check.message
    found.fail(check.gate, f"{where}: {check.message}", Status.rejected if subclass else None)
