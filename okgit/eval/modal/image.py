"""The Modal client's prerequisites and the image: the modal package and its credentials, the
versions the image installs (resolved from the user's environment by pure functions that the
tests drive with CUDA 12, CUDA 13 and CPU torches), and the image and function name built from them.

Imported by the client (okgit.eval.modal.client) only; the container never needs it.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from okgit.errors import OkgitError

MIN_PYTHON = (3, 11)  # Modal's current image builder (2026.10) has no Python 3.10
# Function.with_options (a deployed function on the chosen GPU) needs 1.5; startup_timeout 1.1.4.
MIN_MODAL = (1, 5)
NINJA = "ninja>=1.11"
# A CUDA toolkit image tag on Docker Hub per CUDA major.minor; a minor missing here takes <minor>.0,
# the first release of that minor: never another major's toolkit (torch's extension builder refuses it).
CUDA_TAGS = {"11.8": "11.8.0", "12.1": "12.1.1", "12.4": "12.4.1", "12.6": "12.6.3", "12.8": "12.8.1",
             "12.9": "12.9.1", "13.0": "13.0.1"}
# A CPU-only local torch has no CUDA of its own: the image installs the same version's build for this
# CUDA from the PyTorch index (one that exists for that release), and the toolkit of the same CUDA.
CPU_TORCH_CUDA = {"2.4": "12.4", "2.5": "12.4", "2.6": "12.6", "2.7": "12.8", "2.8": "12.8"}
NEWEST_TORCH_CUDA = "13.0"  # torch 2.9 and later
TORCH_INDEX = "https://download.pytorch.org/whl"

MISSING_MODAL = "--eval modal needs the modal package: pip install 'okgit[modal]'"
MISSING_AUTH = ("Modal is not authenticated: run `modal setup` (it writes ~/.modal.toml) "
                "or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET")


# --- authentication, where the modal client looks for it -------------------------------------------


def has_credentials(environ: Mapping[str, str] | None = None) -> bool:
    """A token pair or an OAuth login, from MODAL_* variables or the chosen profile of ~/.modal.toml.

    The profile is MODAL_PROFILE, else the one marked `active = true`, else "default": the
    client's own rules, read here without importing modal or touching the network. An OAuth
    login (`modal setup` with OAuth) is a refresh token, a client id and one client secret or
    JWT key.
    """
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    path = Path(env.get("MODAL_CONFIG_PATH") or Path(home) / ".modal.toml")
    try:
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib

        profiles = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        profiles = {}
    active = [name for name, values in profiles.items() if isinstance(values, dict) and values.get("active") is True]
    profile = profiles.get(env.get("MODAL_PROFILE") or (active[0] if active else "default"), {})
    profile = profile if isinstance(profile, dict) else {}

    def setting(key: str) -> Any:
        return env.get(f"MODAL_{key.upper()}") or profile.get(key)

    if setting("token_id") and setting("token_secret"):
        return True
    oauth_secret = bool(setting("oauth_client_secret")) != bool(setting("oauth_jwt_key"))
    return bool(setting("oauth_refresh_token") and setting("oauth_client_id") and oauth_secret)


def require_modal():
    """The modal module, or one clear OkgitError naming what is missing."""
    if sys.version_info[:2] < MIN_PYTHON:
        raise OkgitError(f"--eval modal needs Python {'.'.join(map(str, MIN_PYTHON))} or newer (this is "
                         f"{sys.version_info.major}.{sys.version_info.minor}): Modal's image builder has no "
                         "older Python, and the container runs the same Python as okgit")
    try:
        import modal
    except ImportError:
        raise OkgitError(MISSING_MODAL) from None
    too_old = version_problem(getattr(modal, "__version__", "0"))
    if too_old:
        raise OkgitError(f"--eval modal needs {too_old}")
    if not has_credentials():
        raise OkgitError(MISSING_AUTH)
    return modal


def version_problem(version: str) -> str | None:
    """What is wrong with an installed modal's version, in words; None when it is new enough."""
    if _version_tuple(version) >= MIN_MODAL:
        return None
    return f"modal {'.'.join(map(str, MIN_MODAL))} or newer (this is {version}): pip install -U 'okgit[modal]'"


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:2])


# --- the versions the image installs ---------------------------------------------------------------


@dataclass(frozen=True)
class Stack:
    """What the image installs: Python, a CUDA toolkit, torch (with triton: its own layer) and the rest."""

    python: str
    cuda: str  # major.minor of the toolkit, the CUDA torch is built for
    torch: tuple[str, ...]  # the torch layer: torch, and triton when pinned
    index: str | None  # the PyTorch index serving that torch build
    rest: tuple[str, ...]  # pydantic, numpy: a layer of their own, so a change there keeps torch's


