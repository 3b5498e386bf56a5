"""The libdevice ops without a NumPy counterpart: explicitly rounded arithmetic and
conversions (rounding.py), Bessel functions (bessel.py), and a few more, each computed in
fp64 and rounded once to the result type."""
from __future__ import annotations

import math

import numpy as np

from . import bessel, rounding
from .convert import np_dtype
from .specialfns import erfc

_ROUNDED = {"add_r": rounding.add, "mul_r": rounding.mul, "div_r": rounding.div,
            "fma_r": rounding.fma, "sqrt_r": rounding.sqrt}
_FRACTION_DEPTH = 60


def rounded(ctx, op, *xs):
    return np.asarray(_ROUNDED[op.name](*(np.asarray(x) for x in xs), op.attrs["rounding"]))


def cvt_r(ctx, op, x):
    return np.asarray(rounding.convert(x, np_dtype(op.results[0].type), op.attrs["rounding"]))


def rsqrt_rn(ctx, op, x):
    return np.asarray(rounding.rsqrt_rn(np.asarray(x)))


def erfcx(x):
    """exp(x*x) erfc(x): directly below 3; above, the continued fraction of erfc without
    its exp(-x*x) factor, so large x neither underflows nor overflows."""
    x = np.asarray(x, np.float64)
    near = np.minimum(x, 3.0)
    with np.errstate(over="ignore"):
        direct = np.exp(near * near) * erfc(near)
    far = np.where(np.isnan(x), 3.0, np.maximum(x, 3.0))
    denominator = far.copy()
    for k in range(_FRACTION_DEPTH, 0, -1):
        denominator = far + (k / 2.0) / denominator
    return np.where(np.isnan(x), np.nan, np.where(x < 3.0, direct, 1.0 / math.sqrt(math.pi) / denominator))


def norm(*xs):
    """sqrt of the sum of squares, scaled by the largest magnitude (no overflow in between);
    an infinite operand gives inf even beside a NaN."""
    xs = [np.abs(np.asarray(x, np.float64)) for x in xs]
    largest = np.maximum.reduce(xs)
    scale = np.where((largest > 0) & np.isfinite(largest), largest, 1.0)
    value = scale * np.sqrt(sum((x / scale) ** 2 for x in xs))
    return np.where(np.logical_or.reduce([np.isinf(x) for x in xs]), np.inf, value)


def _reciprocal_norm(*xs):
    with np.errstate(divide="ignore"):
        return 1.0 / norm(*xs)


def rcp64h(x):
    """PTX rcp.approx.ftz.f64: the reciprocal of x's high 32 bits, kept to its high 32 bits
    (the hardware's low-order bits of the 20-bit mantissa may differ)."""
    high_only = np.uint64(0xFFFFFFFF00000000)
    x = (np.asarray(x, np.float64).view(np.uint64) & high_only).view(np.float64)
    with np.errstate(divide="ignore"):
        y = 1.0 / x
    y = np.where(np.abs(y) < np.finfo(np.float64).tiny, np.copysign(0.0, y), y)  # flush subnormals
    return (y.view(np.uint64) & high_only).view(np.float64)


SPECIAL = {
    "rcbrt": lambda x: 1.0 / np.cbrt(np.asarray(x, np.float64)), "erfcx": erfcx, "rcp64h": rcp64h,
    "norm3d": norm, "norm4d": norm, "rnorm3d": _reciprocal_norm, "rnorm4d": _reciprocal_norm,
    "j0": lambda x: bessel.bessel_j(0, x), "j1": lambda x: bessel.bessel_j(1, x),
    "y0": lambda x: bessel.bessel_y(0, x), "y1": lambda x: bessel.bessel_y(1, x),
    "cyl_bessel_i0": bessel.bessel_i0, "cyl_bessel_i1": bessel.bessel_i1,
}


def special(ctx, op, *xs):
    """A function of floats evaluated in fp64 and rounded once to the result type."""
    out = np_dtype(op.results[0].type)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.asarray(SPECIAL[op.name](*xs)).astype(out)


def bessel_of_order(ctx, op, n, x):
    out = np_dtype(op.results[0].type)
    fn = bessel.bessel_j if op.name == "jn" else bessel.bessel_y
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.asarray(fn(np.asarray(n), np.asarray(x))).astype(out)
