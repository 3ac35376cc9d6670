"""`okgit doctor`: what is installed and usable here. Absent optional things are reported,
never fatal; with `--model`, the exit code says whether that model is usable (see `usable`)."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from okgit.presentation import table

# Environment variables that hold model credentials (names only: values are never shown).
MODEL_KEYS = (
    "OKGIT_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY", "TOGETHER_API_KEY", "GROQ_API_KEY", "MISTRAL_API_KEY", "FIREWORKS_API_KEY",
)

# A two-element Triton kernel run under the interpreter: proves CPU mode works end to end.
_INTERPRETER_PROBE = """
import torch, triton, triton.language as tl
@triton.jit
def double(x, y, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)
x = torch.arange(8, dtype=torch.float32)
y = torch.empty_like(x)
double[(1,)](x, y, 8, B=8)
assert torch.equal(y, x * 2), y
"""


class Check(BaseModel):
    name: str
    ok: bool
    detail: str


def checks(model: str | None = None, api_base: str | None = None) -> list[Check]:
    found = [_python(), *_torch(), _nvcc(), _triton(), _interpreter(), _litellm(), _modal(), *_modal_version(), _model_keys()]
    if model:
        found.append(_ping(model, api_base))
    return found


def usable(found: list[Check]) -> bool:
    """False when a model was asked about and it cannot be used: `doctor --model` exits 1."""
    return all(c.ok for c in found if c.name.startswith("model ") and c.name != "model keys")


def checks_text(found: list[Check]) -> str:
    return table(["CHECK", "", "DETAIL"], [[c.name, "ok" if c.ok else "--", c.detail] for c in found])


def _python() -> Check:
    v = sys.version_info
    return Check(name="python", ok=v >= (3, 10), detail=f"{v.major}.{v.minor}.{v.micro} ({sys.executable})")


def _torch() -> list[Check]:
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - broken installs raise more than ImportError
        return [Check(name="torch", ok=False, detail=f"not importable: {e}"),
                Check(name="cuda gpu", ok=False, detail="needs torch")]
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        gpu = Check(name="cuda gpu", ok=True, detail=", ".join(names))
    else:
        gpu = Check(name="cuda gpu", ok=False, detail="none visible: Triton runs in the interpreter, timings are not claimed")
    return [Check(name="torch", ok=True, detail=torch.__version__), gpu]


def _nvcc() -> Check:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return Check(name="nvcc", ok=False, detail="not on PATH: the cuda backend cannot compile")
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check(name="nvcc", ok=False, detail=f"{nvcc}: {e}")
    release = next((line.strip() for line in out.splitlines() if "release" in line), out.strip()[-80:])
    return Check(name="nvcc", ok=True, detail=f"{release} ({nvcc})")


def _triton() -> Check:
    try:
        return Check(name="triton", ok=True, detail=importlib.metadata.version("triton"))
    except importlib.metadata.PackageNotFoundError:
        return Check(name="triton", ok=False, detail="not installed")


def _interpreter() -> Check:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    try:
        proc = subprocess.run([sys.executable, "-c", _INTERPRETER_PROBE], env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return Check(name="triton interpreter", ok=False, detail="a two-element kernel did not finish in 120 s")
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return Check(name="triton interpreter", ok=False, detail=last)
    return Check(name="triton interpreter", ok=True, detail="a kernel ran on CPU with TRITON_INTERPRET=1")


def _litellm() -> Check:
    try:
        return Check(name="litellm", ok=True, detail=importlib.metadata.version("litellm"))
    except importlib.metadata.PackageNotFoundError:
        return Check(name="litellm", ok=False, detail="not installed: --model needs it (pip install 'okgit[llm]')")


def _modal() -> Check:
    if importlib.util.find_spec("modal") is None:
        return Check(name="modal", ok=False, detail="not installed (pip install 'okgit[modal]' for --eval modal)")
    if os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"):
        return Check(name="modal", ok=True, detail="installed; token from MODAL_TOKEN_ID/MODAL_TOKEN_SECRET")
    if (Path.home() / ".modal.toml").is_file():
        return Check(name="modal", ok=True, detail="installed; token in ~/.modal.toml")
    return Check(name="modal", ok=False, detail="installed, no token (run: modal token new)")


def _modal_version() -> list[Check]:
    """An installed modal older than okgit's floor, named in one line (read from its metadata, not imported)."""
    try:
        version = importlib.metadata.version("modal")
    except importlib.metadata.PackageNotFoundError:
        return []
    from okgit.eval.modal_image import version_problem

    problem = version_problem(version)
    return [Check(name="modal version", ok=problem is None, detail=f"too old: --eval modal needs {problem}" if problem else version)]


def _model_keys() -> Check:
    present = [k for k in MODEL_KEYS if os.environ.get(k)]
    if present:
        return Check(name="model keys", ok=True, detail=", ".join(present))
    return Check(name="model keys", ok=False, detail="none set: without --model the search is offline (templates, then autotune)")


def _ping(model: str, api_base: str | None) -> Check:
    from okgit.llm import ping

    name = f"model {model}"
    try:
        reply = ping(model, api_base=api_base)
    except Exception as e:  # noqa: BLE001 - any provider error is a finding, not a crash
        return Check(name=name, ok=False, detail=" ".join(str(e).split())[:200] or type(e).__name__)
    return Check(name=name, ok=True, detail=str(reply) if reply else "answered")
