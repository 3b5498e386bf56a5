"""Conformance: tl.extra.cuda.libdevice (interpreter vs NumPy)."""
import math

import numpy as np

import kiln
import kiln.language as tl
from kiln.language.extra import libdevice
from kiln.language.extra.cuda import libdevice as cuda_libdevice

N = 16
X = np.linspace(-0.9, 0.9, N).astype(np.float32)        # inside every domain of the inverse functions
BIG = np.linspace(1.5, 6.0, N).astype(np.float32)


@kiln.jit
def _unaries(x_ptr, big_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    big = tl.load(big_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.expm1(x))
    tl.store(out_ptr + 1 * N + offs, libdevice.exp10(x))
    tl.store(out_ptr + 2 * N + offs, libdevice.log10(big))
    tl.store(out_ptr + 3 * N + offs, libdevice.cbrt(x))
    tl.store(out_ptr + 4 * N + offs, libdevice.sinh(x))
    tl.store(out_ptr + 5 * N + offs, libdevice.cosh(x))
    tl.store(out_ptr + 6 * N + offs, libdevice.asin(x))
    tl.store(out_ptr + 7 * N + offs, libdevice.acos(x))
    tl.store(out_ptr + 8 * N + offs, libdevice.atan(x))
    tl.store(out_ptr + 9 * N + offs, libdevice.asinh(x))
    tl.store(out_ptr + 10 * N + offs, libdevice.acosh(big))
    tl.store(out_ptr + 11 * N + offs, libdevice.atanh(x))
    tl.store(out_ptr + 12 * N + offs, libdevice.erfc(big))
    tl.store(out_ptr + 13 * N + offs, libdevice.erfinv(x))
    tl.store(out_ptr + 14 * N + offs, libdevice.lgamma(big - 3.05))
    tl.store(out_ptr + 15 * N + offs, libdevice.tgamma(big))
    tl.store(out_ptr + 16 * N + offs, cuda_libdevice.rint(big * 2.0))
    tl.store(out_ptr + 17 * N + offs, libdevice.hypot(x, big))
    tl.store(out_ptr + 18 * N + offs, libdevice.remainder(big, 1.25))
    tl.store(out_ptr + 19 * N + offs, libdevice.fdim(x, 0.25))


def _expected(x, big):
    x, big = x.astype(np.float64), big.astype(np.float64)
    lgamma = np.vectorize(math.lgamma)
    return [np.expm1(x), 10.0 ** x, np.log10(big), np.cbrt(x), np.sinh(x), np.cosh(x), np.arcsin(x), np.arccos(x),
            np.arctan(x), np.arcsinh(x), np.arccosh(big), np.arctanh(x),
            np.vectorize(math.erfc)(big), _erfinv_by_bisection(x), lgamma(big.astype(np.float32) - np.float32(3.05)), np.vectorize(math.gamma)(big),
            np.rint(big.astype(np.float32) * np.float32(2.0)), np.hypot(x, big),
            np.vectorize(math.remainder)(big, 1.25), np.maximum(x - 0.25, 0.0)]


def _erfinv_by_bisection(y):
    lo, hi = np.full_like(y, -6.0), np.full_like(y, 6.0)
    erf = np.vectorize(math.erf)
    for _ in range(80):
        mid = (lo + hi) / 2
        below = erf(mid) < y
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def test_libdevice_unary_and_binary_functions():
    out = np.zeros((20, N), np.float32)
    _unaries[(1,)](X, BIG, out, N=N)
    for row, (got, want) in enumerate(zip(out, _expected(X, BIG))):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=f"row {row}")


@kiln.jit
def _classify(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.isnan(x).to(tl.int32))
    tl.store(out_ptr + 1 * N + offs, libdevice.isinf(x).to(tl.int32))
    tl.store(out_ptr + 2 * N + offs, libdevice.isfinited(x).to(tl.int32))
    tl.store(out_ptr + 3 * N + offs, libdevice.signbit(x).to(tl.int32))


def test_libdevice_classification():
    x = np.array([0.0, -0.0, 1.0, -2.0, np.inf, -np.inf, np.nan, -np.nan] * 2, np.float32)
    out = np.zeros((4, N), np.int32)
    _classify[(1,)](x, out, N=N)
    np.testing.assert_array_equal(out[0], np.isnan(x))
    np.testing.assert_array_equal(out[1], np.isinf(x))
    np.testing.assert_array_equal(out[2], np.isfinite(x))
    np.testing.assert_array_equal(out[3], np.signbit(x))


