"""Interpreter: float math ops and casts (saturation, rounding modes, bf16/fp8, pointers)."""
import math

import ml_dtypes
import numpy as np
import pytest

from kiln.interpret import run
from kiln.ir import parse_function, verify
from kiln.ir.types import from_numpy


def tname(dt) -> str:
    return from_numpy(np.dtype(dt)).name


def apply(body, *inputs, out=None):
    """Run `body` (using %a0.. of type T, defining %out of type R) on 1-D inputs."""
    n = inputs[0].size
    out_dt = np.dtype(out or inputs[0].dtype)
    types = [tname(x.dtype) for x in inputs]
    args = [f"%p{i}: ptr<{t}>" for i, t in enumerate(types)] + [f"%po: ptr<{tname(out_dt)}>"]
    lines = [f"%r = arange {{start = 0, end = {n}}} : <{n}xint32>"]
    for i, t in enumerate(types):
        lines += [f"%s{i} = splat %p{i} : <{n}xptr<{t}>>", f"%q{i} = addptr %s{i}, %r : <{n}xptr<{t}>>",
                  f"%a{i} = load %q{i} : <{n}x{t}>"]
    lines += body.replace("T", f"<{n}x{types[0]}>").replace("R", f"<{n}x{tname(out_dt)}>").splitlines()
    lines += [f"%so = splat %po : <{n}xptr<{tname(out_dt)}>>", f"%qo = addptr %so, %r : <{n}xptr<{tname(out_dt)}>>",
              "store %qo, %out", "return"]
    fn = parse_function(f"kernel @m({', '.join(args)}) {{\n" + "\n".join(lines) + "\n}")
    verify(fn)
    result = np.zeros(n, out_dt)
    run(fn, (1,), [*[np.ascontiguousarray(x) for x in inputs], result])
    return result


def unary(name, x, out=None):
    return apply(f"%out = {name} %a0 : R", x, out=out)


def cast(x, dst, attrs=""):
    return apply(f"%out = cast %a0 {attrs} : R", x, out=dst)


# --- math -------------------------------------------------------------------------------
X = np.array([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 10.0, 0.001], np.float32)


@pytest.mark.parametrize("name,ref", [
    ("exp", np.exp), ("exp2", np.exp2), ("log", np.log), ("log2", np.log2), ("log1p", np.log1p),
    ("sqrt", np.sqrt), ("sqrt_rn", np.sqrt), ("rsqrt", lambda x: 1 / np.sqrt(x)),
    ("sin", np.sin), ("cos", np.cos), ("tan", np.tan), ("tanh", np.tanh),
    ("erf", np.vectorize(math.erf)), ("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc),
])
def test_unary_math_fp32(name, ref):
    got = unary(name, X)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref(X.astype(np.float64)), rtol=2e-7, atol=0)


def test_erf_matches_math_erf_over_the_range():
    x = np.linspace(-6, 6, 1024).astype(np.float64)
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(unary("erf", x), want, rtol=1e-13, atol=1e-300)


def test_round_is_half_away_from_zero_and_negatives():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -1.2, 3.7], np.float32)
    assert unary("round", x).tolist() == [1, 2, 3, -1, -3, 0, -1, 4]
    assert unary("floor", -x).tolist() == np.floor(-x).tolist()
    assert unary("abs", -x).tolist() == np.abs(x).tolist()
    assert unary("neg", x).tolist() == (-x).tolist()


def test_isnan_isinf():
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float16)
    assert unary("isnan", x, out=bool).tolist() == [1, 0, 0, 0]
    assert unary("isinf", x, out=bool).tolist() == [0, 1, 1, 0]


def test_binary_float_math():
    a = np.array([2.0, -1.0, 0.5, 9.0], np.float32)
    b = np.array([3.0, 2.0, -1.0, 0.5], np.float32)
    np.testing.assert_allclose(apply("%out = pow %a0, %a1 : T", a, b), np.power(a, b), rtol=1e-7)
    np.testing.assert_allclose(apply("%out = atan2 %a0, %a1 : T", a, b), np.arctan2(a, b), rtol=1e-7)
    assert apply("%out = copysign %a0, %a1 : T", a, b).tolist() == [2.0, 1.0, -0.5, 9.0]
    assert apply("%out = div_rn %a0, %a1 : T", a, b).tolist() == (a / b).tolist()


def test_fma_rounds_once():
    a = np.array([1 + 2**-23, 3.0, 1 + 2**-12, 1 + 2**-12], np.float32)
    b = np.array([1 - 2**-23, 4.0, 1 + 2**-12, 1 + 2**-12], np.float32)
    c = np.array([-1.0, 0.5, 2.0**-80, 0.0], np.float32)
    got = apply("%out = fma %a0, %a1, %a2 : T", a, b, c)
    # unfused fp32 gives 0 for the first; an fp64 sum then fp32 rounding ties the third down
    assert got.tolist() == [-2.0**-46, 12.5, 1 + 2**-11 + 2**-23, 1 + 2**-11]


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
def test_half_math_rounds_back(dt):
    x = X.astype(dt)
    got = unary("exp", x)
    assert got.dtype == np.dtype(dt)
    assert got.tobytes() == np.exp(x.astype(np.float32)).astype(dt).tobytes()


