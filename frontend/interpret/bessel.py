"""Bessel functions of libdevice (j0, j1, jn, y0, y1, yn, cyl_bessel_i0/i1), vectorized in fp64.

NumPy has no J or Y. Below |x| = 25, J_0..J_N come from Miller's backward recurrence
normalized by J_0 + 2 (J_2 + J_4 + ...) = 1, and Y_0, Y_1 from Neumann's series over those
J_2k; from 25 up, Hankel's asymptotic expansion (30 terms, whose smallest term is below
1e-19 there). Y_n and, where n <= x, J_n then follow by forward recurrence (stable there).
The absolute error is about 1e-15 times the function's scale, so fp32 results are correctly
rounded or one ulp off (relative error under 1e-7, also next to the zeros, since no fp32
input lies within 1e-8 of one); fp64 results carry a relative error of about 1e-14, larger
only next to a zero, where any fixed absolute error is large relative to the value. jn's
Miller recurrence starts above max(n, x), so its cost grows with the order.

I_0 and I_1: their power series (positive terms, no cancellation) below 30, the
asymptotic expansion above (exp folded in, so results stay finite up to the overflow
threshold), to about 1e-13 relative.
"""
from __future__ import annotations

import math

import numpy as np

_EULER_GAMMA = 0.5772156649015329
_ASYMPTOTIC_FROM = 25.0
_ASYMPTOTIC_TERMS = 30
_MILLER_MARGIN = 40


