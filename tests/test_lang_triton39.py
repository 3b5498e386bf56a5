"""Conformance: what Triton 3.9 added to the language since 3.6 (interpreter vs NumPy): squeeze and
unsqueeze, cat along any dimension, topk's smallest, to_tensor, aggregate_replace, expect_zero,
fdiv's approx, dot's out_dtype default (the accumulator's type) and dots of rank 4."""
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def _squeeze_unsqueeze(x_ptr, out_ptr):
    offs = tl.arange(0, 4)[:, None] * 8 + tl.arange(0, 8)[None, :]
    x = tl.load(x_ptr + offs)                        # [4, 8]
    u = tl.unsqueeze(x, 1)                           # [4, 1, 8]
    back = tl.squeeze(u, 1)                          # [4, 8]
    last = tl.squeeze(tl.unsqueeze(x, -1), -1)       # [4, 8] through [4, 8, 1]
    row = tl.squeeze(tl.sum(u, axis=2, keep_dims=True), 2)  # [4, 1]
    tl.store(out_ptr + offs, back)
    tl.store(out_ptr + 32 + offs, last * 2)
    tl.store(out_ptr + 64 + tl.arange(0, 4)[:, None], row)


def test_squeeze_and_unsqueeze():
    x = np.arange(32, dtype=np.int32).reshape(4, 8)
    out = np.zeros(68, np.int32)
    _squeeze_unsqueeze[(1,)](x, out)
    np.testing.assert_array_equal(out[:32].reshape(4, 8), x)
    np.testing.assert_array_equal(out[32:64].reshape(4, 8), x * 2)
    np.testing.assert_array_equal(out[64:], x.sum(axis=1))


@kiln.jit
def _squeeze_a_long_dimension(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 8)[:, None])
    tl.squeeze(x, 0)


def test_squeezing_a_dimension_longer_than_one_is_a_compile_error():
    with pytest.raises(kiln.CompilationError, match="length 1"):
        _squeeze_a_long_dimension[(1,)](np.zeros(8, np.float32))


@kiln.jit
def _cat_along(x_ptr, y_ptr, out_ptr, DIM: tl.constexpr):
    offs = tl.arange(0, 2)[:, None, None] * 32 + tl.arange(0, 4)[None, :, None] * 8 + tl.arange(0, 8)[None, None, :]
    x, y = tl.load(x_ptr + offs), tl.load(y_ptr + offs)
    c = tl.cat(x, y, dim=DIM)
    R0: tl.constexpr = 4 if DIM == 0 else 2
    R1: tl.constexpr = 8 if DIM == 1 or DIM == -2 else 4
    R2: tl.constexpr = 16 if DIM == 2 or DIM == -1 else 8
    out = tl.arange(0, R0)[:, None, None] * (R1 * R2) + tl.arange(0, R1)[None, :, None] * R2 + tl.arange(0, R2)[None, None, :]
    tl.store(out_ptr + out, c)


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
def test_cat_along_a_dimension_keeps_the_order(dim):
    x = np.arange(64, dtype=np.float32).reshape(2, 4, 8)
    y = -np.arange(64, dtype=np.float32).reshape(2, 4, 8) - 100
    out = np.zeros(128, np.float32)
    _cat_along[(1,)](x, y, out, DIM=dim)
    want = np.concatenate([x, y], axis=dim)
    np.testing.assert_array_equal(out.reshape(want.shape), want)


@kiln.jit
def _topk_smallest(x_ptr, out_ptr, K: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 4)[:, None] * 16 + tl.arange(0, 16)[None, :])
    tl.store(out_ptr + tl.arange(0, 4)[:, None] * K + tl.arange(0, K)[None, :], tl.topk(x, K, descending=False))
    tl.store(out_ptr + 4 * K + tl.arange(0, 4)[:, None] * K + tl.arange(0, K)[None, :], tl.topk(x, K))


def test_topk_descending_false_gives_the_smallest_in_ascending_order():
    x = np.random.default_rng(0).permutation(64).astype(np.float32).reshape(4, 16)
    out = np.zeros(2 * 4 * 4, np.float32)
    _topk_smallest[(1,)](x, out, K=4)
    np.testing.assert_array_equal(out[:16].reshape(4, 4), np.sort(x, axis=1)[:, :4])
    np.testing.assert_array_equal(out[16:].reshape(4, 4), np.sort(x, axis=1)[:, ::-1][:, :4])


@kiln.jit
def _to_tensor(out_ptr, big: tl.constexpr):
    i, u, f, b = tl.to_tensor(3), tl.to_tensor(big), tl.to_tensor(1.5), tl.to_tensor(True)
    tl.static_assert(i.dtype == tl.int32)
    tl.static_assert(u.dtype == tl.uint32)
    tl.static_assert(f.dtype == tl.float32)
    tl.static_assert(b.dtype == tl.int1)
    tl.store(out_ptr, i.to(tl.float32) + f + b.to(tl.float32) + (u - 4294967295).to(tl.float32))


