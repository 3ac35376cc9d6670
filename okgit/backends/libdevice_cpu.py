"""libdevice's math for Triton's interpreter (CPU mode), in the worker only.

A kernel that calls `libdevice.tanh(x)` (`triton.language.extra.libdevice`, or its CUDA module,
as torch.compile's kernels and most hand-written ones do for tanh, erf, log1p, pow) compiles on a
GPU to the CUDA math library's function. Triton's interpreter has none of it: the portable module
is a stub whose functions return None, the CUDA module's raise ("extern_elementwise not supported
in interpreter mode"), so on a CPU such a candidate failed as a compile error that says nothing of
the kernel. `install` replaces both modules' functions, in this process, with numpy's on the
interpreter's arrays: the same value per element as the GPU's within its last bits (what a CPU
run checks is correctness, never speed). It runs in the worker before any candidate is loaded,
so the entry-points snapshot holds these functions, and a candidate cannot tell the difference.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np


def _per_element(fn: Callable[[float], float]) -> Callable[[np.ndarray], np.ndarray]:
    vectorized = np.vectorize(fn, otypes=[np.float64])
    return lambda x: vectorized(x.astype(np.float64)) if x.size else x.astype(np.float64)


def _erfinv(y: float) -> float:
    if y <= -1.0 or y >= 1.0:
        return math.copysign(math.inf, y) if abs(y) == 1.0 else math.nan
    return statistics.NormalDist().inv_cdf((y + 1.0) / 2.0) / math.sqrt(2.0)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))


# name -> numpy function, returning the argument's float type
_SAME: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh, "fast_tanhf": np.tanh, "log1p": np.log1p, "expm1": np.expm1, "exp": np.exp, "exp2": np.exp2,
    "exp10": lambda x: np.power(10.0, x), "log": np.log, "log2": np.log2, "log10": np.log10, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "cbrt": np.cbrt, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "nearbyint": np.rint, "rint": np.rint, "round": _round_half_away, "abs": np.abs, "fabs": np.abs,
    "erf": _per_element(math.erf), "erfc": _per_element(math.erfc), "lgamma": _per_element(math.lgamma),
    "tgamma": _per_element(math.gamma), "erfinv": _per_element(_erfinv), "rcp": lambda x: 1.0 / x,
}
# name -> (numpy function, what it returns: "same" (the argument's float type), "i32" or "i64")
UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    **{name: (fn, "same") for name, fn in _SAME.items()},
    "isinf": (np.isinf, "i32"), "isnan": (np.isnan, "i32"), "signbit": (np.signbit, "i32"),
    "finitef": (np.isfinite, "i32"), "isfinited": (np.isfinite, "i32"), "llrint": (np.rint, "i64"),
    "llround": (_round_half_away, "i64"),
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "pow": np.power, "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign, "fmod": np.fmod,
    "nextafter": np.nextafter, "fmax": np.fmax, "fmin": np.fmin, "fdim": lambda a, b: np.maximum(a - b, 0.0),
    "ldexp": lambda a, b: np.ldexp(a, b.astype(np.int32)), "remainder": np.remainder,
}


def install() -> list[str]:
    """Give libdevice's functions to Triton's interpreter in this process; the names given."""
    import triton.language as tl

    modules: list[Any] = []
    for name in ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice"):
        try:
            modules.append(__import__(name, fromlist=["_"]))
        except ImportError:
            continue
    given: list[str] = []
    for name, (fn, kind) in UNARY.items():
        given.append(name)
        for module in modules:
            setattr(module, name, _unary(tl, fn, kind))
    for name, fn2 in BINARY.items():
        given.append(name)
        for module in modules:
            setattr(module, name, _binary(tl, fn2))
    return given


def _arrays(tl: Any, *args: Any) -> tuple[list[np.ndarray], Any]:
    """The interpreter's numpy arrays of the arguments (tensors or Python numbers), and the type of
    the first tensor among them (what a float result takes)."""
    arrays, like = [], None
    for a in args:
        if isinstance(a, tl.tensor):
            arrays.append(a.handle.data)
            like = like if like is not None else a
        else:
            arrays.append(np.asarray(getattr(a, "value", a), dtype=np.float32))
    return arrays, like


def _wrap(tl: Any, data: np.ndarray, like: Any, kind: str) -> Any:
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype

    if kind == "i32":
        scalar = tl.int32
    elif kind == "i64":
        scalar = tl.int64
    else:
        scalar = like.dtype.scalar if like is not None else tl.float32
    data = np.asarray(data).astype(_get_np_dtype(scalar))
    shape = list(data.shape)
    ty = tl.block_type(scalar, shape) if shape else scalar
    return tl.tensor(TensorHandle(data, scalar), ty)


def _unary(tl: Any, fn: Callable[[np.ndarray], np.ndarray], kind: str) -> Callable[..., Any]:
    def call(x: Any, _semantic: Any = None) -> Any:
        (data,), like = _arrays(tl, x)
        with np.errstate(all="ignore"):  # inf and nan come out as the GPU's do, silently
            return _wrap(tl, fn(data), like, kind)

    return call


def _binary(tl: Any, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., Any]:
    def call(x: Any, y: Any, _semantic: Any = None) -> Any:
        (a, b), like = _arrays(tl, x, y)
        with np.errstate(all="ignore"):
            return _wrap(tl, fn(a, b), like, "same")

    return call
