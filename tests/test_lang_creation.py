"""Conformance: arange, zeros, zeros_like, full, cast and bitcast (interpreter vs NumPy)."""
import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def _creation(out_ptr, v):
    offs = tl.arange(0, 8)
    tl.store(out_ptr + offs, tl.arange(3, 11))
    z = tl.zeros((8,), dtype=tl.int32)
    tl.store(out_ptr + 8 + offs, z)
    f = tl.full((8,), 7, tl.int32)
    tl.store(out_ptr + 16 + offs, f)
    r = tl.full((8,), v, tl.int32)  # runtime scalar value
    tl.store(out_ptr + 24 + offs, r + offs)
    zl = tl.zeros_like(f) + 5
    tl.static_assert(zl.dtype == tl.int32)
    tl.store(out_ptr + 32 + offs, zl)


def test_arange_zeros_full_zeros_like():
    out = np.full(40, -1, np.int32)
    _creation[(1,)](out, 100)
    expect = np.concatenate([np.arange(3, 11), np.zeros(8), np.full(8, 7), 100 + np.arange(8), np.full(8, 5)])
    np.testing.assert_array_equal(out, expect)


@kiln.jit
def _full_2d(out_ptr, DT: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    x = tl.full((M, N), 1.5, DT)
    z = tl.zeros([M, N], DT)
    tl.static_assert(x.dtype == DT)
    tl.static_assert(z.shape[0] == M and z.shape[1] == N)
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + offs, x + z)


@pytest.mark.parametrize("dt,npdt", [(tl.float16, np.float16), (tl.float32, np.float32),
                                     (tl.bfloat16, ml_dtypes.bfloat16), (tl.float64, np.float64)])
def test_full_and_zeros_2d_keep_the_dtype(dt, npdt):
    out = np.zeros((4, 2), npdt)
    _full_2d[(1,)](out, DT=dt, M=4, N=2)
    np.testing.assert_array_equal(out, np.full((4, 2), 1.5, npdt))


@kiln.jit
def _zero_fills(u_ptr, f_ptr):
    offs = tl.arange(0, 4)
    tl.store(u_ptr + offs, tl.full([4], 0.0, tl.uint32))  # a float zero fills an integer block
    tl.store(f_ptr + offs, tl.full([4], -0.0, tl.float32))


def test_a_zero_of_any_type_fills_with_the_null_value():
    """Triton fills `value == 0` with the type's null value (a float 0.0 into a uint32 block, as
    triton_kernels' persistent matmul does; -0.0 becomes +0.0) and calls get_<type>(value) otherwise."""
    u, f = np.full(4, 7, np.uint32), np.full(4, 7, np.float32)
    _zero_fills[(1,)](u, f)
    np.testing.assert_array_equal(u, np.zeros(4, np.uint32))
    assert not np.signbit(f).any() and not f.any()


