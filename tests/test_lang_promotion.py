"""Conformance: Triton's type-promotion table and C-style integer semantics.

Expected result types were checked against Triton 3.6 (python/triton/language/semantic.py:
computation_type_impl, binary_op_type_checking_impl, and core.py's operator methods).
"""
import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl

NP = {tl.int1: np.bool_, tl.int8: np.int8, tl.int16: np.int16, tl.int32: np.int32, tl.int64: np.int64,
      tl.uint8: np.uint8, tl.uint16: np.uint16, tl.uint32: np.uint32, tl.uint64: np.uint64,
      tl.float16: np.float16, tl.bfloat16: ml_dtypes.bfloat16, tl.float32: np.float32, tl.float64: np.float64}


@kiln.jit
def _apply(a, b, OP: tl.constexpr):
    # a Python scalar passed to a @jit function stays a constexpr there, as in Triton
    if OP == "+":
        r = a + b
    elif OP == "-":
        r = a - b
    elif OP == "*":
        r = a * b
    elif OP == "/":
        r = a / b
    elif OP == "//":
        r = a // b
    elif OP == "%":
        r = a % b
    elif OP == "&":
        r = a & b
    elif OP == "|":
        r = a | b
    elif OP == "^":
        r = a ^ b
    elif OP == "<<":
        r = a << b
    elif OP == ">>":
        r = a >> b
    elif OP == "<":
        r = a < b
    elif OP == "==":
        r = a == b
    elif OP == "maximum":
        r = tl.maximum(a, b)
    elif OP == "where":
        r = tl.where(a > 0, a, b)
    else:
        tl.static_assert(False, "unknown op")
    return r


