"""Conformance: tl.extra.cuda.libdevice (interpreter vs NumPy)."""
import math
import os
from fractions import Fraction

import numpy as np
import pytest

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


# --- explicitly rounded arithmetic and conversions, checked against exact rationals -----
MODES = ("rn", "rz", "rd", "ru")


def _exactly_rounded(value: Fraction, dt, mode):
    """`value` rounded to NumPy float type `dt` in `mode`, by exact comparison of neighbours."""
    guess = dt.type(float(value))  # within one ulp: float() of a Fraction is correctly rounded
    near = [guess, np.nextafter(guess, dt.type(np.inf)), np.nextafter(guess, dt.type(-np.inf))]
    near = [c for c in near if np.isfinite(c)]
    lo = max((c for c in near if Fraction(float(c)) <= value), key=lambda c: Fraction(float(c)))
    hi = min((c for c in near if Fraction(float(c)) >= value), key=lambda c: Fraction(float(c)))
    if mode == "rd" or (mode == "rz" and value > 0):
        return lo
    if mode == "ru" or mode == "rz":
        return hi
    below, above = value - Fraction(float(lo)), Fraction(float(hi)) - value
    if below != above:
        return lo if below < above else hi
    return lo if int(np.array(lo).view(f"u{dt.itemsize}")) % 2 == 0 else hi


# Compiled code takes libdevice's flush-to-zero paths, as Triton's does (its enable_reflect_ftz, on by
# default: `mul.rp.ftz.f32`, `cvt.rm.ftz.f32.f64`): an fp32 subnormal result is a zero of its sign. The
# interpreter computes subnormals.
FLUSHES_SUBNORMALS = os.environ.get("KILN_TEST_GPU_CONFORMANCE") == "1"


def _as_computed(want):
    """An fp32 result as the run computes it (flushed where the code flushes, above)."""
    tiny = np.finfo(np.float32).tiny
    if FLUSHES_SUBNORMALS and want.dtype == np.float32 and 0 < abs(want) < tiny:
        return np.copysign(np.float32(0), want)
    return want


def _check_rounded(got, exact_values, dt, mode, what):
    for i, value in enumerate(exact_values):
        if value is None:
            continue
        want = _exactly_rounded(value, dt, mode) if value != 0 else None
        if want is None:
            assert got[i] == 0, (what, mode, i)
            continue
        want = _as_computed(want)
        assert got[i] == want, f"{what}_{mode}[{i}]: {got[i]!r} != {want!r} (exact {float(value)!r})"


def _operands(dt):
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(32) * np.exp2(rng.integers(-20, 20, 32))).astype(dt)
    b = (rng.standard_normal(32) * np.exp2(rng.integers(-20, 20, 32))).astype(dt)
    c = rng.standard_normal(32).astype(dt)
    half_ulp = np.finfo(dt).eps / 2
    # ties to even, either way, on both signs; a sum a full ulp from the nearest; x - x
    a[:6] = [1.0, 1.0 + 2 * half_ulp, -1.0, -(1.0 + 2 * half_ulp), 1.0, 3.0]
    b[:6] = [half_ulp, half_ulp, -half_ulp, -half_ulp, -half_ulp / 64, -3.0]
    return a, b, c