def test_to_tensor_infers_the_dtype_of_a_python_scalar():
    out = np.zeros(1, np.float32)
    _to_tensor[(1,)](out, big=4294967295)
    assert out[0] == 3 + 1.5 + 1


@tl.core._aggregate
class _Pair:
    value: tl.tensor
    scale: tl.constexpr

    def __init__(self, value, scale):
        self.value = value
        self.scale = scale


@kiln.jit
def _replace(x_ptr, out_ptr):
    p = _Pair(tl.load(x_ptr + tl.arange(0, 8)), 2)
    q = tl.aggregate_replace(p, value=p.value + 1)
    tl.store(out_ptr + tl.arange(0, 8), q.value * q.scale)


def test_aggregate_replace_and_triton_aggregate():
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    _replace[(1,)](x, out)
    np.testing.assert_array_equal(out, (x + 1) * 2)
    assert kiln.aggregate is tl.core._aggregate


def test_aggregate_replace_refuses_a_field_the_class_lacks():
    pair = _Pair(1.0, 2)
    with pytest.raises(TypeError, match="has no field 'other'"):
        tl.aggregate_replace(pair, other=3)
    with pytest.raises(TypeError, match="expects an aggregate"):
        tl.aggregate_replace(3, value=1)


@kiln.jit
def _expect_zero_and_approx(x_ptr, y_ptr, out_ptr):
    offs = tl.arange(0, 16)
    x, y = tl.load(x_ptr + offs), tl.load(y_ptr + offs)
    kept = tl.expect_zero(x, x == 0)
    tl.store(out_ptr + offs, tl.fdiv(kept, y, approx=True))


def test_expect_zero_keeps_x_and_fdiv_takes_approx():
    x = np.linspace(-3, 3, 16).astype(np.float32)
    y = np.linspace(1, 4, 16).astype(np.float32)
    out = np.zeros(16, np.float32)
    _expect_zero_and_approx[(1,)](x, y, out)
    np.testing.assert_allclose(out, x / y, rtol=1e-6)


@kiln.jit
def _dot_into(a_ptr, b_ptr, c_ptr, out_ptr):
    offs = tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :]
    a, b, c = tl.load(a_ptr + offs), tl.load(b_ptr + offs), tl.load(c_ptr + offs)
    d = tl.dot(a, b, c)  # fp16 operands, an fp16 accumulator, no out_dtype: fp16 out (3.9)
    tl.static_assert(d.dtype == tl.float16)
    tl.store(out_ptr + offs, d)


def test_dot_out_dtype_defaults_to_the_accumulators_type():
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((16, 16)).astype(np.float16) for _ in range(3))
    out = np.zeros((16, 16), np.float16)
    _dot_into[(1,)](a, b, c, out)
    want = a.astype(np.float32) @ b.astype(np.float32) + c.astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=2e-2, atol=2e-2)


@kiln.jit
def _dot_rank4(a_ptr, b_ptr, out_ptr):
    i = tl.arange(0, 2)[:, None, None, None]
    j = tl.arange(0, 2)[None, :, None, None]
    r = tl.arange(0, 16)[None, None, :, None]
    k = tl.arange(0, 16)[None, None, None, :]
    base = (i * 2 + j) * 256
    a, b = tl.load(a_ptr + base + r * 16 + k), tl.load(b_ptr + base + r * 16 + k)
    tl.store(out_ptr + base + r * 16 + k, tl.dot(a, b))


def test_a_dot_of_rank_four_multiplies_batch_by_batch():
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((2, 2, 16, 16)).astype(np.float32) for _ in range(2))
    out = np.zeros((2, 2, 16, 16), np.float32)
    _dot_rank4[(1,)](a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=2e-2, atol=2e-2)


@kiln.jit
def _sliced(x_ptr, out_ptr):
    every = tl.slice(None, None, None)
    rows = tl.arange(0, 4)[every, None] * 8 + tl.arange(0, 8)[None, every]  # as [:, None] and [None, :]
    pair = (x_ptr, out_ptr, rows)
    dst, offs = pair[tl.slice(1, 3, None)]                                  # as pair[1:3]
    tl.store(dst + offs, tl.load(pair[0] + offs) + 1)


def test_slices_as_values_index_as_python_s():
    x = np.arange(32, dtype=np.int32).reshape(4, 8)
    out = np.zeros((4, 8), np.int32)
    _sliced[(1,)](x, out)
    np.testing.assert_array_equal(out, x + 1)
    assert tl.slice(1, None, 2).type == tl.slice_type() and tl.slice(1, None, 2).as_python() == slice(1, None, 2)


@kiln.jit
def _bad_slice(x_ptr):
    tl.store(x_ptr + tl.arange(0, 4)[tl.slice(0, 2, None)], 1)


def test_a_block_takes_no_slice_but_all():
    with pytest.raises(kiln.CompilationError, match="only `:` and `None`"):
        _bad_slice[(1,)](np.zeros(4, np.int32))
