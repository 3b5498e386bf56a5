"""Interpreter: shape ops, dot, reduce and scan (combine regions run on whole arrays)."""
import ml_dtypes
import numpy as np
import pytest

from kiln.interpret import run
from kiln.ir import parse_function, verify
from kiln.ir.types import from_numpy


def tname(dt) -> str:
    return from_numpy(np.dtype(dt)).name


def shape_str(shape, t):
    return "<" + "x".join(map(str, shape)) + f"x{t}>" if shape else t


def kernel(body, inputs, out_shape, out_dtype):
    """Load each input (flat) as %f{i}, reshape it to its shape as %a{i}; `body` defines
    %out of `out_shape`, which is flattened and stored. Returns the output array."""
    lines, args = [], []
    for i, x in enumerate(inputs):
        t, n = tname(x.dtype), x.size
        args.append(f"%p{i}: ptr<{t}>")
        lines += [f"%r{i} = arange {{start = 0, end = {n}}} : <{n}xint32>",
                  f"%s{i} = splat %p{i} : <{n}xptr<{t}>>",
                  f"%q{i} = addptr %s{i}, %r{i} : <{n}xptr<{t}>>",
                  f"%f{i} = load %q{i} : <{n}x{t}>",
                  f"%a{i} = reshape %f{i} : {shape_str(x.shape, t)}" if x.ndim > 1 else f"%a{i} = multiple_of %f{i} {{values = [1]}} : <{n}x{t}>"]
    t = tname(out_dtype)
    args.append(f"%po: ptr<{t}>")
    lines += body.splitlines()
    n = int(np.prod(out_shape))
    if out_shape:
        lines += [f"%flat = reshape %out : <{n}x{t}>" if len(out_shape) > 1 else f"%flat = max_contiguous %out {{values = [1]}} : <{n}x{t}>",
                  f"%ro = arange {{start = 0, end = {n}}} : <{n}xint32>",
                  f"%so = splat %po : <{n}xptr<{t}>>",
                  f"%qo = addptr %so, %ro : <{n}xptr<{t}>>",
                  "store %qo, %flat"]
    else:
        lines.append("store %po, %out")
    fn = parse_function(f"kernel @b({', '.join(args)}) {{\n" + "\n".join(lines) + "\nreturn\n}")
    verify(fn)
    result = np.zeros(out_shape, out_dtype)
    run(fn, (1,), [np.ascontiguousarray(x) for x in inputs] + [result])
    return result


A = np.arange(32, dtype=np.int32).reshape(4, 8)


def test_reshape_permute_expand_broadcast():
    assert (kernel("%out = reshape %a0 : <8x4xint32>", [A], (8, 4), np.int32) == A.reshape(8, 4)).all()
    assert (kernel('%out = permute %a0 {order = [1, 0]} : <8x4xint32>', [A], (8, 4), np.int32) == A.T).all()
    B = np.arange(8, dtype=np.int32)
    got = kernel("%e = expand_dims %a0 {axis = 0} : <1x8xint32>\n%out = broadcast %e : <4x8xint32>", [B], (4, 8), np.int32)
    assert (got == np.broadcast_to(B, (4, 8))).all()
    got = kernel("%c = constant {value = 3} : int32\n%out = splat %c : <2x4xint32>", [B], (2, 4), np.int32)
    assert (got == 3).all()


def test_join_split_cat():
    B = np.arange(8, dtype=np.float32)
    C = -np.arange(8, dtype=np.float32)
    got = kernel("%out = join %a0, %a1 : <8x2xfp32>", [B, C], (8, 2), np.float32)
    assert (got == np.stack([B, C], -1)).all()
    J = np.stack([B, C], -1)
    got = kernel("%l, %h = split %a0 : <8xfp32>, <8xfp32>\n%out = sub %l, %h : <8xfp32>", [J], (8,), np.float32)
    assert (got == B - C).all()
    got = kernel("%out = cat %a0, %a1 : <16xfp32>", [B, C], (16,), np.float32)
    assert (got == np.concatenate([B, C])).all()


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_dot_float_accumulates_in_fp32(dt):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 32)).astype(dt)
    b = rng.standard_normal((32, 16)).astype(dt)
    acc = rng.standard_normal((16, 16)).astype(np.float32)
    got = kernel('%out = dot %a0, %a1, %a2 {input_precision = "ieee"} : <16x16xfp32>', [a, b, acc], (16, 16), np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64) + acc
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_dot_int8_and_batched():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (16, 64)).astype(np.int8)
    b = rng.integers(-128, 128, (64, 16)).astype(np.int8)
    acc = np.full((16, 16), 7, np.int32)
    got = kernel("%out = dot %a0, %a1, %a2 : <16x16xint32>", [a, b, acc], (16, 16), np.int32)
    assert (got == a.astype(np.int64) @ b.astype(np.int64) + 7).all()
    a3 = rng.standard_normal((2, 4, 8)).astype(np.float16)
    b3 = rng.standard_normal((2, 8, 4)).astype(np.float16)
    c3 = np.zeros((2, 4, 4), np.float16)
    got = kernel("%out = dot %a0, %a1, %a2 : <2x4x4xfp16>", [a3, b3, c3], (2, 4, 4), np.float16)
    want = (a3.astype(np.float32) @ b3.astype(np.float32)).astype(np.float16)
    assert (got == want).all()


SUM = """%{res} = reduce %{src} {{axis = {axis}}} : {rtype} {{
^(%{res}l: {t}, %{res}r: {t}):
  %{res}s = add %{res}l, %{res}r : {t}
  yield %{res}s
}}"""


