"""`okgit doctor`: what is installed and usable here. Absent optional things are reported,
never fatal; with `--model`, the exit code says whether that model is usable (see `usable`).

It answers in seconds: torch is imported only in a child process that runs meanwhile, and
litellm only when a key is there to try (a missing key is told from okgit.llm's table)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from okgit.views.tables import table

# Environment variables that hold model credentials (names only: values are never shown).
MODEL_KEYS = (
    "OKGIT_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY", "TOGETHER_API_KEY", "GROQ_API_KEY", "MISTRAL_API_KEY", "FIREWORKS_API_KEY",
)

# Run in a child process with TRITON_INTERPRET=1: torch's version and GPUs on the first line,
# then a two-element Triton kernel under the interpreter (proves CPU mode works end to end).
# Importing torch takes seconds; the child does it while doctor runs its other checks.
PROBE = """
import json, sys
try:
    import torch
except Exception as e:  # a broken install raises more than ImportError
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
    sys.exit(3)
gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
print(json.dumps({"torch": torch.__version__, "gpus": gpus}), flush=True)
import triton, triton.language as tl
@triton.jit
def double(x, y, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)
x = torch.arange(8, dtype=torch.float32)
y = torch.empty_like(x)
double[(1,)](x, y, 8, B=8)
assert torch.equal(y, x * 2), y
"""
PROBE_TIMEOUT_S = 120


class Check(BaseModel):
    name: str
    ok: bool
    detail: str


def checks(model: str | None = None, api_base: str | None = None) -> list[Check]:
    probe = subprocess.Popen([sys.executable, "-c", PROBE], env={**os.environ, "TRITON_INTERPRET": "1"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    nvcc, ncu, triton, litellm, modal, keys = _nvcc(), _ncu(), _triton(), _litellm(), _modal(), _model_keys()
    ping = _ping(model, api_base) if model else None  # a missing key is told without litellm
    torch_checks, interpreter = _probe_result(probe)
    return [_python(), *torch_checks, nvcc, ncu, triton, interpreter, litellm, modal, *_modal_version(), keys,
            *([ping] if ping else [])]


def usable(found: list[Check]) -> bool:
    """False when a model was asked about and it cannot be used: `doctor --model` exits 1."""
    return all(c.ok for c in found if c.name.startswith("model ") and c.name != "model keys")


def checks_text(found: list[Check]) -> str:
    return table(["CHECK", "", "DETAIL"], [[c.name, "ok" if c.ok else "--", c.detail] for c in found])


def _python() -> Check:
    v = sys.version_info
    return Check(name="python", ok=v >= (3, 10), detail=f"{v.major}.{v.minor}.{v.micro} ({sys.executable})")


def _probe_result(probe: subprocess.Popen[str]) -> tuple[list[Check], Check]:
    """torch, cuda gpu and triton interpreter, from the probe's output."""
    try:
        out, err = probe.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        probe.kill()
        out, err = probe.communicate()
        failed = f"did not finish in {PROBE_TIMEOUT_S} s"
    else:
        failed = "" if probe.returncode == 0 else (err.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
    try:
        found = json.loads(out.splitlines()[0])
    except (IndexError, ValueError):
        found = {"error": failed or "no answer"}
    if "torch" not in found:
        return ([Check(name="torch", ok=False, detail=f"not importable: {found.get('error')}"),
                 Check(name="cuda gpu", ok=False, detail="needs torch")],
                Check(name="triton interpreter", ok=False, detail="needs torch"))
    gpus = found.get("gpus") or []
    gpu = (Check(name="cuda gpu", ok=True, detail=", ".join(gpus)) if gpus else
           Check(name="cuda gpu", ok=False, detail="none visible: Triton runs in the interpreter, timings are not claimed"))
    interpreter = (Check(name="triton interpreter", ok=False, detail=failed) if failed else
                   Check(name="triton interpreter", ok=True, detail="a kernel ran on CPU with TRITON_INTERPRET=1"))
    return [Check(name="torch", ok=True, detail=str(found["torch"])), gpu], interpreter


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


def _ncu() -> Check:
    """Nsight Compute, the profiling pass's hardware counters (docs/evaluation.md, "Profiles")."""
    from okgit.eval.parent.ncu import find

    found = find()
    if not found:
        return Check(name="ncu", ok=False, detail="not found: the profiling pass reads stalls with Proton only")
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check(name="ncu", ok=False, detail=f"{found}: {e}")
    version = next((line.strip() for line in out.splitlines() if "Version" in line), "version unknown")
    return Check(name="ncu", ok=True, detail=f"{version} ({found}); whether the driver lets it read counters is "
                                             "told at a run's first profiling pass")


def _triton() -> Check:
    try:
        return Check(name="triton", ok=True, detail=importlib.metadata.version("triton"))
    except importlib.metadata.PackageNotFoundError:
        return Check(name="triton", ok=False, detail="not installed")


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
    from okgit.eval.modal.image import version_problem

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
        detail = " ".join(str(e).split()).removeprefix(f"{name}: ")  # the row already names the model
        return Check(name=name, ok=False, detail=detail[:200] or type(e).__name__)
    return Check(name=name, ok=True, detail=reply)