@kiln.jit
def _rounded_arith(a_ptr, b_ptr, c_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a, b, c = tl.load(a_ptr + offs), tl.load(b_ptr + offs), tl.load(c_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.add_rn(a, b))
    tl.store(out_ptr + 1 * N + offs, libdevice.add_rz(a, b))
    tl.store(out_ptr + 2 * N + offs, libdevice.add_rd(a, b))
    tl.store(out_ptr + 3 * N + offs, libdevice.add_ru(a, b))
    tl.store(out_ptr + 4 * N + offs, libdevice.sub_rn(a, b))
    tl.store(out_ptr + 5 * N + offs, libdevice.sub_rz(a, b))
    tl.store(out_ptr + 6 * N + offs, libdevice.sub_rd(a, b))
    tl.store(out_ptr + 7 * N + offs, libdevice.sub_ru(a, b))
    tl.store(out_ptr + 8 * N + offs, libdevice.mul_rn(a, b))
    tl.store(out_ptr + 9 * N + offs, libdevice.mul_rz(a, b))
    tl.store(out_ptr + 10 * N + offs, libdevice.mul_rd(a, b))
    tl.store(out_ptr + 11 * N + offs, libdevice.mul_ru(a, b))
    tl.store(out_ptr + 12 * N + offs, libdevice.div_rn(a, b))
    tl.store(out_ptr + 13 * N + offs, libdevice.div_rz(a, b))
    tl.store(out_ptr + 14 * N + offs, libdevice.div_rd(a, b))
    tl.store(out_ptr + 15 * N + offs, libdevice.div_ru(a, b))
    tl.store(out_ptr + 16 * N + offs, libdevice.fma_rn(a, b, c))
    tl.store(out_ptr + 17 * N + offs, libdevice.fma_rz(a, b, c))
    tl.store(out_ptr + 18 * N + offs, libdevice.fma_rd(a, b, c))
    tl.store(out_ptr + 19 * N + offs, libdevice.fma_ru(a, b, c))
    tl.store(out_ptr + 20 * N + offs, libdevice.rcp_rz(b))
    tl.store(out_ptr + 21 * N + offs, libdevice.rcp_rd(b))
    tl.store(out_ptr + 22 * N + offs, libdevice.rcp_ru(b))
    tl.store(out_ptr + 23 * N + offs, libdevice.sqrt_rz(tl.abs(a)))
    tl.store(out_ptr + 24 * N + offs, libdevice.sqrt_rd(tl.abs(a)))
    tl.store(out_ptr + 25 * N + offs, libdevice.sqrt_ru(tl.abs(a)))


def _sqrt_is_rounded(got, a, mode):
    """got is sqrt(a) rounded `mode`: compare squares exactly with its neighbours."""
    for g, x in zip(got, np.abs(a)):
        up, down = (Fraction(float(np.nextafter(g, g.dtype.type(s)))) for s in (np.inf, -np.inf))
        g2, x = Fraction(float(g)) ** 2, Fraction(float(x))
        assert (g2 <= x < up * up) if mode in ("rz", "rd") else (down * down < x <= g2), (g, x, mode)


@pytest.mark.parametrize("dt", [np.dtype(np.float32), np.dtype(np.float64)])
def test_libdevice_rounded_arithmetic_is_exact(dt):
    a, b, c = _operands(dt)
    out = np.zeros((26, 32), dt)
    _rounded_arith[(1,)](a, b, c, out, N=32)
    A, B, C = ([Fraction(float(v)) for v in x] for x in (a, b, c))
    for k, mode in enumerate(MODES):
        _check_rounded(out[0 + k], [x + y for x, y in zip(A, B)], dt, mode, "add")
        _check_rounded(out[4 + k], [x - y for x, y in zip(A, B)], dt, mode, "sub")
        _check_rounded(out[8 + k], [x * y for x, y in zip(A, B)], dt, mode, "mul")
        _check_rounded(out[12 + k], [x / y for x, y in zip(A, B)], dt, mode, "div")
        _check_rounded(out[16 + k], [x * y + z for x, y, z in zip(A, B, C)], dt, mode, "fma")
    for k, mode in enumerate(MODES[1:]):
        _check_rounded(out[20 + k], [1 / y for y in B], dt, mode, "rcp")
        _sqrt_is_rounded(out[23 + k], a, mode)
    # the ties: 1 + ulp/2 rounds to even (down), (1 + ulp) + ulp/2 to even (up)
    assert out[0, 0] == 1.0 and out[0, 1] == 1.0 + 4 * (np.finfo(dt).eps / 2)
    # an exact zero sum is +0, but -0 when rounding down
    assert out[0, 5] == 0 and not np.signbit(out[0, 5]) and np.signbit(out[2, 5])


@kiln.jit
def _rounded_specials(a_ptr, b_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a, b = tl.load(a_ptr + offs), tl.load(b_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.add_rd(a, b))
    tl.store(out_ptr + 1 * N + offs, libdevice.add_rz(a, b))
    tl.store(out_ptr + 2 * N + offs, libdevice.mul_ru(a, b))
    tl.store(out_ptr + 3 * N + offs, libdevice.div_rz(a, b))


def test_libdevice_rounded_arithmetic_at_overflow_nan_and_inf():
    big = np.finfo(np.float32).max
    a = np.array([big, -big, np.inf, np.nan, 1.0, 0.0, 1e-30, -1e-30], np.float32)
    b = np.array([big, -big, -np.inf, 1.0, 0.0, -0.0, 1e-30, 1e-30], np.float32)
    out = np.zeros((4, 8), np.float32)
    with np.errstate(all="ignore"):
        _rounded_specials[(1,)](a, b, out, N=8)
    add_rd, add_rz, mul_ru, div_rz = out
    assert add_rd[0] == big and add_rd[1] == -np.inf and np.isnan(add_rd[2]) and np.isnan(add_rd[3])
    assert add_rz[0] == big and add_rz[1] == -big           # overflow toward zero stops at the largest finite
    least = _as_computed(np.float32(2.0 ** -149))
    assert mul_ru[6] == least and mul_ru[7] == -0.0   # underflow: up to the least subnormal (or its flush)
    assert div_rz[4] == np.inf and np.isnan(div_rz[5])      # 1/0 is an exact infinity, 0/0 NaN
    assert div_rz[0] == 1.0 and div_rz[6] == 1.0


@kiln.jit
def _conversions(f_ptr, d_ptr, i_ptr, l_ptr, out_i_ptr, out_l_ptr, out_f_ptr, out_d_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    f, d = tl.load(f_ptr + offs), tl.load(d_ptr + offs)
    i, ll = tl.load(i_ptr + offs), tl.load(l_ptr + offs)
    tl.store(out_i_ptr + 0 * N + offs, libdevice.float2int_rn(f))
    tl.store(out_i_ptr + 1 * N + offs, libdevice.float2int_rz(f))
    tl.store(out_i_ptr + 2 * N + offs, libdevice.float2int_rd(f))
    tl.store(out_i_ptr + 3 * N + offs, libdevice.float2int_ru(f))
    tl.store(out_i_ptr + 4 * N + offs, libdevice.double2int_rn(d))
    tl.store(out_i_ptr + 5 * N + offs, libdevice.float2uint_rn(f))
    tl.store(out_i_ptr + 6 * N + offs, libdevice.double2uint_rd(d))
    tl.store(out_l_ptr + 0 * N + offs, libdevice.float2ll_ru(f))
    tl.store(out_l_ptr + 1 * N + offs, libdevice.double2ll_rd(d))
    tl.store(out_l_ptr + 2 * N + offs, libdevice.float2ull_rz(f))
    tl.store(out_l_ptr + 3 * N + offs, libdevice.double2ull_rn(d))
    tl.store(out_f_ptr + 0 * N + offs, libdevice.double2float_rn(d))
    tl.store(out_f_ptr + 1 * N + offs, libdevice.double2float_rz(d))
    tl.store(out_f_ptr + 2 * N + offs, libdevice.double2float_rd(d))
    tl.store(out_f_ptr + 3 * N + offs, libdevice.double2float_ru(d))
    tl.store(out_f_ptr + 4 * N + offs, libdevice.int2float_rd(i))
    tl.store(out_f_ptr + 5 * N + offs, libdevice.int2float_ru(i))
    tl.store(out_f_ptr + 6 * N + offs, libdevice.uint2float_rz(i.to(tl.uint32, bitcast=True)))
    tl.store(out_f_ptr + 7 * N + offs, libdevice.ll2float_rd(ll))
    tl.store(out_f_ptr + 8 * N + offs, libdevice.ull2float_ru(ll.to(tl.uint64, bitcast=True)))
    tl.store(out_f_ptr + 9 * N + offs, libdevice.int2float_rn(i))
    tl.store(out_d_ptr + 0 * N + offs, libdevice.ll2double_rd(ll))
    tl.store(out_d_ptr + 1 * N + offs, libdevice.ull2double_rz(ll.to(tl.uint64, bitcast=True)))
    tl.store(out_d_ptr + 2 * N + offs, libdevice.ll2double_rn(ll))
    tl.store(out_d_ptr + 3 * N + offs, libdevice.int2double_rn(i))
    tl.store(out_d_ptr + 4 * N + offs, libdevice.uint2double_rn(i.to(tl.uint32, bitcast=True)))


def test_libdevice_conversions_round_and_saturate():
    f = np.array([2.5, -2.5, 3.5, -0.5, 1.75, -1.75, 3e9, -3e9, 1e20, -1e20, np.nan, np.inf,
                  -np.inf, 0.0, 7.0, 2.0 ** 31], np.float32)
    rng = np.random.default_rng(3)
    d = np.concatenate([f[:14].astype(np.float64), [1 + 2.0 ** -40, -(1 + 2.0 ** -40)]])
    d[6:8] = [1e-50, -1e-50]  # below the smallest fp32 subnormal
    i = np.array([0, 1, -1, 2**24 + 1, -(2**24 + 1), 2**31 - 1, -2**31, 123456789, -123456789,
                  2**25 + 3, 7, 2**30 + 65, -3, 16777217, 33554435, -33554435], np.int32)
    ll = rng.integers(-2**63, 2**63 - 1, 16, dtype=np.int64)
    ll[:4] = [2**63 - 1, -2**63, 2**53 + 1, -(2**53 + 1)]
    outs = (np.zeros((7, 16), np.int32), np.zeros((4, 16), np.int64), np.zeros((10, 16), np.float32),
            np.zeros((5, 16), np.float64))
    with np.errstate(all="ignore"):
        _conversions[(1,)](f, d, i, ll, *outs, N=16)
    out_i, out_l, out_f, out_d = outs

    def to_int(x, rounder, lo, hi):  # libdevice saturates and sends NaN to 0
        r = rounder(np.where(np.isnan(x), 0, x).astype(np.float64))
        return np.clip(np.nan_to_num(r, posinf=hi, neginf=lo), lo, hi)

    i32, u32, i64 = (-2**31, 2**31 - 1), (0, 2**32 - 1), (-2**63, 2**63 - 1)
    np.testing.assert_array_equal(out_i[0], to_int(f, np.rint, *i32))
    np.testing.assert_array_equal(out_i[1], to_int(f, np.trunc, *i32))
    np.testing.assert_array_equal(out_i[2], to_int(f, np.floor, *i32))
    np.testing.assert_array_equal(out_i[3], to_int(f, np.ceil, *i32))
    np.testing.assert_array_equal(out_i[4], to_int(d, np.rint, *i32))
    np.testing.assert_array_equal(out_i[5].view(np.uint32), to_int(f, np.rint, *u32).astype(np.uint64))
    np.testing.assert_array_equal(out_i[6].view(np.uint32), to_int(d, np.floor, *u32).astype(np.uint64))
    for k, x in enumerate(f.astype(float).tolist()):  # 64-bit results checked as Python ints
        if math.isnan(x):
            assert out_l[0, k] == 0 and out_l[2, k] == 0
            continue
        want_ll = min(max(math.ceil(x) if math.isfinite(x) else (i64[1] if x > 0 else i64[0]), i64[0]), i64[1])
        assert out_l[0, k] == want_ll, (k, x)
        want_ull = min(max(math.trunc(x) if math.isfinite(x) else (2**64 - 1 if x > 0 else 0), 0), 2**64 - 1)
        assert int(out_l[2, k].view(np.uint64)) == want_ull, (k, x)
    for k, x in enumerate(d.tolist()):
        if math.isfinite(x):
            assert out_l[1, k] == min(max(math.floor(x), i64[0]), i64[1])
            assert int(out_l[3, k].view(np.uint64)) == min(max(round(x), 0), 2**64 - 1)
    for k, mode in enumerate(MODES):
        _check_rounded(out_f[k], [Fraction(float(x)) if np.isfinite(x) else None for x in d], np.dtype(np.float32),
                       mode, "double2float")
    least = _as_computed(np.float32(2.0 ** -149))
    assert out_f[2, 7] == -least and out_f[3, 6] == least
    assert np.isnan(out_f[1, 10]) and out_f[3, 11] == np.inf
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    _check_rounded(out_f[4], [Fraction(int(v)) for v in i], f32, "rd", "int2float")
    _check_rounded(out_f[5], [Fraction(int(v)) for v in i], f32, "ru", "int2float")
    _check_rounded(out_f[6], [Fraction(int(v)) for v in i.view(np.uint32)], f32, "rz", "uint2float")
    _check_rounded(out_f[7], [Fraction(int(v)) for v in ll], f32, "rd", "ll2float")
    _check_rounded(out_f[8], [Fraction(int(v)) for v in ll.view(np.uint64)], f32, "ru", "ull2float")
    _check_rounded(out_f[9], [Fraction(int(v)) for v in i], f32, "rn", "int2float")
    _check_rounded(out_d[0], [Fraction(int(v)) for v in ll], f64, "rd", "ll2double")
    _check_rounded(out_d[1], [Fraction(int(v)) for v in ll.view(np.uint64)], f64, "rz", "ull2double")
    _check_rounded(out_d[2], [Fraction(int(v)) for v in ll], f64, "rn", "ll2double")
    np.testing.assert_array_equal(out_d[3], i.astype(np.float64))
    np.testing.assert_array_equal(out_d[4], i.view(np.uint32).astype(np.float64))


@kiln.jit
def _bits_and_integers(f_ptr, d_ptr, a_ptr, b_ptr, i_out, l_out, f_out, d_out, N: tl.constexpr):
    offs = tl.arange(0, N)
    f, d = tl.load(f_ptr + offs), tl.load(d_ptr + offs)
    a, b = tl.load(a_ptr + offs), tl.load(b_ptr + offs)
    ua, ub = a.to(tl.uint32, bitcast=True), b.to(tl.uint32, bitcast=True)
    tl.store(i_out + 0 * N + offs, libdevice.float_as_int(f))
    tl.store(i_out + 1 * N + offs, libdevice.float_as_uint(f))
    tl.store(i_out + 2 * N + offs, libdevice.double2hiint(d))
    tl.store(i_out + 3 * N + offs, libdevice.double2loint(d))
    tl.store(i_out + 4 * N + offs, libdevice.hadd(a, b))
    tl.store(i_out + 5 * N + offs, libdevice.rhadd(a, b))
    tl.store(i_out + 6 * N + offs, libdevice.hadd(ua, ub).to(tl.int32, bitcast=True))
    tl.store(i_out + 7 * N + offs, libdevice.rhadd(ua, ub).to(tl.int32, bitcast=True))
    tl.store(i_out + 8 * N + offs, libdevice.mul24(a, b))
    tl.store(i_out + 9 * N + offs, libdevice.mul24(ua, ub).to(tl.int32, bitcast=True))
    tl.store(i_out + 10 * N + offs, libdevice.sad(a, b, ub))
    tl.store(i_out + 11 * N + offs, libdevice.sad(ua, ub, ua).to(tl.int32, bitcast=True))
    tl.store(i_out + 12 * N + offs, libdevice.byte_perm(a, b, b))
    tl.store(i_out + 13 * N + offs, libdevice.ffs(a))
    tl.store(i_out + 14 * N + offs, libdevice.ffs(a.to(tl.int64) << 20))
    tl.store(i_out + 15 * N + offs, libdevice.ilogb(f))
    tl.store(i_out + 16 * N + offs, libdevice.ilogb(d))
    tl.store(l_out + offs, libdevice.double_as_longlong(d))
    tl.store(f_out + 0 * N + offs, libdevice.int_as_float(a))
    tl.store(f_out + 1 * N + offs, libdevice.uint_as_float(ua))
    tl.store(f_out + 2 * N + offs, libdevice.logb(f))
    tl.store(d_out + 0 * N + offs, libdevice.longlong_as_double(libdevice.double_as_longlong(d)))
    tl.store(d_out + 1 * N + offs, libdevice.hiloint2double(libdevice.double2hiint(d), libdevice.double2loint(d)))
    tl.store(d_out + 2 * N + offs, libdevice.logb(d))


def test_libdevice_bit_reinterpretation_and_integer_functions():
    n = 16
    f = np.array([1.0, -2.5, 0.0, -0.0, np.inf, np.nan, 1e-40, 3e38, 0.75, 1e-45, -7.0, 1024.5, 5.0, 6.0, 1e-3, 2.0],
                 np.float32)
    d = f.astype(np.float64)
    d[6], d[9] = 1e-310, -5e-324  # fp64 subnormals
    rng = np.random.default_rng(5)
    a = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    a[:6] = [0, 1, -1, 2**31 - 1, -2**31, 0x00800000]
    b[:6] = [0, 1, 2**31 - 1, 2**31 - 1, -2**31, 0x7FFFFF]
    i_out, l_out = np.zeros((17, n), np.int32), np.zeros(n, np.int64)
    f_out, d_out = np.zeros((3, n), np.float32), np.zeros((3, n), np.float64)
    with np.errstate(all="ignore"):
        _bits_and_integers[(1,)](f, d, a, b, i_out, l_out, f_out, d_out, N=n)
    A, B = [int(v) for v in a], [int(v) for v in b]
    UA, UB = [v & 0xFFFFFFFF for v in A], [v & 0xFFFFFFFF for v in B]
    as_i32 = lambda v: np.array(v & 0xFFFFFFFF, np.uint32).view(np.int32)  # noqa: E731
    np.testing.assert_array_equal(i_out[0], f.view(np.int32))
    np.testing.assert_array_equal(i_out[1], f.view(np.int32))
    np.testing.assert_array_equal(i_out[2], (d.view(np.int64) >> 32).astype(np.int32))
    np.testing.assert_array_equal(i_out[3], (d.view(np.uint64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32))
    np.testing.assert_array_equal(i_out[4], [(x + y) >> 1 for x, y in zip(A, B)])
    np.testing.assert_array_equal(i_out[5], [(x + y + 1) >> 1 for x, y in zip(A, B)])
    np.testing.assert_array_equal(i_out[6].view(np.uint32), [(x + y) >> 1 for x, y in zip(UA, UB)])
    np.testing.assert_array_equal(i_out[7].view(np.uint32), [(x + y + 1) >> 1 for x, y in zip(UA, UB)])
    sext24 = lambda v: (v & 0xFFFFFF) - ((v & 0x800000) << 1)  # noqa: E731
    np.testing.assert_array_equal(i_out[8], [as_i32(sext24(x) * sext24(y)) for x, y in zip(A, B)])
    np.testing.assert_array_equal(i_out[9], [as_i32((x & 0xFFFFFF) * (y & 0xFFFFFF)) for x, y in zip(UA, UB)])
    np.testing.assert_array_equal(i_out[10], [as_i32(abs(x - y) + u) for x, y, u in zip(A, B, UB)])
    np.testing.assert_array_equal(i_out[11], [as_i32(abs(x - y) + x) for x, y in zip(UA, UB)])
    pool = [(y << 32) | x for x, y in zip(UA, UB)]
    perm = [sum(((p >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4)) for p, s in zip(pool, UB)]
    np.testing.assert_array_equal(i_out[12], [as_i32(v) for v in perm])
    np.testing.assert_array_equal(i_out[13], [(x & -x).bit_length() for x in A])
    np.testing.assert_array_equal(i_out[14], [((x << 20) & -(x << 20)).bit_length() for x in A])
    int_min, int_max = -2**31, 2**31 - 1

    def ilogb(x):
        if math.isnan(x) or x == 0:
            return int_min
        return int_max if math.isinf(x) else math.frexp(x)[1] - 1

    np.testing.assert_array_equal(i_out[15], [ilogb(float(x)) for x in f])
    np.testing.assert_array_equal(i_out[16], [ilogb(float(x)) for x in d])
    np.testing.assert_array_equal(l_out, d.view(np.int64))
    np.testing.assert_array_equal(f_out[0].view(np.int32), a)
    np.testing.assert_array_equal(f_out[1].view(np.int32), a)
    for row, src in ((f_out[2], f), (d_out[2], d)):
        with np.errstate(divide="ignore"):
            want = np.where(np.isnan(src), np.nan, np.where(np.isinf(src), np.inf,
                            np.where(src == 0, -np.inf, [ilogb(float(x)) for x in src])))
        np.testing.assert_array_equal(row, want)
    np.testing.assert_array_equal(d_out[0].view(np.int64), d.view(np.int64))
    np.testing.assert_array_equal(d_out[1].view(np.int64), d.view(np.int64))


@kiln.jit
def _float_functions(x_ptr, y_ptr, z_ptr, w_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x, y = tl.load(x_ptr + offs), tl.load(y_ptr + offs)
    z, w = tl.load(z_ptr + offs), tl.load(w_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.rcbrt(x))
    tl.store(out_ptr + 1 * N + offs, libdevice.norm3d(x, y, z))
    tl.store(out_ptr + 2 * N + offs, libdevice.rnorm3d(x, y, z))
    tl.store(out_ptr + 3 * N + offs, libdevice.norm4d(x, y, z, w))
    tl.store(out_ptr + 4 * N + offs, libdevice.rnorm4d(x, y, z, w))
    tl.store(out_ptr + 5 * N + offs, libdevice.erfcx(x))
    tl.store(out_ptr + 6 * N + offs, libdevice.rsqrt_rn(tl.abs(x)))
    tl.store(out_ptr + 7 * N + offs, libdevice.fast_tanhf(x))
    tl.store(out_ptr + 8 * N + offs, libdevice.cyl_bessel_i0(x))
    tl.store(out_ptr + 9 * N + offs, libdevice.cyl_bessel_i1(x))


def test_libdevice_norms_roots_and_scaled_erfc():
    n = 16
    x = np.linspace(-8.5, 9.5, n).astype(np.float32)
    y = np.linspace(0.5, 3.0, n).astype(np.float32)
    z, w = (y * 2 - 1).astype(np.float32), (x * 0.5).astype(np.float32)
    out = np.zeros((10, n), np.float32)
    _float_functions[(1,)](x, y, z, w, out, N=n)
    X, Y, Z, W = (v.astype(np.float64) for v in (x, y, z, w))
    norm3, norm4 = np.sqrt(X * X + Y * Y + Z * Z), np.sqrt(X * X + Y * Y + Z * Z + W * W)
    erfc = np.vectorize(lambda v: math.erfc(v))
    tight = dict(rtol=2e-7)
    np.testing.assert_allclose(out[0], 1 / np.cbrt(X), **tight)
    np.testing.assert_allclose(out[1], norm3, **tight)
    np.testing.assert_allclose(out[2], 1 / norm3, **tight)
    np.testing.assert_allclose(out[3], norm4, **tight)
    np.testing.assert_allclose(out[4], 1 / norm4, **tight)
    np.testing.assert_allclose(out[5], np.exp(X * X) * erfc(X), rtol=1e-6)  # the formula itself loses digits
    for got, v in zip(out[6], np.abs(x)):  # correctly rounded: within half an ulp of 1/sqrt, exactly
        exact = 1 / math.sqrt(float(v))
        assert abs(float(got) - exact) <= float(np.spacing(got)) / 2 * (1 + 1e-9)
    np.testing.assert_allclose(out[7], np.tanh(X), rtol=2e-7, atol=1e-7)
    np.testing.assert_allclose(out[8], np.i0(X), rtol=2e-7)
    i1 = np.vectorize(lambda v: sum((v / 2) ** (2 * k + 1) / (math.factorial(k) * math.factorial(k + 1))
                                    for k in range(60)))
    np.testing.assert_allclose(out[9], i1(X), rtol=2e-7)


def _bessel_reference(order, x):
    """J and Y of integer order from their integral forms (Bessel's and, for Y, the standard
    integral with the decaying tail), by composite Simpson on a fine grid, in float64."""
    t = np.linspace(0.0, np.pi, 4001)
    simpson = np.ones_like(t)
    simpson[1:-1:2], simpson[2:-1:2] = 4, 2
    step = (t[1] - t[0]) / 3
    j = (simpson * np.cos(order * t - x * np.sin(t))).sum() * step / np.pi
    u = np.linspace(0.0, 12.0, 24001)
    su = np.ones_like(u)
    su[1:-1:2], su[2:-1:2] = 4, 2
    tail = (su * (np.exp(order * u) + (-1) ** order * np.exp(-order * u)) * np.exp(-x * np.sinh(u))).sum()
    y = (simpson * np.sin(x * np.sin(t) - order * t)).sum() * step / np.pi - tail * (u[1] - u[0]) / 3 / np.pi
    return j, y


@kiln.jit
def _bessel(x_ptr, n_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x, n = tl.load(x_ptr + offs), tl.load(n_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.j0(x))
    tl.store(out_ptr + 1 * N + offs, libdevice.j1(x))
    tl.store(out_ptr + 2 * N + offs, libdevice.y0(x))
    tl.store(out_ptr + 3 * N + offs, libdevice.y1(x))
    tl.store(out_ptr + 4 * N + offs, libdevice.jn(n, x))
    tl.store(out_ptr + 5 * N + offs, libdevice.yn(n, x))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_libdevice_bessel_functions(dt):
    x = np.array([0.1, 0.5, 1.0, 2.0, 2.4048255, 3.5, 5.0, 7.25, 10.0, 13.5, 20.0, 24.5, 26.0, 33.0, 47.5, 80.0],
                 dt)
    n = np.array([2, 3, 0, 1, 5, 2, 8, 3, 4, 12, 2, 6, 3, 40, 7, 2], np.int32)
    out = np.zeros((6, 16), dt)
    _bessel[(1,)](x, n, out, N=16)
    # CUDA documents its fp32 Bessel functions to 2.2e-6 absolute error for |x| >= 8, and its
    # high orders recur upward (on an H200: j1f(20) 1e-7 off, ynf(40, 33) 9 ulp off); so fp32
    # gets 32 ulp or 2.2e-6, fp64 1e-6 relative
    rel, floor = (2 ** -18, 2.2e-6) if dt == np.float32 else (1e-6, 0.0)

    def close(got, want):
        return abs(got - want) <= max(rel * max(abs(want), 1e-3), floor)
    for k, v in enumerate(x.astype(np.float64)):
        for row, order in ((0, 0), (1, 1), (4, int(n[k]))):
            j, _ = _bessel_reference(order, v)
            assert close(out[row, k], j), (row, order, v)
        for row, order in ((2, 0), (3, 1), (5, int(n[k]))):
            if v < 1.0 and order > 1:
                continue  # the integral's tail is too steep for the reference grid there
            _, y = _bessel_reference(order, v)
            assert close(out[row, k], y), (row, order, v)


def test_libdevice_bessel_special_values():
    x = np.array([0.0, -0.0, -2.0, np.inf, -np.inf, np.nan, 2.0, -3.0], np.float32)
    n = np.array([0, 1, 3, 2, 0, 1, -1, 2], np.int32)
    out = np.zeros((6, 8), np.float32)
    with np.errstate(all="ignore"):
        _bessel[(1,)](x, n, out, N=8)
    assert abs(out[0, 0] - 1.0) <= 2 ** -23  # j0f(0) is 1 + 1 ulp on an H200
    assert out[1, 1] == 0.0 and out[0, 3] == 0.0 and np.isnan(out[0, 5])
    assert out[2, 0] == -np.inf and np.isnan(out[2, 2]) and out[2, 3] == 0.0
    assert out[1, 2] == -out[1, 6]                  # j1 is odd
    assert np.isnan(out[4, 6]) and np.isnan(out[5, 6])   # negative order: NaN, as libdevice


@kiln.jit
def _wrong_dtype(x_ptr, out_ptr):
    x = tl.load(x_ptr + tl.arange(0, 4))
    tl.store(out_ptr + tl.arange(0, 4), libdevice.float2int_rn(x))


def test_libdevice_refuses_dtypes_outside_its_table():
    from kiln.errors import CompilationError
    with pytest.raises(CompilationError, match=r"float2int_rn takes \(fp32\), not \(fp64\)"):
        _wrong_dtype[(1,)](np.zeros(4, np.float64), np.zeros(4, np.int32))
    with pytest.raises(CompilationError, match="float2int_rn takes"):
        _wrong_dtype[(1,)](np.zeros(4, np.float16), np.zeros(4, np.int32))