@kiln.jit
def _cast_kernel(x_ptr, y_ptr, DST: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.cast(x, DST)
    tl.static_assert(y.dtype == DST)
    tl.store(y_ptr + offs, y)


CAST_VALUES = np.array([0.0, 1.75, -1.75, 2.5, -2.5, 100.9, -100.9, 65504.0, 1e-3, 3.0, -0.0, 255.5,
                        127.0, -128.0, 1e5, 33.25], dtype=np.float32)


@pytest.mark.parametrize("dst,npdt", [(tl.float16, np.float16), (tl.bfloat16, ml_dtypes.bfloat16),
                                      (tl.float64, np.float64), (tl.int32, np.int32), (tl.int64, np.int64),
                                      (tl.int16, np.int16)])
def test_cast_from_float32(dst, npdt):
    x = CAST_VALUES.copy()
    if np.dtype(npdt).kind in "iu":
        x = x[np.abs(x) < np.iinfo(npdt).max]
        x = np.resize(x, 16)
    y = np.zeros(16, npdt)
    _cast_kernel[(1,)](x, y, DST=dst, N=16)
    with np.errstate(over="ignore"):
        expect = x.astype(npdt)
    np.testing.assert_array_equal(y, expect)  # float -> int truncates toward zero


def test_cast_integer_narrowing_wraps():
    x = np.array([0, 1, 127, 128, 255, 256, -1, -129, 300, -300, 2**31 - 1, -2**31, 65535, 65536, 1000, 7],
                 np.int32)
    for dst, npdt in [(tl.int8, np.int8), (tl.uint8, np.uint8), (tl.int16, np.int16), (tl.uint32, np.uint32)]:
        y = np.zeros(16, npdt)
        _cast_kernel[(1,)](x, y, DST=dst, N=16)
        np.testing.assert_array_equal(y, x.astype(npdt))


def test_cast_signed_to_wider_sign_extends_and_unsigned_zero_extends():
    xs = np.array([-1, -128, 127, 0, 5, -5, 100, -100], np.int8)
    y = np.zeros(8, np.int64)
    _cast_kernel[(1,)](xs, y, DST=tl.int64, N=8)
    np.testing.assert_array_equal(y, xs.astype(np.int64))
    xu = xs.view(np.uint8)
    y = np.zeros(8, np.int64)
    _cast_kernel[(1,)](xu, y, DST=tl.int64, N=8)
    np.testing.assert_array_equal(y, xu.astype(np.int64))


def test_cast_to_int1_is_nonzero_test():
    x = np.array([0.0, 0.5, -0.0, -3.0, 1e-30, 0.0, 2.0, 0.0], np.float32)
    y = np.zeros(8, np.bool_)
    _cast_kernel[(1,)](x, y, DST=tl.int1, N=8)
    np.testing.assert_array_equal(y, x != 0)


def test_cast_int_to_float():
    x = np.array([0, 1, -1, 2**24 + 1, -2**31, 2**31 - 1, 12345, -7], np.int32)
    y = np.zeros(8, np.float32)
    _cast_kernel[(1,)](x, y, DST=tl.float32, N=8)
    np.testing.assert_array_equal(y, x.astype(np.float32))


@kiln.jit
def _bitcast_kernel(x_ptr, y_ptr, z_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    bits = tl.cast(x, tl.int32, bitcast=True)
    tl.store(y_ptr + offs, bits)
    back = bits.to(tl.float32, bitcast=True)
    tl.store(z_ptr + offs, back * 2)


def test_bitcast_reinterprets_bits():
    x = np.array([1.0, -2.0, 0.0, -0.0, np.inf, 3.14159, 1e-40, 65504.0], np.float32)
    y = np.zeros(8, np.int32)
    z = np.zeros(8, np.float32)
    _bitcast_kernel[(1,)](x, y, z, N=8)
    np.testing.assert_array_equal(y, x.view(np.int32))
    np.testing.assert_array_equal(z, x * 2)


@kiln.jit
def _fp16_bits(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    h = tl.load(x_ptr + offs).to(tl.float16)
    tl.store(y_ptr + offs, h.to(tl.uint16, bitcast=True))


def test_bitcast_fp16_to_uint16_after_rounding():
    x = np.array([1.0, 1.0009765625, 1.00048828125, -65504.0, 70000.0, 1e-8, 0.1, 2.0 / 3], np.float32)
    y = np.zeros(8, np.uint16)
    _fp16_bits[(1,)](x, y, N=8)
    with np.errstate(over="ignore"):
        expect = x.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(y, expect)


@kiln.jit
def _downcast_rtz(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty, fp_downcast_rounding="rtz"))


@pytest.mark.parametrize("src, dst", [(np.float32, np.float16), (np.float64, np.float16), (np.float64, np.float32)])
def test_fp_downcast_rounding_rtz(src, dst):
    x = np.array([1.0009765625 * 1.0004, -1.0009765625 * 1.0004, 1.0, 3.3, -3.3, 1000.7, 0.1, -0.1], src)
    y = np.zeros(8, dst)
    _downcast_rtz[(1,)](x, y, N=8)
    nearest = x.astype(dst)
    # toward zero: never larger in magnitude than x, and the next value of dst would be
    assert np.all(np.abs(y.astype(src)) <= np.abs(x))
    up = np.nextafter(y, np.copysign(dst(np.inf), y)).astype(src)
    assert np.all(np.abs(up) > np.abs(x))
    assert np.any(y != nearest)


CONVERSIONS = [
    (np.array([0xFFFFFFFF, 2**31, 1, 0, 16777217, 2**32 - 129, 3, 4], np.uint32), tl.float32, np.float32),
    (np.array([2**64 - 1, 2**63, 1, 0, 2**53 + 1, 5, 6, 7], np.uint64), tl.float64, np.float64),
    (np.array([2**64 - 1, 2**63, 1, 0, 2**53 + 1, 5, 6, 7], np.uint64), tl.float32, np.float32),
    # fp64 -> fp16 rounds once (not through fp32): 1 + 2**-11 + 2**-40 rounds up
    (np.array([1 + 2**-11 + 2**-40, 65519.99, 65520.0, 1e-8, 2**-24, 3 * 2**-26, -0.0, 1 / 3], np.float64),
     tl.float16, np.float16),
    (np.array([1 + 2**-8 + 2**-30, 3.0e38, 1e-40, -1.00390625, 1.00390625, 1.01171875, np.inf, np.nan], np.float32),
     tl.bfloat16, ml_dtypes.bfloat16),
    (np.array([3e9, 4.2e9, 1.5, 0.0, 2**31, 255.9, 7.0, 1e9], np.float32), tl.uint32, np.uint32),
    (np.array([1.5, 65504, 0.099975586, 1e-5, 6e-8, -2, 3, 4], np.float16), tl.bfloat16, ml_dtypes.bfloat16),
    (np.array([True, False, True, True, False, False, True, False]), tl.float16, np.float16),
]


@pytest.mark.parametrize("x,dst,npdt", CONVERSIONS, ids=[f"{c[0].dtype}-{c[1]}" for c in CONVERSIONS])
def test_conversions_round_like_numpy(x, dst, npdt):
    y = np.zeros(8, npdt)
    _cast_kernel[(1,)](x, y, DST=dst, N=8)
    with np.errstate(all="ignore"):
        ref = x.astype(npdt)
    if ref.dtype.kind == "f" or str(ref.dtype) == "bfloat16":
        nan = np.isnan(ref.astype(np.float32))
        assert np.isnan(y[nan].astype(np.float32)).all()  # NaN stays NaN (payload bits are the hardware's)
        y, ref = y[~nan], ref[~nan]
    np.testing.assert_array_equal(y.view(np.uint8), ref.view(np.uint8))  # bit-exact