def test_reduce_sum_along_each_axis_and_to_a_scalar():
    F = np.arange(32, dtype=np.float32).reshape(4, 8)
    got = kernel(SUM.format(res="out", src="a0", axis=1, rtype="<4xfp32>", t="fp32"), [F], (4,), np.float32)
    assert got.tolist() == F.sum(1).tolist()
    got = kernel(SUM.format(res="out", src="a0", axis=0, rtype="<8xfp32>", t="fp32"), [F], (8,), np.float32)
    assert got.tolist() == F.sum(0).tolist()
    V = np.arange(16, dtype=np.int8) * 20  # wraps at int8 in the combine region
    got = kernel(SUM.format(res="out", src="a0", axis=0, rtype="int8", t="int8"), [V], (), np.int8)
    assert got == (int(V.astype(np.int64).sum()) + 128) % 256 - 128


ARGMAX = """%i1 = arange {start = 0, end = 8} : <8xint32>
%i2 = expand_dims %i1 {axis = 0} : <1x8xint32>
%idx = broadcast %i2 : <4x8xint32>
%mx, %out = reduce %a0, %idx {axis = 1} : <4xfp32>, <4xint32> {
^(%lv: fp32, %li: int32, %rv: fp32, %ri: int32):
  %gt = cmp %lv, %rv {pred = "gt"} : int1
  %eq = cmp %lv, %rv {pred = "eq"} : int1
  %lt = cmp %li, %ri {pred = "lt"} : int1
  %tie = and %eq, %lt : int1
  %take = or %gt, %tie : int1
  %v = select %take, %lv, %rv : fp32
  %i = select %take, %li, %ri : int32
  yield %v, %i
}"""


def test_reduce_with_two_operands_argmax_first_of_ties():
    F = np.array([[1, 5, 2, 5, 0, 0, 0, 0], [9, 1, 1, 1, 1, 1, 1, 9], [0] * 8, [1, 2, 3, 4, 5, 6, 7, 8]], np.float32)
    got = kernel(ARGMAX, [F], (4,), np.int32)
    assert got.tolist() == [1, 0, 0, 7]


# "the last non-zero so far": associative but not commutative, so it checks lane order
LAST_NONZERO = """%{res} = {op} %a0 {{axis = {axis}{extra}}} : {rtype} {{
^(%l: int32, %r: int32):
  %z = constant {{value = 0}} : int32
  %nz = cmp %r, %z {{pred = "ne"}} : int1
  %pick = select %nz, %r, %l : int32
  yield %pick
}}"""


def test_reduce_and_scan_keep_lane_order():
    V = np.array([0, 3, 0, 0, 7, 0, 5, 0, 0, 0, 0, 2, 0, 0, 0, 0], np.int32)
    got = kernel(LAST_NONZERO.format(res="out", op="reduce", axis=0, extra="", rtype="int32"), [V], (), np.int32)
    assert got == 2
    fill = kernel(LAST_NONZERO.format(res="out", op="scan", axis=0, extra=", reverse = false", rtype="<16xint32>"),
                  [V], (16,), np.int32)
    assert fill.tolist() == [0, 3, 3, 3, 7, 7, 5, 5, 5, 5, 5, 2, 2, 2, 2, 2]
    back = kernel(LAST_NONZERO.format(res="out", op="scan", axis=0, extra=", reverse = true", rtype="<16xint32>"),
                  [V], (16,), np.int32)
    assert back.tolist() == [3, 3, 7, 7, 7, 5, 5, 2, 2, 2, 2, 2, 0, 0, 0, 0]


def test_cumsum_2d_and_scan_with_two_operands():
    F = np.arange(32, dtype=np.float32).reshape(4, 8)
    body = """%out = scan %a0 {axis = 1, reverse = false} : <4x8xfp32> {
^(%l: fp32, %r: fp32):
  %s = add %l, %r : fp32
  yield %s
}"""
    assert (kernel(body, [F], (4, 8), np.float32) == np.cumsum(F, 1)).all()
    rev = body.replace("axis = 1, reverse = false", "axis = 0, reverse = true")
    assert (kernel(rev, [F], (4, 8), np.float32) == np.cumsum(F[::-1], 0)[::-1]).all()
    # running (sum, count of positives) as two operands
    V = np.array([1, -2, 3, 4, -5, 6, 7, -8], np.int32)
    body2 = """%zero = constant {value = 0} : <8xint32>
%pos = cmp %a0, %zero {pred = "gt"} : <8xint1>
%cnt = cast %pos : <8xint32>
%sum, %out = scan %a0, %cnt {axis = 0, reverse = false} : <8xint32>, <8xint32> {
^(%ls: int32, %lc: int32, %rs: int32, %rc: int32):
  %s = add %ls, %rs : int32
  %c = add %lc, %rc : int32
  yield %s, %c
}"""
    assert kernel(body2, [V], (8,), np.int32).tolist() == np.cumsum(V > 0).tolist()


def test_combine_region_with_a_branch_per_lane():
    body = """%out = reduce %a0 {axis = 0} : int32 {
^(%l: int32, %r: int32):
  %gt = cmp %l, %r {pred = "gt"} : int1
  %m = if %gt : int32 {
  ^():
    yield %l
  } {
  ^():
    yield %r
  }
  yield %m
}"""
    V = np.array([3, 9, -1, 4, 12, 0, 5, 7], np.int32)
    assert kernel(body, [V], (), np.int32) == 12
