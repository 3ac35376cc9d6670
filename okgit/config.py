"""Settings: okgit.toml (or [tool.okgit] in pyproject.toml), then OKGIT_* variables, then flags.

Later sources win. Unknown keys and bad values are errors naming the key and where it came from.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from okgit.errors import OkgitError, UsageError
from okgit.registry import Registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


# The choices of the run settings, read by the CLI's flags too (one list each).
BACKENDS = ("triton", "cuda")
Mode = Literal["fast", "thorough"]  # the evaluator's too (okgit.eval.types)
MODES: tuple[Mode, ...] = get_args(Mode)
DEVICES = ("cuda", "cpu")
EDIT_MODES = ("whole", "patch")
# the profiling pass's tools (docs/evaluation.md, "Profiles"): auto = Nsight Compute where it runs,
# else Proton; all = both; off = torch.profiler's kernel times and the roofline only
PROFILERS = ("auto", "ncu", "proton", "all", "off")
# Where candidates run (`--eval`): the built-ins register in okgit.eval.registry, read the first
# time the registry is; a plugin through the entry-point group.
EVALUATORS: Registry[Callable[..., Any]] = Registry("evaluator", "okgit.evaluators", builtins="okgit.eval.registry")
# The settings `okgit optimize` takes as flags; `okgit bench kernelbench` passes them through.
RUN_FLAGS = ("backend", "model", "api_base", "mode", "iterations", "budget_usd", "eval", "device", "edit_mode", "modal_gpu",
             "profiler")


class OpConfig(BaseModel):
    """Settings for one op file of the repository (`[[op]]` in okgit.toml).

    Listing an op also tells CI which ops to optimize (docs/ci.md).
    """

    model_config = ConfigDict(extra="forbid")

    path: str  # repository-relative
    atol: float | None = Field(default=None, gt=0)  # replace the per-dtype tolerance rules
    rtol: float | None = Field(default=None, ge=0)
    extra_shapes: list[dict[str, int]] | None = None  # knob settings checked besides the defaults


class SearchSettings(BaseModel):
    """The model-driven search's loops and spend (`[search]` in okgit.toml); docs/models.md
    says what each one bounds and costs."""

    model_config = ConfigDict(extra="forbid")

    compile_retries: int = Field(default=3, ge=0)  # repairs of compile and runtime errors within one attempt
    mismatch_retries: int = Field(default=3, ge=0)  # repairs of wrong outputs and gate rejections within one attempt
    attempts_per_intent: int = Field(default=5, ge=1)  # K: attempts (an implementation and its repairs) per intent
    failed_attempts: int = Field(default=2, ge=1)  # failed attempts in a row that prune an intent
    intent_patience: int = Field(default=2, ge=1)  # attempts in a row without progress that retire an intent
    plan_rounds: int = Field(default=8, ge=0)  # planning calls: one at the start, one each time an intent ends
    intents_per_round: int = Field(default=4, ge=1)
    max_calls: int | None = Field(default=None, ge=1)  # model calls in a run; None: 4 per iteration
    max_tokens: int = Field(default=16384, ge=256)  # per reply; a reply cut off there is unusable
    call_timeout_s: float = Field(default=300.0, gt=0)  # one call's limit; a retry after a timeout gets half
    max_wait_s: float = Field(default=900.0, gt=0)  # one call with all its retries
    concurrent_calls: int = Field(default=4, ge=1)  # model calls at once for a batch of intents


DEFAULT_ITERATIONS = 12  # without a model: templates and autotune
DEFAULT_MODEL_ITERATIONS = 30  # with one: room for two intents' K attempts with their repairs


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal[BACKENDS] = "triton"  # type: ignore[valid-type]
    model: str | None = None  # a litellm model string, or replay:PATH; None = offline templates
    api_base: str | None = None
    mode: Mode = "fast"
    iterations: int | None = Field(default=None, ge=1)  # None: DEFAULT_ITERATIONS, or DEFAULT_MODEL_ITERATIONS with a model
    budget_usd: float | None = Field(default=None, ge=0)
    time_budget_s: float | None = Field(default=None, gt=0)
    reference_timeout_s: float | None = Field(default=None, gt=0)  # the reference's preparation; None: 600 s CPU, 360 s GPU
    patience: int = Field(default=6, ge=1)  # correct candidates in a row that set no new best (okgit.search.driver)
    target_speedup: float | None = Field(default=None, gt=0)
    eval: str = "local"  # a name in EVALUATORS
    device: Literal[DEVICES] | None = None  # type: ignore[valid-type]  # None: cuda when a GPU is visible
    edit_mode: Literal[EDIT_MODES] = "whole"  # type: ignore[valid-type]
    inductor: bool | None = None  # the torch.compile seed; None: on unless the run is on a CPU
    profiler: Literal[PROFILERS] = "auto"  # type: ignore[valid-type]
    modal_gpu: str = "H100"
    modal_usd_per_s: float | None = Field(default=None, ge=0)  # a GPU-second on Modal; None: okgit.eval.modal.GPU_USD_PER_S
    skills_path: str | None = None
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)  # model -> input/output $ per token
    search: SearchSettings = Field(default_factory=SearchSettings)
    # Each model call's prompt and reply kept in the run's traces.jsonl (local, never sent anywhere);
    # false keeps only its size, cost and outcome: nothing of the op's source or the model's code.
    record_prompts: bool = True
    op: list[OpConfig] = Field(default_factory=list)

    @field_validator("eval")
    @classmethod
    def _known_evaluator(cls, value: str) -> str:
        # Checked against the registry when validated, so an evaluator a plugin registers counts.
        names = EVALUATORS.names()
        if value not in names:
            expected = " or ".join(filter(None, (", ".join(map(repr, names[:-1])), repr(names[-1]))))
            raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
        return value

    @property
    def iteration_budget(self) -> int:
        if self.iterations is not None:
            return self.iterations
        return DEFAULT_MODEL_ITERATIONS if self.model else DEFAULT_ITERATIONS

    def problem_settings(self, rel: str) -> dict[str, Any]:
        """Problem fields (tolerances, extra shapes) that okgit.toml sets for the op at `rel`."""
        for op in self.op:
            if op.path.strip("/") == rel:
                shapes = tuple(tuple(sorted(s.items())) for s in op.extra_shapes) if op.extra_shapes is not None else None
                return {"atol": op.atol, "rtol": op.rtol, "extra_shapes": shapes}
        return {}


ENV_PREFIX = "OKGIT_"
_ENV_SKIP = {"OKGIT_API_KEY", "OKGIT_DATA_DIR", "OKGIT_DEBUG", "OKGIT_DEVICE_LEDGER", "OKGIT_STAGE_WALLS"}  # read where they are used


def file_settings(root: Path) -> tuple[dict[str, Any], str | None]:
    """Settings from okgit.toml, else [tool.okgit] of pyproject.toml, and the file's name."""
    for name, table in (("okgit.toml", None), ("pyproject.toml", ("tool", "okgit"))):
        path = root / name
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise OkgitError(f"{path}: invalid TOML: {e}") from None
        for key in table or ():
            data = data.get(key, {})
        if data or table is None:
            return data, str(path)
    return {}, None


def env_settings(environ: dict[str, str] | None = None) -> dict[str, Any]:
    source = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for key, value in source.items():
        if key.startswith(ENV_PREFIX) and key not in _ENV_SKIP:
            out[key[len(ENV_PREFIX):].lower()] = value
    return out


def load_config(root: Path | None, flags: dict[str, Any] | None = None, environ: dict[str, str] | None = None) -> Config:
    data, source = file_settings(root) if root else ({}, None)
    _validate(data, source or "defaults")
    env = env_settings(environ)
    _validate({**data, **env}, "environment (OKGIT_*)")
    merged = {**data, **env, **{k: v for k, v in (flags or {}).items() if v is not None}}
    return _validate(merged, "flags")


def _validate(data: dict[str, Any], source: str) -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        what = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        if source == "flags":  # file and environment passed alone: the flag is at fault, a usage error (exit 2)
            raise UsageError(f"--{key.replace('_', '-')} {err.get('input')}: {what[:1].lower()}{what[1:]}") from None
        raise OkgitError(f"{source}: {key}: {what}") from None
