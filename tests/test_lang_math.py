"""Conformance: elementwise math builtins (interpreter vs NumPy)."""
import math

import numpy as np
import pytest

import kiln
import kiln.language as tl

N = 16
X = np.linspace(-3.0, 3.0, N).astype(np.float32)
POS = np.linspace(0.05, 9.0, N).astype(np.float32)


@kiln.jit
def _unary(x_ptr, y_ptr, OP: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    if OP == "abs":
        y = tl.abs(x)
    elif OP == "exp":
        y = tl.exp(x)
    elif OP == "exp2":
        y = tl.exp2(x)
    elif OP == "log":
        y = tl.log(x)
    elif OP == "log2":
        y = tl.log2(x)
    elif OP == "sqrt":
        y = tl.sqrt(x)
    elif OP == "sqrt_rn":
        y = tl.sqrt_rn(x)
    elif OP == "rsqrt":
        y = tl.rsqrt(x)
    elif OP == "sin":
        y = tl.sin(x)
    elif OP == "cos":
        y = tl.cos(x)
    elif OP == "erf":
        y = tl.erf(x)
    elif OP == "floor":
        y = tl.floor(x)
    elif OP == "ceil":
        y = tl.ceil(x)
    elif OP == "sigmoid":
        y = tl.sigmoid(x)
    else:
        tl.static_assert(False, "unknown op")
    tl.store(y_ptr + offs, y)


_ERF = np.vectorize(math.erf)
UNARY = {
    "abs": (X, np.abs), "exp": (X, np.exp), "exp2": (X, np.exp2), "log": (POS, np.log), "log2": (POS, np.log2),
    "sqrt": (POS, np.sqrt), "sqrt_rn": (POS, np.sqrt), "rsqrt": (POS, lambda v: 1 / np.sqrt(v)),
    "sin": (X, np.sin), "cos": (X, np.cos), "erf": (X, _ERF), "floor": (X * 1.3, np.floor),
    "ceil": (X * 1.3, np.ceil), "sigmoid": (X, lambda v: 1 / (1 + np.exp(-v))),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_math_fp32(op):
    x, ref = UNARY[op]
    y = np.zeros(N, np.float32)
    _unary[(1,)](x, y, OP=op, N=N)
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["exp", "log", "sqrt", "sin", "cos", "sigmoid", "floor"])
def test_unary_math_fp64(op):
    # Triton's exp/log/sqrt/sin/cos take fp32 or fp64 only
    x, ref = UNARY[op]
    y = np.zeros(N, np.float64)
    _unary[(1,)](x.astype(np.float64), y, OP=op, N=N)
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=1e-13)


def test_sqrt_rn_is_correctly_rounded():
    x = np.random.default_rng(0).uniform(0, 1000, N).astype(np.float32)
    y = np.zeros(N, np.float32)
    _unary[(1,)](x, y, OP="sqrt_rn", N=N)
    np.testing.assert_array_equal(y, np.sqrt(x))


def test_abs_of_integers():
    x = np.array([-5, 3, 0, -128, 127, -1, 9, -9] * 2, np.int8)
    y = np.zeros(N, np.int8)
    _unary[(1,)](x, y, OP="abs", N=N)
    np.testing.assert_array_equal(y, np.abs(x))  # abs(-128) wraps to -128 in int8


@kiln.jit
def _binary(x_ptr, y_ptr, z_ptr, out_ptr, OP: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    z = tl.load(z_ptr + offs)
    if OP == "fma":
        r = tl.fma(x, y, z)
    elif OP == "fdiv":
        r = tl.fdiv(x, y)
    elif OP == "div_rn":
        r = tl.div_rn(x, y)
    elif OP == "maximum":
        r = tl.maximum(x, y)
    elif OP == "minimum":
        r = tl.minimum(x, y)
    elif OP == "clamp":
        r = tl.clamp(x, y, z)
    elif OP == "where":
        r = tl.where(x > y, x, z)
    elif OP == "umulhi":
        r = tl.umulhi(x, y)
    else:
        tl.static_assert(False, "unknown op")
    tl.store(out_ptr + offs, r)


def _operands(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-4, 4, N).astype(dtype) for _ in range(3)]


def test_fma_is_one_rounding():
    x, y, z = _operands()
    out = np.zeros(N, np.float32)
    _binary[(1,)](x, y, z, out, OP="fma", N=N)
    exact = (x.astype(np.float64) * y + z).astype(np.float32)
    np.testing.assert_array_equal(out, exact)


@pytest.mark.parametrize("op", ["fdiv", "div_rn"])
def test_float_division_builtins(op):
    x, y, z = _operands()
    out = np.zeros(N, np.float32)
    _binary[(1,)](x, y, z, out, OP=op, N=N)
    np.testing.assert_allclose(out, x / y, rtol=1e-6)


@pytest.mark.parametrize("op,ref", [("maximum", np.maximum), ("minimum", np.minimum),
                                    ("where", lambda x, y, z: np.where(x > y, x, z))])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.uint16])
