"""Interpreter: integer and float elementwise arithmetic, comparison and selection."""
import numpy as np
import ml_dtypes
import pytest

from kiln.interpret import run
from kiln.ir import parse_function, verify
from kiln.ir.types import from_numpy


def tname(dt) -> str:
    return from_numpy(np.dtype(dt)).name


def map_kernel(in_types, out_type, n, body):
    """A one-program kernel: load inputs %a0, %a1, ... (<n x type>), run `body`, store %out."""
    args = [f"%p{i}: ptr<{t}>" for i, t in enumerate(in_types)] + [f"%po: ptr<{out_type}>"]
    lines = [f"%r = arange {{start = 0, end = {n}}} : <{n}xint32>"]
    for i, t in enumerate(in_types):
        lines += [f"%s{i} = splat %p{i} : <{n}xptr<{t}>>",
                  f"%q{i} = addptr %s{i}, %r : <{n}xptr<{t}>>",
                  f"%a{i} = load %q{i} : <{n}x{t}>"]
    lines += body.splitlines()
    lines += [f"%so = splat %po : <{n}xptr<{out_type}>>",
              f"%qo = addptr %so, %r : <{n}xptr<{out_type}>>",
              "store %qo, %out", "return"]
    text = f"kernel @map({', '.join(args)}) {{\n" + "\n".join("  " + l for l in lines) + "\n}\n"
    fn = parse_function(text)
    verify(fn)
    return fn


def apply(body, *inputs, out=None):
    inputs = [np.ascontiguousarray(x) for x in inputs]
    n = inputs[0].size
    out_dt = np.dtype(out or inputs[0].dtype)
    body = body.replace("T", f"<{n}x{tname(inputs[0].dtype)}>").replace("R", f"<{n}x{tname(out_dt)}>")
    fn = map_kernel([tname(x.dtype) for x in inputs], tname(out_dt), n, body)
    result = np.zeros(n, out_dt)
    run(fn, (1,), [*inputs, result])
    return result


def binop(name, a, b, attrs="", out=None):
    return apply(f"%out = {name} %a0, %a1 {attrs} : R", a, b, out=out)


def c_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def wrap(v, bits, signed):
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