@kiln.jit
def _binop(a_ptr, b_ptr, out_ptr, OP: tl.constexpr, S: tl.constexpr, SCALAR_LEFT: tl.constexpr,
           EXPECT: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    if S is None:
        r = _apply(a, tl.load(b_ptr + offs), OP)
    elif SCALAR_LEFT:
        r = _apply(S, a, OP)
    else:
        r = _apply(a, S, OP)
    tl.static_assert(r.dtype == EXPECT, "unexpected result dtype")
    tl.store(out_ptr + offs, r)


def _launch(op, a_dt, b, expect, scalar_left=False, a_vals=None, b_vals=None):
    n = 8
    a = np.asarray(a_vals if a_vals is not None else np.arange(1, n + 1), NP[a_dt])
    if isinstance(b, tl.dtype):
        bt = np.asarray(b_vals if b_vals is not None else np.arange(1, n + 1), NP[b])
        s = None
    else:
        bt = np.zeros(n, np.int32)
        s = b
    out = np.zeros(n, NP[expect])
    _binop[(1,)](a, bt, out, OP=op, S=s, SCALAR_LEFT=scalar_left, EXPECT=expect, N=n)
    return a, (bt if s is None else s), out


# (op, left tensor dtype, right operand: a dtype (tensor) or a Python scalar, Triton's result dtype)
PROMOTION = [
    ("+", tl.int8, 1, tl.int8), ("+", tl.int8, True, tl.int8), ("*", tl.int16, 300, tl.int16),
    ("*", tl.float16, 1.5, tl.float16), ("+", tl.bfloat16, 2.0, tl.bfloat16), ("-", tl.float16, 2, tl.float16),
    ("/", tl.float16, tl.float16, tl.float32), ("/", tl.float16, 2.0, tl.float32), ("%", tl.float16, 1.5, tl.float32),
    ("/", tl.bfloat16, tl.bfloat16, tl.float32),
    ("/", tl.int32, tl.int32, tl.float32), ("/", tl.int8, tl.int8, tl.float32), ("/", tl.int64, tl.int64, tl.float32),
    ("/", tl.int8, tl.int64, tl.float32), ("/", tl.int32, 2, tl.float32),
    ("+", tl.uint32, tl.int32, tl.uint32), ("+", tl.uint8, tl.int32, tl.int32), ("+", tl.uint32, tl.int64, tl.int64),
    ("+", tl.int8, tl.uint8, tl.uint8), ("-", tl.uint8, tl.int8, tl.uint8), ("*", tl.int16, tl.uint16, tl.uint16),
    ("+", tl.uint32, 2**31, tl.uint32), ("+", tl.int64, 2**31, tl.int64), ("+", tl.int64, 2**32 + 1, tl.int64),
    ("+", tl.int32, -2**31, tl.int32),
    ("*", tl.int32, 1.5, tl.float32), ("*", tl.int64, 1.5, tl.float32), ("*", tl.int8, 0.5, tl.float32),
    ("+", tl.int32, 1e-40, tl.float64), ("+", tl.int32, 1e300, tl.float64), ("+", tl.float32, 1e300, tl.float32),
    ("+", tl.float16, 1e-40, tl.float16),
    ("+", tl.bfloat16, tl.bfloat16, tl.bfloat16), ("+", tl.bfloat16, tl.float16, tl.float16),
    ("+", tl.bfloat16, tl.int32, tl.float32), ("+", tl.float16, tl.float32, tl.float32),
    ("+", tl.float16, tl.int32, tl.float16), ("+", tl.float64, tl.int8, tl.float64),
    ("+", tl.float16, tl.float64, tl.float64),
    ("+", tl.int1, tl.int1, tl.int1), ("+", tl.int1, True, tl.int1), ("+", tl.int1, 1, tl.int32),
    ("&", tl.int8, 1, tl.int8), ("|", tl.int16, 300, tl.int16), ("^", tl.uint8, 255, tl.uint8),
    ("&", tl.int8, tl.int16, tl.int16), ("&", tl.int8, tl.uint8, tl.uint8), ("<<", tl.uint8, 1, tl.uint8),
    (">>", tl.int8, tl.int32, tl.int32),
    ("<", tl.int8, 300, tl.int1), ("<", tl.uint8, -1, tl.int1), ("==", tl.uint32, -1, tl.int1),
    ("<", tl.float16, 1.5, tl.int1),
    ("maximum", tl.int8, 2, tl.int32), ("maximum", tl.float16, 1.5, tl.float32),
    ("maximum", tl.bfloat16, tl.bfloat16, tl.float32), ("maximum", tl.float16, tl.float16, tl.float16),
    ("where", tl.int8, 7, tl.int8), ("where", tl.float16, 1.5, tl.float16), ("where", tl.int8, 1.5, tl.float32),
]


def _np_ref(op, a, b):
    if np.asarray(a).dtype == np.bool_ and op in "+-*":  # int1 arithmetic wraps modulo 2
        r = _np_ref(op, np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64))
        return (r & 1).astype(np.bool_)
    with np.errstate(all="ignore"):
        if op == "maximum":
            return np.maximum(a, b)
        if op == "where":
            return np.where(a > 0, a, b)
        return {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "%": np.fmod,
                "&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor, "<<": np.left_shift,
                ">>": np.right_shift, "<": np.less, "==": np.equal}[op](a, b)


@pytest.mark.parametrize("op,a_dt,b,expect", PROMOTION, ids=lambda v: str(v))
def test_promotion_table(op, a_dt, b, expect):
    a, bv, out = _launch(op, a_dt, b, expect)
    to = NP[expect]
    if isinstance(b, tl.dtype):
        ref = _np_ref(op, a.astype(to), bv.astype(to)) if op not in ("<", "==") else _np_ref(op, a, bv)
    elif op in ("<", "=="):
        ref = _np_ref(op, a.astype(np.int64), b)  # compared as int32 (or wider), so no wrap of the scalar
    else:
        with np.errstate(over="ignore"):
            ref = _np_ref(op, a.astype(to), np.array(b).astype(to))
    np.testing.assert_allclose(out.astype(np.float64), np.asarray(ref).astype(to).astype(np.float64), rtol=1e-3)


@pytest.mark.parametrize("op,a_dt,b,expect", [("+", tl.int8, 1, tl.int8), ("*", tl.float16, 1.5, tl.float16),
                                              ("-", tl.uint32, 7, tl.uint32), ("/", tl.int16, 3, tl.float32)])
