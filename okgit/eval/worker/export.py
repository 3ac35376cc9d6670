"""How one call's outputs leave a candidate's worker for the judge, one case at a time (the
judge opens them: okgit.eval.judge.exported).

On a GPU they do not move: the worker exports each output's CUDA allocation (CUDA IPC, as
torch.multiprocessing does) and the judge maps it and compares in place. On a CPU (the Triton
interpreter, at scaled-down sizes) the worker writes them to a file in its job directory.

The judge never unpickles anything a candidate's process wrote: a descriptor is plain JSON
(numbers, hex strings, a dtype name) that the judge checks and turns into a tensor itself
(`torch.load(weights_only=True)` for files). Handles point only from the candidate's process
into its own memory, so nothing of the judge's is ever exposed to the candidate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def export(leaves: list[Any], device: str, job_dir: Path, seq: int) -> tuple[list[dict[str, Any] | None], Any]:
    """Descriptors for `leaves` (None where a leaf is not an exact tensor on the problem's device),
    and what must stay alive until the judge answered."""
    import torch

    exact = [t if type(t) is torch.Tensor and t.device.type == ("cuda" if device == "cuda" else "cpu") else None
             for t in leaves]
    if device != "cuda":
        name = f"out-{seq}.pt"
        torch.save([t.detach() if t is not None else None for t in exact], job_dir / name)
        return [{"file": name, "index": j} if t is not None else None for j, t in enumerate(exact)], None
    descriptors: list[dict[str, Any] | None] = []
    alive = []
    for t in exact:
        if t is None:
            descriptors.append(None)
            continue
        t = t.detach()
        if t.numel() == 0:  # no allocation to export: the judge makes the same empty tensor
            descriptors.append({"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "empty": True})
            continue
        storage = t.untyped_storage()
        dev, handle, size, offset, ref_handle, ref_offset, event, event_sync = storage._share_cuda_()
        alive.append((t, storage))
        descriptors.append({
            "shape": list(t.shape), "stride": list(t.stride()), "storage_offset": t.storage_offset(),
            "dtype": str(t.dtype).replace("torch.", ""), "device": dev, "handle": handle.hex(),
            "storage_bytes": size, "storage_offset_bytes": offset, "ref_counter": ref_handle.hex(),
            "ref_counter_offset": ref_offset, "event": event.hex() if event else None, "event_sync": bool(event_sync),
        })
    return descriptors, alive
