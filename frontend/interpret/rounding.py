"""libdevice's arithmetic and conversions with an explicit IEEE rounding (rn, rz, rd, ru).

Each op first finds the round-to-nearest result `y` and the exact sign of `y - exact`
(its "excess"), then steps `y` one ulp where the rounding direction asks for it. fp32
values are computed exactly in fp64 (products exactly, sums as an error-free TwoSum pair,
quotients and roots checked by an exact back-multiplication). fp64 uses error-free
transformations on exponent-scaled mantissas, so products, quotients and roots are exact
over the whole range; fp64 fma is exact where a*b's rounding error is itself a normal
fp64 number (|a*b| above about 2^-969), which covers all but deep-underflow products.
"""
from __future__ import annotations

import numpy as np

_SPLITTER = 134217729.0  # 2^27 + 1: Veltkamp's split of a double into two 26-bit halves


def two_sum(a, b):
    """s = fl(a + b) and the exact error a + b - s (NaN where s overflowed)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    c = a * _SPLITTER
    hi = c - (c - a)
    return hi, a - hi


def two_product(a, b):
    """p = fl(a * b) and the exact error a * b - p (for mid-range magnitudes)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _sign(x):
    return np.sign(x)  # NaN stays NaN: no step


def step(y, excess, rounding):
    """Move the round-to-nearest `y` one ulp where `rounding` needs it; `excess` is the
    sign of y - exact (NaN or 0 where y is exact or has no exact value)."""
    if rounding == "rn":
        return y
    with np.errstate(invalid="ignore"):  # NaN excesses and NaN results compare false: no step
        if rounding == "rd":
            move, target = excess > 0, -np.inf
        elif rounding == "ru":
            move, target = excess < 0, np.inf
        else:  # rz: only where rounding to nearest went away from zero
            move, target = ((excess > 0) & (y > 0)) | ((excess < 0) & (y < 0)), 0.0
        return np.where(move, np.nextafter(y, y.dtype.type(target)), y)


def _round_to_odd(s, err):
    """s (fp64) with its last bit forced to 1 where s + err is inexact and s is above it in
    magnitude stepped back first: narrowing this to fp32 rounds like the exact value."""
    inexact = (err != 0) & np.isfinite(err)
    bits = s.view(np.uint64)
    bits = np.where(inexact & ((err < 0) != (s < 0)), bits - np.uint64(1), bits)
    return np.where(inexact, bits | np.uint64(1), bits).astype(np.uint64).view(np.float64)


def _pair_to_fp32(s, err, rounding):
    """The fp32 result of exact value s + err (s = fl64 of it), rounded as asked."""
    y = _round_to_odd(s, err).astype(np.float32)
    y64 = y.astype(np.float64)
    with np.errstate(invalid="ignore"):
        excess = np.where(y64 != s, _sign(y64 - s), -_sign(err))
    return step(y, excess, rounding)


def _overflow_excess(y, excess, *operands):
    """Finite operands whose result overflowed to inf: the exact value lies below it."""
    finite = np.logical_and.reduce([np.isfinite(x) for x in operands])
    return np.where(finite & np.isinf(y), _sign(y), excess)


def _zero_sum_sign(y, exact_zero, a, b, rounding):
    """IEEE: an exact zero sum of x and -x is +0, except -0 when rounding down; two zeros
    of one sign keep it."""
    if rounding != "rd":
        return y
    both_plus_zero = (a == 0) & (b == 0) & ~np.signbit(a) & ~np.signbit(b)
    negative_zero = y.dtype.type(-0.0)
    return np.where(exact_zero & (y == 0) & ~both_plus_zero, negative_zero, y)


def _wide(*xs):
    return [np.asarray(x).astype(np.float64) for x in xs]


def add(a, b, rounding):
    a64, b64 = _wide(a, b)
    s, err = two_sum(a64, b64)
    if a.dtype == np.float64:
        excess = _overflow_excess(s, -_sign(err), a, b)
        y = step(s, excess, rounding)
    else:
        y = _pair_to_fp32(s, err, rounding)
    return _zero_sum_sign(y, (s == 0) & (err == 0), a, b, rounding)


def mul(a, b, rounding):
    a64, b64 = _wide(a, b)
    if a.dtype != np.float64:
        return _pair_to_fp32(a64 * b64, np.zeros_like(a64), rounding)  # 48-bit products are exact
    ma, ea = np.frexp(a64)
    mb, eb = np.frexp(b64)
    pm, err = two_product(ma, mb)
    y = a64 * b64
    ym = np.ldexp(y, -(ea + eb))  # exact: y scaled back next to pm
    excess = np.where(ym != pm, _sign(ym - pm), -_sign(err))
    ok = np.isfinite(a64) & np.isfinite(b64)
    return step(y, np.where(ok, excess, 0.0), rounding)


