"""Special functions of libdevice that NumPy lacks, vectorized in float64.

NumPy has no erfc, erfinv, lgamma or tgamma, and kiln does not depend on SciPy, so they
are computed here to about float64 precision (far below the fp32 results' rounding).
"""
from __future__ import annotations

import math

import numpy as np

from .convert import float_op
from .mathfns import erf, erf_tail

# Lanczos approximation, g = 7, nine terms (accurate to ~1e-15 for x >= 0.5)
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61503916999185, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _log_gamma_right(x: np.ndarray) -> np.ndarray:
    """log(gamma(x)) for x >= 0.5."""
    z = x - 1.0
    series = np.full_like(z, _LANCZOS[0])
    for k, c in enumerate(_LANCZOS[1:], start=1):
        series = series + c / (z + k)
    t = z + _LANCZOS_G + 0.5
    return _HALF_LOG_2PI + (z + 0.5) * np.log(t) - t + np.log(series)


def lgamma(x: np.ndarray) -> np.ndarray:
    """log|gamma(x)|; +inf at the poles 0, -1, -2, ..."""
    x = np.asarray(x, np.float64)
    right = _log_gamma_right(np.maximum(x, 0.5))
    # reflection: gamma(x) gamma(1-x) = pi / sin(pi x)
    left_x = np.minimum(x, 0.5)
    sin_pi = np.abs(np.sin(np.pi * (left_x - 2.0 * np.floor(left_x / 2.0))))
    left = math.log(math.pi) - np.log(sin_pi) - _log_gamma_right(1.0 - left_x)
    out = np.where(x >= 0.5, right, left)
    pole = (x <= 0) & (x == np.floor(x))
    out = np.where(pole | np.isinf(x), np.inf, out)
    return np.where(np.isnan(x), np.nan, out)


def tgamma(x: np.ndarray) -> np.ndarray:
    """gamma(x): NaN at the negative poles, +-inf at +-0."""
    x = np.asarray(x, np.float64)
    magnitude = np.exp(lgamma(x))
    negative_odd = (x < 0) & (np.floor(x) % 2 == 1)  # gamma < 0 on (-1, 0), (-3, -2), ...
    out = np.where(negative_odd, -magnitude, magnitude)
    out = np.where((x < 0) & (x == np.floor(x)), np.nan, out)
    out = np.where(x == 0, np.copysign(np.inf, x), out)
    return np.where(x == -np.inf, np.nan, out)


def erfc(x: np.ndarray) -> np.ndarray:
    """1 - erf(x) without the cancellation for large x."""
    x = np.asarray(x, np.float64)
    return np.where(x < 3.0, 1.0 - erf(x), erf_tail(np.maximum(x, 3.0)))


def erfinv(y: np.ndarray) -> np.ndarray:
    """The inverse of erf on [-1, 1]: a rational first guess, then Newton steps on erf."""
    y = np.asarray(y, np.float64)
    inside = np.clip(y, -1.0 + 1e-300, 1.0 - 1e-16)
    # Winitzki's approximation (relative error ~2e-3) as the starting point
    a = 0.147
    ln = np.log1p(-inside * inside)
    first = 2.0 / (np.pi * a) + ln / 2.0
    x = np.copysign(np.sqrt(np.sqrt(first * first - ln / a) - first), inside)
    for _ in range(4):
        x = x - (erf(x) - inside) / (2.0 / math.sqrt(math.pi) * np.exp(-x * x))
    x = np.where(np.abs(y) == 1.0, np.copysign(np.inf, y), x)
    return np.where((np.abs(y) > 1.0) | np.isnan(y), np.nan, x)


SPECIAL_UNARY = {"erfc": erfc, "erfinv": erfinv, "lgamma": lgamma, "tgamma": tgamma}


def unary(ctx, op, x):
    return float_op(SPECIAL_UNARY[op.name], x.dtype, x)