def _hankel_series(x, order, alternate):
    """P and Q of Hankel's expansion for order 0 or 1 (`alternate` for J/Y, else the I sum)."""
    mu = 4.0 * order * order
    p, q = np.zeros_like(x), np.zeros_like(x)
    term = np.ones_like(x)
    for k in range(_ASYMPTOTIC_TERMS):
        if k:
            term = term * (mu - (2 * k - 1) ** 2) / (8.0 * k * x)
        sign = (-1.0) ** (k // 2) if alternate else (-1.0) ** k
        if k % 2 == 0:
            p = p + sign * term
        else:
            q = q + sign * term
    return p, q


def _large_jy(x, order):
    """J and Y of order 0 or 1 for x >= 25 (Hankel)."""
    p, q = _hankel_series(x, order, alternate=True)
    s, c = np.sin(x), np.cos(x)
    # omega = x - pi/4 - order*pi/2, expanded so that the large x is never rounded with pi
    cos_w, sin_w = ((c + s), (s - c)) if order == 0 else ((s - c), -(s + c))
    scale = np.sqrt(2.0 / (np.pi * x)) / math.sqrt(2.0)
    return scale * (p * cos_w - q * sin_w), scale * (p * sin_w + q * cos_w)


def _miller(x, top):
    """J_0..J_top at 0 < x < 25 (rows of the result), by backward recurrence from above top."""
    n = int(max(top, math.ceil(float(np.max(x, initial=0.0))))) + _MILLER_MARGIN
    n += n % 2
    j = np.zeros((n + 2,) + x.shape)
    j[n] = 1e-30
    for k in range(n, 0, -1):
        # rescale a column before its next step could overflow (tiny x grows by 2k/x a step)
        limit = 1e280 * x / (2 * k)
        big = np.abs(j[k]) > limit
        if big.any():
            j[:, big] *= (1e-20 * limit[big]) / np.abs(j[k][big])
        j[k - 1] = (2 * k / x) * j[k] - j[k + 1]
    norm = j[0] + 2 * j[2:n + 1:2].sum(axis=0)
    return j[:n + 1] / norm


def _neumann_y(x, j):
    """Y_0 and Y_1 from J_0..J_N by Neumann's series (and its derivative)."""
    log_term = np.log(x / 2) + _EULER_GAMMA
    y0_sum, y1_sum = np.zeros_like(x), np.zeros_like(x)
    for k in range(1, (len(j) - 2) // 2 + 1):
        sign = 1.0 if k % 2 else -1.0
        y0_sum = y0_sum + sign * j[2 * k] / k
        y1_sum = y1_sum + sign * (j[2 * k - 1] - j[2 * k + 1]) / k
    y0 = (2 / np.pi) * (log_term * j[0] + 2 * y0_sum)
    y1 = (2 / np.pi) * (log_term * j[1] - j[0] / x) - (2 / np.pi) * y1_sum
    return y0, y1


def _forward(n, f0, f1, x, top):
    """F_n from F_0 and F_1 by F_(k+1) = (2k/x) F_k - F_(k-1), per element's own n."""
    out = np.where(n == 0, f0, f1)
    prev, cur = f0, f1
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(1, top):
            prev, cur = cur, (2 * k / x) * cur - prev
            out = np.where(n == k + 1, cur, out)
    return out


def _bessel_jy(n, x):
    """J_n(x) and Y_n(x) for int n >= 0 and finite x > 0, all of one shape."""
    top = int(np.max(n, initial=1))
    small = x < _ASYMPTOTIC_FROM
    big_x = np.where(small, _ASYMPTOTIC_FROM, x)
    j0, y0 = _large_jy(big_x, 0)
    j1, y1 = _large_jy(big_x, 1)
    jn, yn = _forward(n, j0, j1, big_x, top), _forward(n, y0, y1, big_x, top)
    miller = small | (n > x)  # forward recurrence on J is unstable past n = x
    if miller.any():
        xs, ns = x[miller], n[miller]
        j = _miller(xs, top)
        jn[miller] = np.take_along_axis(j, ns[None].astype(np.intp), axis=0)[0]
        ys = _forward(ns, *_neumann_y(xs, j), xs, top)
        yn[miller] = np.where(small[miller], ys, yn[miller])
    return jn, yn


def _orders_and_values(n, x):
    x = np.asarray(x, np.float64)
    n = np.broadcast_to(np.asarray(n, np.int64), x.shape)
    ok = np.isfinite(x) & (x != 0)
    jn, yn = _bessel_jy(np.where(n >= 0, n, 0), np.where(ok, np.abs(x), 1.0))
    return n, x, ok, jn, yn


def bessel_j(n, x):
    """J_n(x): J_n(-x) = (-1)^n J_n(x); 0 at +-inf; J_n(0) is 1 for n = 0, else 0; NaN for n < 0."""
    n, x, ok, jn, _ = _orders_and_values(n, x)
    value = np.where(ok, jn, np.where((x == 0) & (n == 0), 1.0, 0.0))
    value = np.where((x < 0) & (n % 2 == 1), -value, value)
    return np.where(np.isnan(x) | (n < 0), np.nan, value)


def bessel_y(n, x):
    """Y_n(x): -inf at 0, NaN for x < 0 or n < 0, 0 at +inf."""
    n, x, ok, _, yn = _orders_and_values(n, x)
    value = np.where(ok & (x > 0), yn, np.where(x == 0, -np.inf, np.where(x == np.inf, 0.0, np.nan)))
    return np.where(n < 0, np.nan, value)


def _modified(x, order):
    """I_0 or I_1 of |x| (series below 30, asymptotic above, exp folded in to delay overflow)."""
    ax = np.abs(np.asarray(x, np.float64))
    near = np.minimum(ax, 30.0)
    half_sq = (near / 2) ** 2
    term = np.ones_like(near) if order == 0 else near / 2
    total = term.copy()
    for k in range(1, 120):
        term = term * half_sq / (k * (k + order))
        total = total + term
    far = np.maximum(ax, 30.0)
    p, q = _hankel_series(far, order, alternate=False)
    with np.errstate(over="ignore"):
        asymptotic = np.exp(far - 0.5 * np.log(2 * np.pi * far)) * (p + q)
    return np.where(ax < 30.0, total, asymptotic)


def bessel_i0(x):
    x = np.asarray(x, np.float64)
    return np.where(np.isnan(x), np.nan, _modified(x, 0))


def bessel_i1(x):
    x = np.asarray(x, np.float64)
    return np.where(np.isnan(x), np.nan, np.copysign(_modified(x, 1), x))