def div(a, b, rounding):
    a64, b64 = _wide(a, b)
    ok = np.isfinite(a64) & np.isfinite(b64) & (b64 != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        if a.dtype != np.float64:
            q = a64 / b64
            y = q.astype(np.float32)
            y64 = y.astype(np.float64)
            # where y equals the fp64 quotient, y * b is exact (two 24-bit factors)
            excess = np.where(y64 != q, _sign(y64 - q), _sign(y64 * b64 - a64) * _sign(b64))
            return step(y, np.where(ok, excess, 0.0), rounding)
        ma, ea = np.frexp(a64)
        mb, eb = np.frexp(b64)
        q = ma / mb
        p, err = two_product(q, mb)
        remainder = (ma - p) - err  # exact: ma - q * mb is representable
        y = a64 / b64
        yq = np.ldexp(y, -(ea - eb))
        excess = np.where(yq != q, _sign(yq - q), -_sign(remainder) * _sign(mb))
    excess = np.where(ok & np.isinf(y), _sign(y), excess)  # overflow, not a division by zero
    return step(y, np.where(ok, excess, 0.0), rounding)


def sqrt(a, rounding):
    (a64,) = _wide(a)
    ok = np.isfinite(a64) & (a64 > 0)
    with np.errstate(invalid="ignore"):
        if a.dtype != np.float64:
            y = np.sqrt(a64).astype(np.float32)
            y64 = y.astype(np.float64)
            s = np.sqrt(a64)
            excess = np.where(y64 != s, _sign(y64 - s), _sign(y64 * y64 - a64))
            return step(y, np.where(ok, excess, 0.0), rounding)
        m, e = np.frexp(a64)
        odd = (e % 2) == 1
        m, e = np.where(odd, m * 2, m), np.where(odd, e - 1, e)  # even exponent: sqrt scales exactly
        s = np.sqrt(m)
        p, err = two_product(s, s)
        residual = (m - p) - err
        y = np.sqrt(a64)
    return step(y, np.where(ok, -_sign(residual), 0.0), rounding)


def fma(a, b, c, rounding):
    a64, b64, c64 = _wide(a, b, c)
    with np.errstate(invalid="ignore", over="ignore"):
        if a.dtype != np.float64:
            p = a64 * b64  # exact
            s, err = two_sum(p, c64)
            y = _pair_to_fp32(s, err, rounding)
            return _zero_sum_sign(y, (s == 0) & (err == 0), p, c64, rounding)
        p, e = two_product(a64, b64)
        s, t = two_sum(p, c64)       # exact = s + t + e
        h, low = two_sum(t, e)       # exact = s + h + low
        y0, g = two_sum(s, h)        # exact = y0 + g + low, |g| <= ulp(y0) / 2
        gl, gl_err = two_sum(g, low)
        y = y0 + _round_to_odd(gl, gl_err)
        excess = _sign(((y - y0) - g) - low)
    ok = np.isfinite(a64) & np.isfinite(b64) & np.isfinite(c64) & np.isfinite(y) & np.isfinite(excess)
    ref = a64 * b64 + c64
    y = np.where(ok, y, ref)
    excess = _overflow_excess(y, np.where(ok, excess, 0.0), a64, b64, c64)
    out = step(y, excess, rounding)
    return _zero_sum_sign(out, (out == 0) & (excess == 0), a64 * b64, c64, rounding)


def rsqrt_rn(a):
    """1/sqrt(a) correctly rounded to fp32: the fp64 guess, checked against the midpoints
    to its neighbours with an exact m*m*a versus 1 (m*m is exact, the last product by TwoProduct)."""
    (a64,) = _wide(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = (1.0 / np.sqrt(a64)).astype(np.float32)
        ok = np.isfinite(a64) & (a64 > 0)
        y64 = y.astype(np.float64)
        for neighbour_dir, below in ((np.inf, True), (-np.inf, False)):
            mid = (y64 + np.nextafter(y, np.float32(neighbour_dir)).astype(np.float64)) / 2
            p, e = two_product(mid * mid, a64)
            side = np.where(p != 1.0, _sign(p - 1.0), _sign(e))  # sign of mid^2 a - 1
            past = ok & ((side < 0) if below else (side > 0))   # exact beyond this midpoint
            y = np.where(past, np.nextafter(y, np.float32(neighbour_dir)), y)
    return y


def convert(x, out: np.dtype, rounding):
    """A number (float or integer) to float type `out`, rounded as asked."""
    x = np.asarray(x)
    y = x.astype(out)
    if x.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            excess = _sign(y.astype(np.float64) - x.astype(np.float64))
        return step(y, excess, rounding)
    # an integer: compare y with x exactly as integers (y is integral wherever inexact)
    limit = 2.0 ** (8 * x.dtype.itemsize - (1 if x.dtype.kind == "i" else 0))
    beyond = y.astype(np.float64) >= limit
    yi = np.where(beyond, 0, y).astype(x.dtype)
    excess = np.where(beyond, 1, (yi > x).astype(np.int8) - (yi < x).astype(np.int8))
    return step(y, excess, rounding)
