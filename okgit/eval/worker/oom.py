"""An out-of-memory error in one line: the size that did not fit, the device, and what was free.

torch's CUDA message runs to a paragraph (every process on the device, the allocator's advice, a
link) and a worker's failure adds the traceback; the final gate's error, result.json's `error`,
repeated it whole, so a run that ended `error` for want of memory said so only somewhere in the
middle of a screenful. The line keeps "out of memory" (okgit.eval.types.INFRASTRUCTURE_SIGNS, a
sweep's OUT_OF_MEMORY): such a failure is the machine's, not a verdict on the candidate.
"""

from __future__ import annotations

import re

_SIZE = r"(\d+(?:\.\d+)? (?:bytes|KiB|MiB|GiB|TiB))"
_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def oom_line(e: BaseException) -> str | None:
    """The one line for an out-of-memory error, None for any other error."""
    text = " ".join(str(e).split())
    if isinstance(e, MemoryError):
        return f"out of host memory ({type(e).__name__}{': ' + text[:200] if text else ''})"
    if "out of memory" not in text and type(e).__name__ != "OutOfMemoryError":
        return None
    asked = _find(rf"Tried to allocate {_SIZE}", text)
    gpu = re.search(rf"GPU (\d+) has a total capacity of {_SIZE} of which {_SIZE} is free", text)
    if asked is None or gpu is None:  # another wording (an older torch, a CUDA error): its first sentence
        return f"out of memory: {text.split('. ')[0][:300]}"
    line = (f"out of memory on cuda:{gpu.group(1)}: a tensor of {asked} did not fit, "
            f"{gpu.group(3)} of the device's {gpu.group(2)} free")
    own, tensors = _find(rf"this process has {_SIZE} memory in use", text), _find(rf"Of the allocated memory {_SIZE}", text)
    if own:
        line += f"; this process held {own}" + (f" ({tensors} of it in tensors)" if tensors else "")
    others = [_bytes(s) for s in re.findall(rf"Process \d+ has {_SIZE} memory in use", text)]
    if others:
        line += (f", {len(others)} other process{'es' if len(others) > 1 else ''} {_gib(sum(others))}"
                 f" (the largest {_gib(max(others))})")
    return line


def _find(pattern: str, text: str) -> str | None:
    found = re.search(pattern, text)
    return found.group(1) if found else None


def _bytes(size: str) -> int:
    value, unit = size.split()
    return int(float(value) * _UNITS[unit])


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