def test_python_scalar_on_the_left(op, a_dt, b, expect):
    a, _, out = _launch(op, a_dt, b, expect, scalar_left=True)
    with np.errstate(all="ignore"):
        ref = _np_ref(op, np.array(b).astype(NP[expect]), a.astype(NP[expect]))
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=1e-3)


@pytest.mark.parametrize("op,a_dt,b,match", [
    ("+", tl.int8, 300, "out of range"), ("&", tl.int8, 255, "out of range"), ("+", tl.int32, 2**31, "out of range"),
    ("+", tl.uint32, 2**32 + 1, "out of range"), ("+", tl.uint8, -1, "unsigned"), ("&", tl.uint32, -1, "unsigned"),
    ("//", tl.uint32, tl.int32, "signedness"), ("%", tl.uint32, tl.int32, "signedness"),
    ("/", tl.uint8, tl.int8, "signedness"), ("//", tl.float32, tl.float32, "fp32"), ("&", tl.float32, tl.int32, "float32"),
    ("+", tl.float32, tl.float16, "unexpected result dtype"),  # the table says fp32, not fp16
])
def test_promotion_errors(op, a_dt, b, match):
    expect = tl.float16 if match == "unexpected result dtype" else tl.int32
    with pytest.raises(kiln.CompilationError, match=match):
        _launch(op, a_dt, b, expect)


# --- integer semantics ----------------------------------------------------------------

def c_div(a, b):
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def c_mod(a, b):
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    return a - c_div(a, b) * b


@pytest.mark.parametrize("dt", [tl.int8, tl.int16, tl.int32, tl.int64])
def test_integer_floordiv_and_mod_truncate_toward_zero(dt):
    a = np.array([7, -7, 7, -7, 0, 1, -1, 100], NP[dt])
    b = np.array([2, 2, -2, -2, 3, -3, 3, -9], NP[dt])
    _, _, q = _launch("//", dt, dt, dt, a_vals=a, b_vals=b)
    _, _, r = _launch("%", dt, dt, dt, a_vals=a, b_vals=b)
    np.testing.assert_array_equal(q, c_div(a, b))
    np.testing.assert_array_equal(r, c_mod(a, b))
    assert q[1] == -3 and r[1] == -1  # Python would give -4 and 1


def test_integer_floordiv_and_mod_by_python_scalars():
    a = np.array([-9, -8, -7, -1, 0, 1, 7, 9], np.int32)
    for s in (4, -4, 3):
        _, _, q = _launch("//", tl.int32, s, tl.int32, a_vals=a)
        _, _, r = _launch("%", tl.int32, s, tl.int32, a_vals=a)
        np.testing.assert_array_equal(q, c_div(a, s))
        np.testing.assert_array_equal(r, c_mod(a, s))


def test_unsigned_division_and_mod():
    a = np.array([0xFFFFFFFF, 10, 7, 2**31, 5, 0, 1, 12345678], np.uint32)
    b = np.array([2, 3, 7, 3, 10, 5, 1, 1000], np.uint32)
    _, _, q = _launch("//", tl.uint32, tl.uint32, tl.uint32, a_vals=a, b_vals=b)
    _, _, r = _launch("%", tl.uint32, tl.uint32, tl.uint32, a_vals=a, b_vals=b)
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)


def test_float_mod_takes_the_sign_of_the_dividend():
    a = np.array([-7.5, 7.5, -7.5, 7.5, 1.0, -0.25, 5.0, 0.0], np.float32)
    b = np.array([2.0, -2.0, -2.0, 2.0, 3.0, 1.0, 2.5, 1.0], np.float32)
    _, _, r = _launch("%", tl.float32, tl.float32, tl.float32, a_vals=a, b_vals=b)
    np.testing.assert_array_equal(r, np.fmod(a, b))
    assert r[0] == -1.5  # Python's % would give 0.5


