"""Floating-point math ops, evaluated in fp32 (fp64 for fp64) and rounded to the type."""
from __future__ import annotations

import math

import numpy as np

from .convert import float_op, narrow_float

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SERIES_TERMS = 90       # enough for |x| < 3 to reach double precision
_FRACTION_DEPTH = 60     # continued fraction depth for erfc at |x| >= 3


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 to ~1e-15, vectorized: a positive-term series below 3, the
    continued fraction of erfc above (no cancellation in either)."""
    x = np.asarray(x, np.float64)
    ax = np.abs(x)
    near = np.minimum(ax, 3.0)
    # erf(x) = 2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) / (1*3*...*(2n+1))
    term = near.copy()
    total = near.copy()
    twice_sq = 2.0 * near * near
    for n in range(1, _SERIES_TERMS):
        term = term * twice_sq / (2 * n + 1)
        total = total + term
    series = _TWO_OVER_SQRT_PI * np.exp(-near * near) * total
    tail = 1.0 - erf_tail(np.maximum(ax, 3.0))
    value = np.where(ax < 3.0, series, tail)
    return np.where(np.isnan(x), np.nan, np.copysign(value, x))


def erf_tail(x: np.ndarray) -> np.ndarray:
    """erfc(x) for x >= 3 by its continued fraction:
    erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))"""
    denominator = x.copy()
    for k in range(_FRACTION_DEPTH, 0, -1):
        denominator = x + (k / 2.0) / denominator
    return np.exp(-x * x) / math.sqrt(math.pi) / denominator


def round_half_away(x: np.ndarray) -> np.ndarray:
    """libdevice's round(): halfway cases away from zero (np.round rounds to even)."""
    whole = np.trunc(x)
    return np.where(np.abs(x - whole) >= 0.5, whole + np.sign(x), whole)


def _rsqrt(x):
    return np.ones_like(x) / np.sqrt(x)


FLOAT_UNARY = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log1p": np.log1p,
    "sqrt": np.sqrt, "sqrt_rn": np.sqrt, "rsqrt": _rsqrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "erf": erf,
    "floor": np.floor, "ceil": np.ceil, "round": round_half_away, "trunc": np.trunc,
    "expm1": np.expm1, "exp10": lambda x: np.power(10.0, x), "log10": np.log10, "cbrt": np.cbrt,
    "rint": np.rint, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
}


def unary(ctx, op, x):
    return float_op(FLOAT_UNARY[op.name], x.dtype, x)


def isnan(ctx, op, x):
    return np.isnan(x.astype(np.float32) if x.dtype.itemsize < 4 else x)


def isinf(ctx, op, x):
    return np.isinf(x.astype(np.float32) if x.dtype.itemsize < 4 else x)


def isfinite(ctx, op, x):
    return np.isfinite(x.astype(np.float32) if x.dtype.itemsize < 4 else x)


def signbit(ctx, op, x):
    return np.signbit(x.astype(np.float32) if x.dtype.itemsize < 4 else x)


def fma(ctx, op, a, b, c):
    """a * b + c rounded once. For fp32 and smaller the product is exact in fp64 and the
    sum is rounded to odd there, so the final rounding is the only one that counts.
    fp64 has no wider NumPy type: it is multiply-then-add there."""
    if a.dtype == np.float64:
        return a * b + c
    p = np.asarray(a).astype(np.float64) * np.asarray(b).astype(np.float64)
    c = np.asarray(c).astype(np.float64)
    s = p + c
    # TwoSum: the exact error of the fp64 sum.
    pb = s - p
    err = (p - (s - pb)) + (c - pb)
    inexact = (err != 0) & np.isfinite(err)
    bits = s.view(np.uint64)
    overshoot = inexact & ((err < 0) != (s < 0))  # |s| above the exact sum: truncate
    bits = np.where(overshoot, bits - np.uint64(1), bits)
    bits = np.where(inexact, bits | np.uint64(1), bits).astype(np.uint64)
    return narrow_float(bits.view(np.float64), a.dtype)
