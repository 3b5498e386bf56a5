"""Conformance: reductions and scans (interpreter vs NumPy)."""
import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl

M, N = 4, 8


@kiln.jit
def _reduce_kernel(x_ptr, out_ptr, OP: tl.constexpr, AXIS: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if OP == "sum":
        r = tl.sum(x, axis=AXIS)
    elif OP == "max":
        r = tl.max(x, axis=AXIS)
    elif OP == "min":
        r = tl.min(x, axis=AXIS)
    elif OP == "argmax":
        r = tl.argmax(x, axis=AXIS)
    elif OP == "argmin":
        r = tl.argmin(x, axis=AXIS)
    elif OP == "xor_sum":
        r = tl.xor_sum(x, axis=AXIS)
    else:
        tl.static_assert(False)
    if AXIS == 0:
        tl.store(out_ptr + tl.arange(0, N), r)
    else:
        tl.store(out_ptr + tl.arange(0, M), r)


REFS = {"sum": np.sum, "max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin,
        "xor_sum": np.bitwise_xor.reduce}


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_reductions_along_each_axis(op, axis, dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(-100, 100, (M, N)).astype(dtype)
    out_dtype = np.int32 if op.startswith("arg") else dtype
    out = np.zeros(N if axis == 0 else M, out_dtype)
    _reduce_kernel[(1,)](x, out, OP=op, AXIS=axis, M=M, N=N)
    np.testing.assert_allclose(out, REFS[op](x, axis=axis), rtol=1e-6)


@pytest.mark.parametrize("axis", [0, 1])
def test_xor_sum(axis):
    x = np.random.default_rng(1).integers(0, 2**31, (M, N)).astype(np.int32)
    out = np.zeros(N if axis == 0 else M, np.int32)
    _reduce_kernel[(1,)](x, out, OP="xor_sum", AXIS=axis, M=M, N=N)
    np.testing.assert_array_equal(out, np.bitwise_xor.reduce(x, axis=axis))


@kiln.jit
def _full_reductions(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + 0, tl.sum(x))
    tl.store(out_ptr + 1, tl.max(x))
    tl.store(out_ptr + 2, tl.min(x, axis=0))
    tl.store(out_ptr + 3, x.sum())
    tl.store(out_ptr + 4, x.max(0))


def test_reductions_to_a_scalar_and_tensor_methods():
    x = np.array([3, -7, 12, 0, 5, 12, -7, 1], np.float32)
    out = np.zeros(5, np.float32)
    _full_reductions[(1,)](x, out, N=8)
    np.testing.assert_array_equal(out, [x.sum(), x.max(), x.min(), x.sum(), x.max()])


@kiln.jit
def _sum_int8(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    s = tl.sum(x)
    tl.static_assert(s.dtype == tl.int32)
    tl.store(out_ptr, s)
    tl.store(out_ptr + 1, tl.sum(x, dtype=tl.int8))


def test_sum_of_int8_accumulates_in_int32_unless_told():
    x = np.full(16, 100, np.int8)
    out = np.zeros(2, np.int32)
    _sum_int8[(1,)](x, out, N=16)
    assert out[0] == 1600
    assert out[1] == np.int8(np.int32(1600).astype(np.int8))  # 1600 wraps to 64 in int8


@kiln.jit
def _keep_dims(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    m = tl.max(x, axis=1, keep_dims=True)
    tl.static_assert(len(m.shape) == 2 and m.shape[1] == 1)
    tl.store(out_ptr + offs, x - m)


def test_keep_dims_broadcasts_back():
    x = np.random.default_rng(2).standard_normal((M, N)).astype(np.float32)
    out = np.zeros_like(x)
    _keep_dims[(1,)](x, out, M=M, N=N)
    np.testing.assert_array_equal(out, x - x.max(1, keepdims=True))


@kiln.jit
def _minmax_indices(x_ptr, val_ptr, idx_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    v, i = tl.max(x, axis=0, return_indices=True)
    tl.store(val_ptr, v)
    tl.store(idx_ptr, i)
    v, i = tl.min(x, 0, return_indices=True)
    tl.store(val_ptr + 1, v)
    tl.store(idx_ptr + 1, i)
    tl.store(idx_ptr + 2, tl.argmax(x, 0))
    tl.store(idx_ptr + 3, tl.argmin(x, 0))


def test_max_min_return_indices_and_argmax_ties_pick_the_first():
    x = np.array([1, 9, 3, 9, -4, 2, -4, 9, 0, 1, 5, -4, 9, 3, 2, 1], np.float32)
    vals = np.zeros(2, np.float32)
    idx = np.zeros(4, np.int32)
    _minmax_indices[(1,)](x, vals, idx, N=16)
    assert vals.tolist() == [9, -4]
    assert idx.tolist() == [1, 4, 1, 4]


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint8])
def test_max_of_narrow_types(dtype):
    x = np.array([1, 100, 3, 7, 2, 100, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8], dtype)
    vals = np.zeros(2, dtype)
    idx = np.zeros(4, np.int32)
    _minmax_indices[(1,)](x, vals, idx, N=16)
    assert vals.tolist() == [100, 0] and idx.tolist() == [1, 7, 1, 7]


@kiln.jit
def _my_combine(a, b):
    return a * 2 + b


@kiln.jit
def _first_abs_max(v1, i1, v2, i2):
    a1 = tl.abs(v1)
    a2 = tl.abs(v2)
    take = (a1 > a2) | ((a1 == a2) & (i1 < i2))
    return tl.where(take, v1, v2), tl.where(take, i1, i2)


@kiln.jit
def _custom_reduce(x_ptr, out_ptr, idx_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr, tl.reduce(x, 0, _add_combine))
    v, i = tl.reduce((x, offs), 0, _first_abs_max)
    tl.store(out_ptr + 1, v)
    tl.store(idx_ptr, i)


@kiln.jit
def _add_combine(a, b):
    return a + b


def test_reduce_with_a_jit_combine_function_and_tuples():
    x = np.array([3, -9, 4, 9, -2, 1, 0, 7], np.int32)
    out = np.zeros(2, np.int32)
    idx = np.zeros(1, np.int32)
    _custom_reduce[(1,)](x, out, idx, N=8)
    assert out[0] == x.sum()
    assert out[1] == -9 and idx[0] == 1


@kiln.jit
def _reduce_2d_custom(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    r = x.reduce(1, _bit_or)
    tl.store(out_ptr + tl.arange(0, M), r)


@kiln.jit
def _bit_or(a, b):
    return a | b


def test_reduce_method_with_custom_bitwise_combine():
    x = np.random.default_rng(3).integers(0, 2**20, (M, N)).astype(np.int32)
    out = np.zeros(M, np.int32)
    _reduce_2d_custom[(1,)](x, out, M=M, N=N)
    np.testing.assert_array_equal(out, np.bitwise_or.reduce(x, axis=1))


@kiln.jit
def _scans(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.cumsum(x, 0))
    tl.store(out_ptr + N + offs, tl.cumprod(x, axis=0))
    tl.store(out_ptr + 2 * N + offs, tl.cumsum(x, 0, reverse=True))
    tl.store(out_ptr + 3 * N + offs, tl.associative_scan(x, 0, _max_combine))
    tl.store(out_ptr + 4 * N + offs, x.cumsum(0))


@kiln.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


def test_cumsum_cumprod_reverse_and_associative_scan():
    x = np.array([2, -1, 3, 1, -2, 5, 1, 2], np.int32)
    out = np.zeros(5 * 8, np.int32)
    _scans[(1,)](x, out, N=8)
    np.testing.assert_array_equal(out[:8], np.cumsum(x))
    np.testing.assert_array_equal(out[8:16], np.cumprod(x))
    np.testing.assert_array_equal(out[16:24], np.cumsum(x[::-1])[::-1])
    np.testing.assert_array_equal(out[24:32], np.maximum.accumulate(x))
    np.testing.assert_array_equal(out[32:], np.cumsum(x))


@kiln.jit
def _scan_2d(x_ptr, out_ptr, AXIS: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.cumsum(x, axis=AXIS))


@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum_2d(axis):
    x = np.random.default_rng(4).standard_normal((M, N)).astype(np.float32)
    out = np.zeros_like(x)
    _scan_2d[(1,)](x, out, AXIS=axis, M=M, N=N)
    np.testing.assert_allclose(out, np.cumsum(x, axis=axis), rtol=1e-5, atol=1e-6)


@kiln.jit
def _pair_scan_combine(a_v, a_i, b_v, b_i):
    # a running "last nonzero value and how many steps since it"
    take_b = b_v != 0
    return tl.where(take_b, b_v, a_v), tl.where(take_b, b_i, a_i + b_i)


@kiln.jit
def _tuple_scan(x_ptr, v_ptr, i_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    ones = tl.full((N,), 1, tl.int32)
    v, i = tl.associative_scan((x, ones), 0, _pair_scan_combine)
    tl.store(v_ptr + offs, v)
    tl.store(i_ptr + offs, i)


def test_associative_scan_of_a_tuple():
    x = np.array([0, 4, 0, 0, 7, 0, 2, 0], np.int32)
    v = np.zeros(8, np.int32)
    i = np.zeros(8, np.int32)
    _tuple_scan[(1,)](x, v, i, N=8)
    exp_v, exp_i, last, cnt = [], [], 0, 0
    for val in x:
        if val != 0:
            last, cnt = val, 1
        else:
            cnt += 1
        exp_v.append(last)
        exp_i.append(cnt)
    assert v.tolist() == exp_v and i.tolist() == exp_i


@kiln.jit
def _reduction_dtypes(x_ptr, out_ptr, DT: tl.constexpr, MAX_T: tl.constexpr, IDX_T: tl.constexpr,
                      SUM_T: tl.constexpr, CUMSUM_T: tl.constexpr, CUMPROD_T: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.static_assert(x.dtype == DT)
    tl.static_assert(tl.max(x, 0).dtype == MAX_T)
    tl.static_assert(tl.min(x, 0).dtype == MAX_T)
    v, i = tl.max(x, 0, return_indices=True)
    tl.static_assert(v.dtype == IDX_T)
    tl.static_assert(i.dtype == tl.int32)
    tl.static_assert(tl.min(x, 0, return_indices=True)[0].dtype == IDX_T)
    tl.static_assert(tl.sum(x, 0).dtype == SUM_T)
    tl.static_assert(tl.cumsum(x, 0).dtype == CUMSUM_T)
    p = tl.cumprod(x, 0)
    tl.static_assert(p.dtype == CUMPROD_T)
    tl.store(out_ptr + offs, p)


@pytest.mark.parametrize("dt,npdt,max_t,idx_t,sum_t,cumsum_t,cumprod_t", [
    # Triton 3.6 standard.py: max/min widen below 32 bits unless return_indices; bf16 -> fp32 for
    # max/min/cumsum/cumprod; sum/cumsum widen narrow integers; cumprod does not
    (tl.int8, np.int8, tl.int32, tl.int8, tl.int32, tl.int32, tl.int8),
    (tl.uint8, np.uint8, tl.int32, tl.uint8, tl.uint32, tl.uint32, tl.uint8),
    (tl.float16, np.float16, tl.float32, tl.float16, tl.float16, tl.float16, tl.float16),
    (tl.bfloat16, ml_dtypes.bfloat16, tl.float32, tl.float32, tl.bfloat16, tl.float32, tl.float32),
    (tl.int64, np.int64, tl.int64, tl.int64, tl.int64, tl.int64, tl.int64),
])
def test_reduction_and_scan_result_dtypes(dt, npdt, max_t, idx_t, sum_t, cumsum_t, cumprod_t):
    x = np.array([3, 5, 7, 2, 1, 4, 3, 2], npdt)
    out_np = {tl.int8: np.int8, tl.uint8: np.uint8, tl.float16: np.float16, tl.float32: np.float32,
              tl.int64: np.int64}[cumprod_t]
    out = np.zeros(8, out_np)
    _reduction_dtypes[(1,)](x, out, DT=dt, MAX_T=max_t, IDX_T=idx_t, SUM_T=sum_t, CUMSUM_T=cumsum_t,
                            CUMPROD_T=cumprod_t, N=8)
    with np.errstate(over="ignore"):
        ref = np.cumprod(x.astype(np.float64)).astype(np.int64).astype(out_np) if np.dtype(out_np).kind in "iu" \
            else np.cumprod(x.astype(np.float64)).astype(out_np)
    np.testing.assert_array_equal(out, ref)  # int8 cumprod wraps: 3*5*7*2 = 210 -> -46


@kiln.jit
def _compose_affine(a1, b1, a2, b2):
    # x -> a1*x + b1, then x -> a2*x + b2: associative but not commutative
    return a1 * a2, b1 * a2 + b2


@kiln.jit
def _ordered_scans(a_ptr, b_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    _, fb = tl.associative_scan((a, b), 0, _compose_affine)
    _, rb = tl.associative_scan((a, b), 0, _compose_affine, reverse=True)
    tl.store(out_ptr + offs, fb)
    tl.store(out_ptr + N + offs, rb)


def test_scans_keep_operand_order():
    # (tl.reduce may reorder operands on the GPU: Triton's reductions assume a commutative combine)
    N = 8
    a = (np.arange(N) % 3 + 1).astype(np.int64)
    b = np.arange(N, dtype=np.int64)
    out = np.zeros(2 * N, np.int64)
    _ordered_scans[(1,)](a, b, out, N=N)

    def compose(p, q):
        return p[0] * q[0], p[1] * q[0] + q[1]

    fwd, acc = [], None
    for i in range(N):  # element i is combined on the right
        acc = (a[i], b[i]) if acc is None else compose(acc, (a[i], b[i]))
        fwd.append(acc[1])
    rev, acc = [0] * N, None
    for i in reversed(range(N)):  # reverse: later elements on the left
        acc = (a[i], b[i]) if acc is None else compose(acc, (a[i], b[i]))
        rev[i] = acc[1]
    assert out[:N].tolist() == fwd
    assert out[N:2 * N].tolist() == rev


@kiln.jit
def _reduce_all_2d(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    s = tl.sum(x)
    tl.static_assert(len(s.shape) == 0)
    k = tl.sum(x, axis=None, keep_dims=True)
    tl.static_assert(len(k.shape) == 2 and k.shape[0] == 1 and k.shape[1] == 1)
    tl.store(out_ptr + offs, x * 0 + k)
    tl.store(out_ptr + M * N, s)
    tl.store(out_ptr + M * N + 1, tl.argmax(tl.ravel(x), 0))


def test_reduce_over_all_axes_of_a_2d_block():
    x = np.random.default_rng(7).integers(-50, 50, (4, 8)).astype(np.int32)
    out = np.zeros(34, np.int32)
    _reduce_all_2d[(1,)](x, out, M=4, N=8)
    np.testing.assert_array_equal(out[:32], np.full(32, x.sum()))
    assert out[32] == x.sum() and out[33] == np.argmax(x.ravel())