@pytest.mark.parametrize("dt,a,b,op", [
    (tl.int8, [100, 127, -128, 50, 1, 2, 3, 4], [100, 1, -1, 50, 1, 2, 3, 4], "+"),
    (tl.int8, [-128, 100, 16, -100, 1, 2, 3, 4], [1, -100, 16, 100, 1, 2, 3, 4], "-"),
    (tl.int8, [16, -128, 64, 100, 1, 2, 3, 4], [16, -1, 4, 100, 1, 2, 3, 4], "*"),
    (tl.int32, [2**31 - 1, -2**31, 65536, 123456789, 1, 2, 3, 4], [1, -1, 65536, 987654321, 1, 2, 3, 4], "+"),
    (tl.int32, [2**31 - 1, -2**31, 65536, 123456789, 1, 2, 3, 4], [2, -1, 65536, 987654321, 1, 2, 3, 4], "*"),
    (tl.uint32, [0, 1, 5, 2**32 - 1, 1, 2, 3, 4], [1, 2, 6, 2**32 - 1, 1, 2, 3, 4], "-"),
    (tl.uint32, [2**32 - 1, 2**31, 3, 4, 1, 2, 3, 4], [2**32 - 1, 2, 2**31, 2**30, 1, 2, 3, 4], "*"),
    (tl.uint8, [250, 255, 0, 128, 1, 2, 3, 4], [10, 1, 0, 128, 1, 2, 3, 4], "+"),
])
def test_fixed_width_wraparound(dt, a, b, op):
    a = np.array(a, NP[dt])
    b = np.array(b, NP[dt])
    _, _, out = _launch(op, dt, dt, dt, a_vals=a, b_vals=b)
    with np.errstate(all="ignore"):
        ref = _np_ref(op, a, b)
    np.testing.assert_array_equal(out, ref)


def test_uint32_int32_mixing_wraps_in_uint32():
    a = np.array([0, 1, 2, 3, 4, 5, 6, 7], np.uint32)
    b = np.array([-1, -2, 5, -100, 0, 1, 2**31 - 1, -2**31], np.int32)
    _, _, out = _launch("+", tl.uint32, tl.int32, tl.uint32, a_vals=a, b_vals=b)
    np.testing.assert_array_equal(out, a + b.astype(np.uint32))
    _, _, lt = _launch("<", tl.uint32, tl.int32, tl.int1, a_vals=a, b_vals=b)
    np.testing.assert_array_equal(lt, a < b.astype(np.uint32))  # -1 compares as 0xFFFFFFFF


def test_shifts_are_arithmetic_for_signed_and_logical_for_unsigned():
    a8 = np.array([-128, -1, 64, 5, -7, 127, 0, -64], np.int8)
    _, _, r = _launch(">>", tl.int8, 1, tl.int8, a_vals=a8)
    np.testing.assert_array_equal(r, a8 >> 1)
    u8 = a8.view(np.uint8)
    _, _, r = _launch(">>", tl.uint8, 1, tl.uint8, a_vals=u8)
    np.testing.assert_array_equal(r, u8 >> 1)
    _, _, r = _launch("<<", tl.int8, 1, tl.int8, a_vals=a8)
    np.testing.assert_array_equal(r, (a8.astype(np.int32) << 1).astype(np.int8))