# --- casts ------------------------------------------------------------------------------
def test_int_to_int_wraps_and_extends_per_source_sign():
    x = np.array([-1, 127, -128, 5], np.int8)
    assert cast(x, np.uint32).tolist() == [2**32 - 1, 127, 2**32 - 128, 5]
    assert cast(x.view(np.uint8), np.int32).tolist() == [255, 127, 128, 5]
    assert cast(np.array([300, -300, 2**31 - 1, 65536], np.int32), np.int16).tolist() == [300, -300, -1, 0]
    assert cast(np.array([2**40 + 7, -1, 0, 1], np.int64), np.uint32).tolist() == [7, 2**32 - 1, 0, 1]


def test_int1_casts():
    b = np.array([0, 1, 1, 0], bool)
    assert cast(b, np.int32).tolist() == [0, 1, 1, 0]
    assert cast(b, np.float32).tolist() == [0.0, 1.0, 1.0, 0.0]
    assert cast(np.array([0, 2, -1, 256], np.int32), bool).tolist() == [0, 1, 1, 1]
    assert cast(np.array([0.0, 0.5, -0.0, np.nan], np.float32), bool).tolist() == [0, 1, 0, 1]


def test_float_to_int_truncates_and_saturates():
    x = np.array([1.9, -1.9, 3e9, -3e9, np.nan, np.inf, -np.inf, 2147483520.0], np.float32)
    assert cast(x, np.int32).tolist() == [1, -1, 2**31 - 1, -2**31, 0, 2**31 - 1, -2**31, 2147483520]
    assert cast(x, np.uint8).tolist() == [1, 0, 255, 0, 0, 255, 0, 255]
    big = np.array([1e30, -1e30, 9.2e18, -9.3e18], np.float64)
    assert cast(big, np.int64).tolist() == [2**63 - 1, -2**63, 9200000000000000000, -2**63]
    assert cast(big, np.uint64).tolist() == [2**64 - 1, 0, 9200000000000000000, 0]


def test_float_narrowing_rtne_and_rtz():
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 3 * 2**-11), 70000.0, 1e-8, -70000.0, np.inf, 2.0], np.float32)
    assert cast(x, np.float16).tolist() == [1.0, 1 + 2**-9, -(1 + 2**-9), np.inf, 0.0, -np.inf, np.inf, 2.0]
    rtz = cast(x, np.float16, '{rounding = "rtz"}')
    assert rtz.tolist() == [1.0, 1 + 2**-10, -(1 + 2**-10), 65504.0, 0.0, -65504.0, np.inf, 2.0]
    bf = cast(np.array([1 + 2**-8 + 2**-10, 1 + 2**-8, 3.0, -1 - 2**-7 - 3 * 2**-9], np.float32), ml_dtypes.bfloat16)
    assert bf.astype(np.float32).tolist() == [1 + 2**-7, 1.0, 3.0, -1 - 2**-6]
    bf_rtz = cast(np.array([1 + 2**-8 + 2**-10, -1 - 2**-7 - 3 * 2**-9], np.float32), ml_dtypes.bfloat16, '{rounding = "rtz"}')
    assert bf_rtz.astype(np.float32).tolist() == [1.0, -1 - 2**-7]


def test_widening_and_fp8_saturation():
    h = np.array([1.5, -2.25, 65504.0, np.inf], np.float16)
    assert cast(h, np.float32).tolist() == [1.5, -2.25, 65504.0, np.inf]
    b = cast(np.array([1.0, 2.5, 3.0, -7.0], ml_dtypes.bfloat16), np.float64)
    assert b.tolist() == [1.0, 2.5, 3.0, -7.0]
    f8 = cast(np.array([1.0, 1000.0, -1e9, 0.3], np.float32), ml_dtypes.float8_e4m3fn)
    assert f8.astype(np.float32).tolist() == [1.0, 448.0, -448.0, 0.3125]
    assert cast(np.array([3, -5, 2**24 + 1, 0], np.int32), ml_dtypes.bfloat16).astype(np.float32).tolist() == \
        [3.0, -5.0, 2.0**24, 0.0]


def test_bitcast_and_pointer_casts():
    x = np.array([1.0, -2.0], np.float32)
    assert apply("%out = bitcast %a0 : R", x, out=np.int32).tolist() == [0x3F800000, -0x40000000]
    assert apply("%out = bitcast %a0 : R", x.view(np.uint32), out=np.float32).tolist() == [1.0, -2.0]
    # ptr -> int64 -> ptr round trip keeps the address: load through the rebuilt pointer
    text = """kernel @p(%x: ptr<fp32>, %o: ptr<int64>) {
      %i = cast %x : int64
      %c4 = constant {value = 4} : int64
      %j = add %i, %c4 : int64
      %q = cast %j : ptr<fp32>
      %v = load %q : fp32
      %vi = cast %v : int64
      store %o, %vi
      return
    }"""
    fn = parse_function(text)
    verify(fn)
    src, out = np.array([5.0, 7.0], np.float32), np.zeros(1, np.int64)
    run(fn, (1,), [src, out])
    assert out[0] == 7


def test_fp64_to_bf16_rounds_once():
    # Through fp32 this would tie and round to even (1.0); rounded once it goes up.
    x = np.array([1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40)], np.float64)
    assert cast(x, ml_dtypes.bfloat16).astype(np.float64).tolist() == [1 + 2**-7, -(1 + 2**-7)]
    assert cast(x, ml_dtypes.bfloat16, '{rounding = "rtz"}').astype(np.float64).tolist() == [1.0, -1.0]
