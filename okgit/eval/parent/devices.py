"""Devices as okgit names and locks them: physical identities survive CUDA_VISIBLE_DEVICES.

Each physical GPU has its own fcntl lock file under okgit's per-user data dir, so two
timings never share a GPU across every okgit process of the user; a process pinned to
"GPU 2" and seeing it as cuda:0 takes the same lock as an unpinned process using cuda:2.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from okgit.locks import exclusive
from okgit.paths import data_dir


def visible_gpus() -> list[str]:
    """This process's CUDA devices as torch names ("cuda:0", ...); [] without a GPU."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return []
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def physical_id(device: str) -> str:
    """The device's identity outside this process: "cuda:1" under CUDA_VISIBLE_DEVICES=4,5 is "4".

    CPU slots ("cpu:3") are their own identity. An entry of CUDA_VISIBLE_DEVICES may be a
    GPU UUID; it is returned as written.
    """
    kind, _, index = device.partition(":")
    if kind != "cuda":
        return device
    i = int(index or 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return str(i)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return entries[i] if i < len(entries) else str(i)


def physical_name(device: str) -> str:
    """How results name a device: "cuda:<physical id>" or the CPU slot."""
    return f"cuda:{physical_id(device)}" if device.startswith("cuda") else device


def lock_path(device: str) -> Path:
    key = re.sub(r"[^A-Za-z0-9_.-]", "-", physical_name(device))
    return data_dir() / "locks" / f"{key}.lock"


@contextmanager
def device_lock(device: str) -> Iterator[float]:
    """Hold `device` exclusively across processes; yields the seconds spent waiting for it.

    Not reentrant within one process: a job takes it once, around its work on the GPU. The
    lock dies with its holder, so a killed worker never leaves it held.
    """
    with exclusive(lock_path(device)) as waited:
        yield waited