def test_maximum_minimum_where(op, ref, dtype):
    rng = np.random.default_rng(3)
    if np.dtype(dtype).kind == "f":
        x, y, z = _operands(dtype)
    else:
        info = np.iinfo(dtype)
        x, y, z = (rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True) for _ in range(3))
    out = np.zeros(N, dtype)
    _binary[(1,)](x, y, z, out, OP=op, N=N)
    expect = ref(x, y, z) if op == "where" else ref(x, y)
    np.testing.assert_array_equal(out, expect)


def test_clamp():
    x = np.linspace(-5, 5, N).astype(np.float32)
    lo = np.full(N, -1.5, np.float32)
    hi = np.full(N, 2.25, np.float32)
    out = np.zeros(N, np.float32)
    _binary[(1,)](x, lo, hi, out, OP="clamp", N=N)
    np.testing.assert_array_equal(out, np.clip(x, -1.5, 2.25))


@pytest.mark.parametrize("dtype", [np.uint32, np.int32])
def test_umulhi(dtype):
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    y = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    out = np.zeros(N, dtype)
    _binary[(1,)](x, y, y, out, OP="umulhi", N=N)
    # Triton multiplies the bit patterns as unsigned numbers even for int32 (__nv_umulhi; seen on an H100)
    expect = [((int(a) & 0xFFFFFFFF) * (int(b) & 0xFFFFFFFF)) >> 32 for a, b in zip(x, y)]
    np.testing.assert_array_equal(out, np.array(expect, np.uint32).view(np.uint32).astype(np.uint32).view(dtype))


@kiln.jit
def _nan_minmax(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL))
    tl.store(out_ptr + N + offs, tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL))


def test_maximum_minimum_propagate_nan_all():
    x = np.array([1.0, np.nan, 3.0, np.nan], np.float32)
    y = np.array([np.nan, 2.0, 1.0, np.nan], np.float32)
    out = np.zeros(8, np.float32)
    _nan_minmax[(1,)](x, y, out, N=4)
    np.testing.assert_array_equal(out[:4], np.maximum(x, y))
    np.testing.assert_array_equal(out[4:], np.minimum(x, y))


@kiln.jit
def _softmax_rows(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, tl.softmax(x, dim=1, keep_dims=True))


@kiln.jit
def _softmax_1d(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.softmax(tl.load(x_ptr + offs)))


def test_softmax():
    x = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    y = np.zeros_like(x)
    _softmax_rows[(1,)](x, y, M=4, N=8)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-6)
    y1 = np.zeros(8, np.float32)
    _softmax_1d[(1,)](x[0].copy(), y1, N=8)
    np.testing.assert_allclose(y1, e[0] / e[0].sum(), rtol=1e-6)


@kiln.jit
def _cdiv_kernel(a_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    tl.store(out_ptr + offs, tl.cdiv(a, 4))
    tl.store(out_ptr + N + offs, tl.cdiv(a, 4) * 0 + tl.cdiv(17, 5))


def test_tl_cdiv_on_tensors_and_constants():
    a = np.array([0, 1, 3, 4, 5, 8, 9, 100], np.int32)
    out = np.zeros(16, np.int32)
    _cdiv_kernel[(1,)](a, out, N=8)
    np.testing.assert_array_equal(out[:8], (a + 3) // 4)
    np.testing.assert_array_equal(out[8:], np.full(8, 4))


@kiln.jit
def _math_namespace(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.math.exp(x) + tl.math.sqrt(tl.abs(x)) + tl.extra.cuda.libdevice.tanh(x)
    tl.store(y_ptr + offs, y)


def test_tl_math_and_libdevice_namespaces():
    y = np.zeros(N, np.float32)
    _math_namespace[(1,)](X, y, N=N)
    x = X.astype(np.float64)
    np.testing.assert_allclose(y, np.exp(x) + np.sqrt(np.abs(x)) + np.tanh(x), rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint64, np.int64])
def test_umulhi_64_bit(dtype):
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    y = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    out = np.zeros(N, dtype)
    _binary[(1,)](x, y, y, out, OP="umulhi", N=N)
    mask = 2**64 - 1
    expect = [((int(a) & mask) * (int(b) & mask)) >> 64 for a, b in zip(x, y)]  # unsigned bit patterns
    np.testing.assert_array_equal(out, np.array(expect, np.uint64).view(dtype))


def test_maximum_minimum_ignore_nan_by_default_and_ieee_division():
    x = np.array([1.0, np.nan, 0.0, -1.0] * 4, np.float32)
    y = np.array([np.nan, 2.0, 0.0, 0.0] * 4, np.float32)
    out = np.zeros(N, np.float32)
    _binary[(1,)](x, y, y, out, OP="maximum", N=N)
    np.testing.assert_array_equal(out, np.fmax(x, y))
    _binary[(1,)](x, y, y, out, OP="minimum", N=N)
    np.testing.assert_array_equal(out, np.fmin(x, y))
    _binary[(1,)](x, y, y, out, OP="fdiv", N=N)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, x / y)  # nan, nan, 0/0 = nan, -1/0 = -inf