# --- integers ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [np.int8, np.int32, np.uint32, np.int64, np.uint64])
def test_add_sub_mul_wrap(dt):
    info = np.iinfo(dt)
    a = np.array([info.max, info.min, info.max, 7, 0, 1, info.max // 3, 5], dt)
    b = np.array([1, np.array(-1).astype(dt) if info.min < 0 else 1, info.max, 3, 0, info.max, 5, 2], dt)
    bits, signed = a.dtype.itemsize * 8, info.min < 0
    for name, fn in [("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y)]:
        want = [wrap(fn(int(x), int(y)), bits, signed) for x, y in zip(a, b)]
        assert binop(name, a, b).tolist() == want, name


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_div_rem_are_c_semantics(dt):
    info = np.iinfo(dt)
    if info.min < 0:
        a = np.array([7, -7, 7, -7, info.min, info.min, 0, 5], dt)
        b = np.array([2, 2, -2, -2, -1, 3, 3, 0], dt)
    else:
        a = np.array([7, 200, info.max, 0, 9, 1, 5, 5], dt)
        b = np.array([2, 7, 3, 3, 10, 1, 5, 0], dt)
    q, r = binop("div", a, b), binop("rem", a, b)  # x / 0 must not crash
    bits, signed = a.dtype.itemsize * 8, info.min < 0
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        if y == 0:
            continue
        assert q[i] == wrap(c_div(x, y), bits, signed), (x, y)
        assert r[i] == wrap(x - c_div(x, y) * y, bits, signed), (x, y)


def test_shifts_past_the_width_and_signedness():
    a = np.array([1, -8, -8, 1, -1, 3, 12345, -1], np.int32)
    b = np.array([31, 1, 40, 32, 33, -1, 0, 31], np.int32)
    assert binop("shl", a, b).tolist() == [-2**31, -16, 0, 0, 0, 0, 12345, -2**31]
    assert binop("shr", a, b).tolist() == [0, -4, -1, 0, -1, 0, 12345, -1]
    ua = a.view(np.uint32)
    assert binop("shr", ua, b.view(np.uint32)).tolist() == [0, (2**32 - 8) >> 1, 0, 0, 0, 0, 12345, 1]
    assert binop("shl", np.array([1, 1], np.uint8), np.array([7, 8], np.uint8)).tolist() == [128, 0]


@pytest.mark.parametrize("dt", [np.int32, np.uint32, np.int64, np.uint64, np.int8])
def test_umulhi(dt):
    rng = np.random.default_rng(0)
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, 16, dtype=dt, endpoint=True)
    b = rng.integers(info.min, info.max, 16, dtype=dt, endpoint=True)
    a[:4] = [info.max, info.min, info.max, -1 if info.min else 1]
    b[:4] = [info.max, info.min, info.min, -1 if info.min else info.max]
    bits, signed = a.dtype.itemsize * 8, info.min < 0
    want = [wrap((int(x) * int(y)) >> bits, bits, signed) for x, y in zip(a, b)]
    assert binop("umulhi", a, b).tolist() == want


def test_int_min_max_and_bitwise():
    a = np.array([-1, 5, 0, 3], np.int32)
    b = np.array([2, -7, 0, 12], np.int32)
    assert binop("min", a, b).tolist() == [-1, -7, 0, 3]
    assert binop("max", a.view(np.uint32), b.view(np.uint32)).tolist() == [2**32 - 1, 2**32 - 7, 0, 12]
    assert binop("and", a, b).tolist() == (a & b).tolist()
    assert binop("or", a, b).tolist() == (a | b).tolist()
    assert binop("xor", a, b).tolist() == (a ^ b).tolist()


def test_int1_is_arithmetic_modulo_two():
    a = np.array([0, 0, 1, 1], bool)
    b = np.array([0, 1, 0, 1], bool)
    assert binop("add", a, b).tolist() == [0, 1, 1, 0]
    assert binop("mul", a, b).tolist() == [0, 0, 0, 1]
    assert binop("max", a, b).tolist() == [0, 1, 1, 1]
    assert binop("shl", a, b).tolist() == [0, 0, 1, 0]
    assert apply("%out = not %a0 : T", a).tolist() == [1, 1, 0, 0]


def test_unary_integer_ops():
    a = np.array([-128, -1, 0, 127], np.int8)
    assert apply("%out = neg %a0 : T", a).tolist() == [-128, 1, 0, -127]
    assert apply("%out = abs %a0 : T", a).tolist() == [-128, 1, 0, 127]
    assert apply("%out = not %a0 : T", a).tolist() == [127, 0, -1, -128]
    u = np.array([0, 1, 255, 128], np.uint8)
    assert apply("%out = neg %a0 : T", u).tolist() == [0, 255, 1, 128]
    assert apply("%out = abs %a0 : T", u).tolist() == [0, 1, 255, 128]


# --- floats -----------------------------------------------------------------------------
def test_float_div_rem():
    a = np.array([7.5, -7.5, 1.0, 0.0], np.float32)
    b = np.array([2.0, 2.0, 0.0, 0.0], np.float32)
    q = binop("div", a, b)
    assert q[:3].tolist() == [3.75, -3.75, np.inf] and np.isnan(q[3])
    r = binop("rem", a, b)
    assert r[:2].tolist() == [1.5, -1.5] and np.isnan(r[2])


def test_float_min_max_nan():
    a = np.array([1.0, np.nan, 3.0, np.nan], np.float32)
    b = np.array([2.0, 5.0, np.nan, np.nan], np.float32)
    lo = binop("min", a, b)
    assert lo[:3].tolist() == [1.0, 5.0, 3.0] and np.isnan(lo[3])
    hi = binop("max", a, b, "{propagate_nan = true}")
    assert hi[0] == 2.0 and np.isnan(hi[1:]).all()


@pytest.mark.parametrize("pred,want", [("eq", [1, 0, 0, 0]), ("ne", [0, 1, 1, 1]), ("lt", [0, 1, 0, 0]),
                                       ("le", [1, 1, 0, 0]), ("gt", [0, 0, 0, 0]), ("ge", [1, 0, 0, 0])])
def test_float_cmp_unordered(pred, want):
    a = np.array([1.0, 1.0, np.nan, np.nan], np.float32)
    b = np.array([1.0, 2.0, 1.0, np.nan], np.float32)
    assert binop("cmp", a, b, f"{{pred = \"{pred}\"}}", out=bool).tolist() == want


def test_unsigned_cmp_and_select():
    a = np.array([1, 2**32 - 1], np.uint32)
    b = np.array([2, 1], np.uint32)
    assert binop("cmp", a, b, '{pred = "lt"}', out=bool).tolist() == [1, 0]
    got = apply('%c = cmp %a0, %a1 {pred = "lt"} : <2xint1>\n%out = select %c, %a0, %a1 : T', a, b)
    assert got.tolist() == [1, 1]


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
def test_half_types_compute_in_fp32(dt):
    a = np.array([1.0, 3.0, 100.0, 0.1], np.float32).astype(dt)
    b = np.array([3.0, 7.0, 0.01, 0.2], np.float32).astype(dt)
    for name, fn in [("add", np.add), ("mul", np.multiply), ("div", np.divide)]:
        want = fn(a.astype(np.float32), b.astype(np.float32)).astype(dt)
        got = binop(name, a, b)
        assert got.dtype == np.dtype(dt)
        assert got.tobytes() == want.tobytes(), name