@kiln.jit
def _composed(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.fmin(x, y))
    tl.store(out_ptr + 1 * N + offs, libdevice.fmax(x, y))
    tl.store(out_ptr + 2 * N + offs, libdevice.fmod(x, y))
    tl.store(out_ptr + 3 * N + offs, libdevice.saturatef(x))
    tl.store(out_ptr + 4 * N + offs, libdevice.rcp_rn(y))
    tl.store(out_ptr + 5 * N + offs, libdevice.llround(x * 2.0).to(tl.float32))
    tl.store(out_ptr + 6 * N + offs, libdevice.fabs(x))


def test_libdevice_functions_built_from_existing_ops():
    x = np.linspace(-2.25, 2.25, N).astype(np.float32)
    x[3] = np.nan
    y = np.linspace(0.5, 1.75, N).astype(np.float32)
    out = np.zeros((7, N), np.float32)
    _composed[(1,)](x, y, out, N=N)
    np.testing.assert_array_equal(out[0], np.fmin(x, y))
    np.testing.assert_array_equal(out[1], np.fmax(x, y))
    np.testing.assert_allclose(out[2], np.fmod(x, y), rtol=1e-6)
    np.testing.assert_array_equal(out[3][~np.isnan(x)], np.clip(x, 0, 1)[~np.isnan(x)])
    np.testing.assert_allclose(out[4], 1 / y, rtol=1e-7)
    twice = x[~np.isnan(x)].astype(np.float64) * 2
    np.testing.assert_array_equal(out[5][~np.isnan(x)], np.trunc(twice + np.copysign(0.5, twice)))
    np.testing.assert_array_equal(out[6], np.abs(x))


@kiln.jit
def _bits(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.popc(x))
    tl.store(out_ptr + 1 * N + offs, libdevice.clz(x))
    tl.store(out_ptr + 2 * N + offs, libdevice.brev(x))
    tl.store(out_ptr + 3 * N + offs, libdevice.mulhi(x, -7))


def test_libdevice_bit_operations():
    x = np.array([0, 1, -1, 0x1234, 1 << 30, 7, 255, -256] * 2, np.int32)
    out = np.zeros((4, N), np.int32)
    _bits[(1,)](x, out, N=N)
    u = x.view(np.uint32)
    np.testing.assert_array_equal(out[0], [bin(v).count("1") for v in u])
    np.testing.assert_array_equal(out[1], [32 - int(v).bit_length() for v in u])
    np.testing.assert_array_equal(out[2].view(np.uint32), [int(f"{v:032b}"[::-1], 2) for v in u])
    np.testing.assert_array_equal(out[3], (x.astype(np.int64) * -7) >> 32)  # signed high half


def test_libdevice_module_paths_are_one_module():
    assert tl.extra.cuda.libdevice.tanh is libdevice.tanh is cuda_libdevice.tanh
    assert libdevice.rint is not libdevice.round  # rint rounds half to even, round away from zero


@kiln.jit
def _composed_special(x_ptr, n_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    n = tl.load(n_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.normcdf(x))
    tl.store(out_ptr + 1 * N + offs, libdevice.normcdfinv(tl.abs(x) * 0.4 + 0.05))
    tl.store(out_ptr + 2 * N + offs, libdevice.erfcinv(tl.abs(x) * 0.9 + 0.05))
    tl.store(out_ptr + 3 * N + offs, libdevice.rhypot(x, 2.0))
    tl.store(out_ptr + 4 * N + offs, libdevice.sinpi(x))
    tl.store(out_ptr + 5 * N + offs, libdevice.cospi(x))
    tl.store(out_ptr + 6 * N + offs, libdevice.ldexp(x, n))


def test_libdevice_functions_composed_from_special_functions():
    x = np.linspace(-0.9, 0.9, N).astype(np.float32)
    n = np.array([0, 1, -1, 5, -5, 100, -100, 127, -126, 200, -200, 3, 7, -7, 30, -30], np.int32)
    out = np.zeros((7, N), np.float32)
    _composed_special[(1,)](x, n, out, N=N)
    xd = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    p = np.abs(x).astype(np.float32) * np.float32(0.4) + np.float32(0.05)
    q = np.abs(x).astype(np.float32) * np.float32(0.9) + np.float32(0.05)
    np.testing.assert_allclose(out[0], 0.5 * np.vectorize(math.erfc)(-xd / math.sqrt(2)), rtol=1e-6)
    np.testing.assert_allclose(erf(out[1] / math.sqrt(2)), 2 * p.astype(np.float64) - 1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.vectorize(math.erfc)(out[2].astype(np.float64)), q, rtol=1e-5)
    np.testing.assert_allclose(out[3], 1 / np.hypot(xd, 2.0), rtol=1e-6)
    np.testing.assert_allclose(out[4], np.sin(np.pi * xd), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[5], np.cos(np.pi * xd), rtol=1e-5, atol=1e-6)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out[6], np.ldexp(x, n))  # 2**200 overflows to inf on both sides
