"""What the parent asks of a worker and what comes back: plain data, JSON on disk.

A job directory holds job.json (the Job); the worker writes result.json (the outcome and
per-call facts) and outputs.pt (tensors). The reference worker also writes inputs.pt (inputs,
init inputs and state dicts per shape and per init_inputs case, read by candidate workers) and
expected.pt (read and deleted by the parent, so expected outputs never sit where a candidate
could read them).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Role = Literal["reference", "candidate"]
CaseKind = Literal["seed", "distribution", "extra_shape", "init_inputs"]
# the gate that judges each kind of case
CASE_GATES: dict[str, str] = {"seed": "seeds", "distribution": "distribution", "extra_shape": "extra_shapes",
                              "init_inputs": "init_inputs"}
INIT_FLOAT_FACTOR = 1.5  # the init_inputs case: every float constructor argument times this

MODEL_SEED = 12345  # set before every model construction, in both arms
PINNED_FLAGS: dict[str, Any] = {
    # PyTorch's defaults, pinned so that both arms run the library exactly alike (DESIGN.md 4).
    "torch.backends.cuda.matmul.allow_tf32": False,
    "torch.backends.cudnn.allow_tf32": True,
    "torch.backends.cudnn.benchmark": False,
    "torch.backends.cudnn.deterministic": False,
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": True,
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": True,
}


@dataclass
class Case:
    id: str
    kind: CaseKind
    shape: int  # index into the job's shapes
    seed: int
    signed: bool = False  # the second input distribution: floating x -> 3x - 1
    note: str = ""  # init_inputs: which constructor arguments changed, for the verdict's message

    @property
    def model(self) -> int | str:
        """Which model runs the case, the key of its init inputs and state dict in inputs.pt: the
        shape's, or for init_inputs one built from its own (perturbed) constructor arguments."""
        return self.id if self.kind == "init_inputs" else self.shape


@dataclass
class Timing:
    warmup: int
    samples: int


@dataclass
class Job:
    role: Role
    source_path: str
    device: str
    backend: str
    root: str | None
    data_dir: str  # reference: where inputs.pt goes; candidate: where it is read from
    cases: list[Case] = field(default_factory=list)  # candidate: the cases to run, in order
    shapes: list[dict[str, int]] = field(default_factory=list)  # candidate: knob values per shape
    # reference only: how to derive shapes and cases
    knobs: dict[str, int] = field(default_factory=dict)
    extra_shapes: list[dict[str, int]] | None = None
    seeds: list[int] = field(default_factory=list)
    cpu_input_limit: int = 65536
    # both
    check: bool = True  # run the correctness calls (False: timing only, for the final gate)
    timing: Timing | None = None
    profile: bool = False
    peaks_path: str | None = None  # reference on a GPU: measure device peaks into this file if absent

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> "Job":
        data = json.loads(path.read_text())
        data["cases"] = [Case(**c) for c in data["cases"]]
        data["timing"] = Timing(**data["timing"]) if data["timing"] else None
        return cls(**data)


def tree_spec(obj: Any) -> Any:
    """The nesting of an output: 't' for a tensor leaf, lists for tuples/lists, repr for other values."""
    if isinstance(obj, (tuple, list)):
        return [tree_spec(o) for o in obj]
    return "t" if _is_tensor(obj) else {"value": repr(obj)}


def flatten(obj: Any) -> list[Any]:
    if isinstance(obj, (tuple, list)):
        return [leaf for o in obj for leaf in flatten(o)]
    return [obj] if _is_tensor(obj) else []


def _is_tensor(obj: Any) -> bool:
    import torch

    return isinstance(obj, torch.Tensor)


def perturb_floats(init: list[Any], names: list[str] | None = None) -> tuple[list[Any], list[str]]:
    """The init_inputs case's constructor arguments: every Python float (top level and inside
    lists/tuples) times INIT_FLOAT_FACTOR; ints, bools, tensors and strings unchanged (ints are
    usually sizes, which the shape knobs already vary). Returns (new arguments, one line per
    changed value, e.g. 'temperature=1.05 (was 0.7)'); no lines: nothing to perturb."""
    changes: list[str] = []

    def walk(obj: Any, where: str) -> Any:
        if type(obj) is float:
            new = obj * INIT_FLOAT_FACTOR
            if math.isfinite(obj) and new != obj:  # 0.0, inf and nan stay what they are
                changes.append(f"{where}={_short(new)} (was {_short(obj)})")
            return new
        if type(obj) in (list, tuple):  # not a namedtuple or other subclass: rebuilt as it was
            return type(obj)(walk(o, f"{where}[{j}]") for j, o in enumerate(obj))
        return obj

    names = names or []
    out = [walk(x, names[i] if i < len(names) else f"argument {i}") for i, x in enumerate(init)]
    return out, changes


def _short(x: float) -> str:
    return repr(float(f"{x:.6g}"))