@kiln.jit
def _constexpr_math(out_ptr, A: tl.constexpr, B: tl.constexpr):
    tl.store(out_ptr + 0, A // B)
    tl.store(out_ptr + 1, A % B)
    a = tl.full((), A, tl.int32)
    tl.store(out_ptr + 2, a // B)
    tl.store(out_ptr + 3, a % B)


def test_constexpr_arithmetic_is_python_but_tensor_arithmetic_is_c():
    out = np.zeros(4, np.int32)
    _constexpr_math[(1,)](out, A=-7, B=2)
    assert out.tolist() == [-4, 1, -3, -1]


@kiln.jit
def _unary_ops(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, -x)
    tl.store(out_ptr + N + offs, ~x)
    tl.store(out_ptr + 2 * N + offs, x - x + x)


def test_negation_and_invert_wrap():
    x = np.array([-128, 127, 0, 1, -1, 100, -100, 5], np.int8)
    out = np.zeros(24, np.int8)
    _unary_ops[(1,)](x, out, N=8)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out[:8], -x)
    np.testing.assert_array_equal(out[8:16], ~x)
    np.testing.assert_array_equal(out[16:], x)


@kiln.jit
def _runtime_int_args(out_ptr, i32, i64, u64):
    tl.static_assert(i32.dtype == tl.int32)
    tl.static_assert(i64.dtype == tl.int64)
    tl.static_assert(u64.dtype == tl.uint64)
    tl.store(out_ptr + 0, (i32 + 1).to(tl.int64))
    tl.store(out_ptr + 1, i64 * 2)
    tl.store(out_ptr + 2, (u64 >> 60).to(tl.int64))


def test_integer_arguments_are_typed_by_value():
    out = np.zeros(3, np.int64)
    _runtime_int_args[(1,)](out, 2**31 - 1, 2**40, 2**63 + 5)
    assert out.tolist() == [-2**31, 2**41, 8]  # int32 + 1 wraps


@kiln.jit
def _assigned_scalars(x_ptr, h_ptr, out_ptr, out_h_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    one = 1  # a plain assignment makes an int32 scalar tensor, as in Triton
    tl.static_assert((x + one).dtype == tl.int32)
    ONE: tl.constexpr = 1  # a constexpr keeps the scalar rule
    tl.static_assert((x + ONE).dtype == tl.int8)
    tl.static_assert((x + 1).dtype == tl.int8)
    tl.store(out_ptr + offs, x + one)
    h = tl.load(h_ptr + offs)
    eps = 1e-3
    y = h + eps
    tl.static_assert(y.dtype == tl.float32)
    tl.static_assert((h + 1e-3).dtype == tl.float16)
    tl.store(out_h_ptr + offs, y)


def test_assigned_python_scalars_are_tensors():
    x = np.array([127, -128, 0, 5], np.int8)
    h = np.array([1.0, 2.0, 1000.0, -1.0], np.float16)
    out = np.zeros(4, np.int32)
    out_h = np.zeros(4, np.float32)
    _assigned_scalars[(1,)](x, h, out, out_h, N=4)
    np.testing.assert_array_equal(out, x.astype(np.int32) + 1)  # no int8 wrap: 127 + 1 == 128
    np.testing.assert_array_equal(out_h, h.astype(np.float32) + np.float32(1e-3))


@kiln.jit
def _assigned_int_division(out_ptr):
    a = -7
    tl.store(out_ptr + 0, a // 2)  # a is an int32 tensor: C division
    tl.store(out_ptr + 1, a % 2)
    B: tl.constexpr = -7
    tl.store(out_ptr + 2, B // 2)  # a constexpr: Python division
    tl.store(out_ptr + 3, B % 2)


def test_assigned_integers_divide_like_c():
    out = np.zeros(4, np.int32)
    _assigned_int_division[(1,)](out)
    assert out.tolist() == [-3, -1, -4, 1]


def test_int64_extremes_wrap_and_divide_like_c():
    a = np.array([-2**63, 2**63 - 1, -5, 12345678901234, -7, 7, 0, -1], np.int64)
    _, _, q = _launch("//", tl.int64, 7, tl.int64, a_vals=a)
    _, _, r = _launch("%", tl.int64, 7, tl.int64, a_vals=a)
    _, _, m = _launch("*", tl.int64, 3, tl.int64, a_vals=a)
    _, _, s = _launch(">>", tl.int64, 3, tl.int64, a_vals=a)
    exact = [int(v) for v in a]

    def div(x, y):  # on Python ints: abs(-2**63) does not fit in int64
        quotient = abs(x) // abs(y)
        return -quotient if (x < 0) != (y < 0) else quotient

    np.testing.assert_array_equal(q, [div(v, 7) for v in exact])
    np.testing.assert_array_equal(r, [v - div(v, 7) * 7 for v in exact])
    np.testing.assert_array_equal(m, [((v * 3 + 2**63) % 2**64) - 2**63 for v in exact])
    np.testing.assert_array_equal(s, [v >> 3 for v in exact])
