"""The judge's side of the transfer: a worker's exported outputs (okgit.eval.worker.export says
how they travel) opened as tensors. The judge never unpickles anything a candidate's process
wrote: it checks every field of a plain-JSON descriptor and builds the tensor itself
(`torch.load(weights_only=True)` for files), and a handle points only into the candidate's own
memory, so nothing of the judge's is exposed to the candidate.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^out-\d+\.pt$")
_REF_COUNTER = re.compile(r"^/?torch_[0-9_]+$")  # the shared-memory file torch names for IPC ref counts


class TransferError(Exception):
    """A descriptor the judge will not open."""


def open_exported(descriptors: list[dict[str, Any] | None], device: str, job_dir: Path) -> list[Any]:
    """The judge's side: tensors for the descriptors (None stays None)."""
    import torch

    if device != "cuda":
        loaded: dict[str, list[Any]] = {}
        out: list[Any] = []
        for d in descriptors:
            if d is None:
                out.append(None)
                continue
            name = str(d.get("file", ""))
            if not _NAME.match(name):
                raise TransferError(f"an output file named {name!r}")
            if name not in loaded:
                loaded[name] = torch.load(job_dir / name, weights_only=True)
            leaves = loaded[name]
            j = int(d["index"])
            out.append(leaves[j] if 0 <= j < len(leaves) and type(leaves[j]) is torch.Tensor else None)
        return out
    return [_open_cuda(d) if d is not None else None for d in descriptors]


def _open_cuda(d: dict[str, Any]) -> Any:
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    dtype = getattr(torch, str(d["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise TransferError(f"an output of dtype {d['dtype']!r}")
    if d.get("empty"):
        shape = [int(x) for x in d["shape"]]
        if any(x < 0 for x in shape) or 0 not in shape:
            raise TransferError("an empty output with elements")
        return torch.empty(shape, dtype=dtype, device="cuda")
    ref_counter = bytes.fromhex(str(d["ref_counter"]))
    if not _REF_COUNTER.match(ref_counter.decode(errors="replace")):
        raise TransferError("an output whose reference counter is not torch's")
    ints = [int(d[k]) for k in ("device", "storage_bytes", "storage_offset_bytes", "ref_counter_offset",
                                "storage_offset")]
    if min(ints) < 0:
        raise TransferError("an output with a negative size or offset")
    device, size, offset, ref_offset, tensor_offset = ints
    shape, stride = [int(x) for x in d["shape"]], [int(x) for x in d["stride"]]
    # rebuild_cuda_tensor lays the tensor over the storage with set_, which refuses a view past its end
    return rebuild_cuda_tensor(
        torch.Tensor, torch.Size(shape), tuple(stride), tensor_offset, torch.UntypedStorage, dtype, device,
        bytes.fromhex(str(d["handle"])), size, offset, False, ref_counter, ref_offset,
        bytes.fromhex(d["event"]) if d.get("event") else None, bool(d["event_sync"]),
    )