def requirement_version(requires: list[str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, version) of the first `name==version` requirement among `names` (Linux markers or none)."""
    for req in requires:
        spec, _, marker = req.partition(";")
        if "extra ==" in marker or ("platform_system" in marker and "Linux" not in marker):
            continue
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[[^\]]*\])?\s*==\s*([^\s,;]+)\s*$", spec)
        if m and m.group(1).lower().replace("_", "-") in names:
            return m.group(1), m.group(2)
    return None


def torch_cuda(torch_version: str, built_cuda: str | None, requires: list[str]) -> str:
    """The CUDA major.minor of the torch the image installs.

    A CUDA build: its CUDA requirement (nvidia-cuda-runtime-cuXX / cuda-toolkit ==X.Y.Z), else the
    CUDA it was built with. A CPU build: the CUDA whose build of that version the image installs.
    """
    if built_cuda:
        found = requirement_version(requires, ("cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu11",
                                               "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13"))
        version = found[1] if found and found[1].split(".")[0] == built_cuda.split(".")[0] else built_cuda
        return ".".join(version.split(".")[:2])
    minor = ".".join(torch_version.split("+")[0].split(".")[:2])
    return CPU_TORCH_CUDA.get(minor, NEWEST_TORCH_CUDA)


def image_stack(torch_version: str, built_cuda: str | None, requires: list[str], local_triton: str | None,
                others: Mapping[str, str], python: str) -> Stack:
    """The pins for a user's environment (pure: tests give it CUDA 12, CUDA 13 and CPU torches).

    triton follows torch's own requirement: the installed metadata of a CUDA build; for a CPU build
    (whose metadata pins no triton, and whose local triton is only what pip picked for it) triton is
    left to pip, which takes it from the metadata of the CUDA build installed in the image.
    """
    cuda = torch_cuda(torch_version, built_cuda, requires)
    base, _, local = torch_version.partition("+")
    variant = "cu" + cuda.replace(".", "")
    if built_cuda:
        triton = requirement_version(requires, ("triton", "pytorch-triton"))
        pins = [f"torch=={torch_version}"] + ([f"{triton[0]}=={triton[1]}"] if triton
                                              else [f"triton=={local_triton}"] if local_triton else [])
        index = f"{TORCH_INDEX}/{local}" if local else None  # a plain version: PyPI's wheel is that build
    else:
        pins, index = [f"torch=={base}+{variant}"], f"{TORCH_INDEX}/{variant}"
    return Stack(python=python, cuda=cuda, torch=tuple(pins), index=index,
                 # ninja: torch's cpp_extension (load_inline) builds the CUDA backend's kernels with it
                 rest=tuple(f"{name}=={version}" for name, version in sorted(others.items())) + (NINJA,))


def local_stack() -> Stack:
    """image_stack() of this environment."""
    from importlib import metadata

    import numpy
    import pydantic
    import torch

    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        requires = []
    try:
        import triton

        local_triton = triton.__version__
    except ImportError:
        local_triton = None
    return image_stack(torch.__version__, torch.version.cuda, requires, local_triton,
                       {"numpy": numpy.__version__, "pydantic": pydantic.VERSION},
                       f"{sys.version_info.major}.{sys.version_info.minor}")


def cuda_image_tag(cuda: str) -> str:
    major_minor = ".".join(cuda.split(".")[:2])
    return f"nvidia/cuda:{CUDA_TAGS.get(major_minor, major_minor + '.0')}-devel-ubuntu22.04"


# --- the image, and the function's name that fingerprints it -----------------------------------------


def build_image(cuda_image: str | None = None, stack: Stack | None = None):
    modal = require_modal()
    stack = stack or local_stack()
    # the same Python (a serialized function needs it); nvcc of torch's CUDA for the CUDA backend
    image = modal.Image.from_registry(cuda_image or cuda_image_tag(stack.cuda), add_python=stack.python)
    image = image.pip_install(*stack.torch, extra_index_url=stack.index)  # the big layer, cached on its own
    image = image.pip_install(*stack.rest)
    image = image.env({"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    # okgit's package data (prompts, templates, data) travels too, not only its .py files.
    return image.add_local_python_source("okgit", ignore=["**/__pycache__/**", "**/*.pyc"])


def fingerprint(cuda_image: str | None = None, stack: Stack | None = None) -> str:
    """What the remote code depends on: okgit's source, the pinned versions, Python, the CUDA image."""
    stack = stack or local_stack()
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[2]
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(repr((stack, cuda_image or cuda_image_tag(stack.cuda))).encode())
    return h.hexdigest()[:12]


def function_name(cuda_image: str | None = None, stack: Stack | None = None) -> str:
    return f"evaluate-{fingerprint(cuda_image, stack)}"
