"""What the parent asks of a worker and what comes back: plain data, JSON on disk.

A job directory holds job.json (the Job); the worker writes result.json (the outcome and
per-call facts) and outputs.pt (tensors). The reference worker also writes inputs.pt (inputs,
init inputs and state dicts per shape, read by candidate workers) and expected.pt (read and
deleted by the parent, so expected outputs never sit where a candidate could read them).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Role = Literal["reference", "candidate"]
CaseKind = Literal["seed", "distribution", "extra_shape"]

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
