"""Conformance: shape manipulation (interpreter vs NumPy)."""
import numpy as np
import pytest

import kiln
import kiln.language as tl


def _iota(*shape, dtype=np.int32):
    return np.arange(np.prod(shape), dtype=dtype).reshape(shape)


@kiln.jit
def _reshape_view_ravel(x_ptr, out_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    r = tl.reshape(x, (4, 4))
    r2 = x.reshape(2, 8)
    offs44 = tl.arange(0, 4)[:, None] * 4 + tl.arange(0, 4)[None, :]
    offs28 = tl.arange(0, 2)[:, None] * 8 + tl.arange(0, 8)[None, :]
    tl.store(out_ptr + offs44, r)
    tl.store(out_ptr + 16 + offs28, r2 * 2)
    flat = tl.ravel(r)
    tl.store(out_ptr + 32 + tl.arange(0, 16), flat * 3)
    v = tl.view(x, (8, 2))
    tl.store(out_ptr + 48 + tl.arange(0, 16), tl.sum(tl.reshape(v, (16,)), axis=0) + tl.zeros((16,), tl.int32))


def test_reshape_view_ravel_are_row_major():
    x = np.arange(16, dtype=np.int32)
    out = np.zeros(64, np.int32)
    _reshape_view_ravel[(1,)](x, out)
    np.testing.assert_array_equal(out[:16], x)
    np.testing.assert_array_equal(out[16:32], x * 2)
    np.testing.assert_array_equal(out[32:48], x * 3)
    np.testing.assert_array_equal(out[48:], np.full(16, x.sum()))  # view may reorder: check the multiset


@kiln.jit
def _transposes(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    offs_t = tl.arange(0, N)[:, None] * M + tl.arange(0, M)[None, :]
    tl.store(out_ptr + offs_t, tl.trans(x))
    tl.store(out_ptr + M * N + offs_t, tl.permute(x, (1, 0)))
    tl.store(out_ptr + 2 * M * N + offs_t, x.T)
    tl.store(out_ptr + 3 * M * N + offs_t, tl.trans(x, 1, 0))


def test_trans_permute_and_T():
    x = _iota(4, 8)
    out = np.zeros(4 * 32, np.int32)
    _transposes[(1,)](x, out, M=4, N=8)
    for k in range(4):
        np.testing.assert_array_equal(out[32 * k:32 * (k + 1)].reshape(8, 4), x.T)


@kiln.jit
def _permute_3d(x_ptr, out_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    a = tl.arange(0, A)[:, None, None]
    b = tl.arange(0, B)[None, :, None]
    c = tl.arange(0, C)[None, None, :]
    x = tl.load(x_ptr + a * B * C + b * C + c)
    y = tl.permute(x, 2, 0, 1)  # shape (C, A, B)
    c2 = tl.arange(0, C)[:, None, None]
    a2 = tl.arange(0, A)[None, :, None]
    b2 = tl.arange(0, B)[None, None, :]
    tl.store(out_ptr + c2 * A * B + a2 * B + b2, y)


def test_permute_3d():
    x = _iota(2, 4, 8)
    out = np.zeros(64, np.int32)
    _permute_3d[(1,)](x, out, A=2, B=4, C=8)
    np.testing.assert_array_equal(out.reshape(8, 2, 4), np.transpose(x, (2, 0, 1)))


@kiln.jit
def _batched_trans(x_ptr, out_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    a = tl.arange(0, A)[:, None, None]
    b = tl.arange(0, B)[None, :, None]
    c = tl.arange(0, C)[None, None, :]
    y = tl.trans(tl.load(x_ptr + a * B * C + b * C + c))  # no dims: the last two swapped, shape (A, C, B)
    c2 = tl.arange(0, C)[None, :, None]
    b2 = tl.arange(0, B)[None, None, :]
    tl.store(out_ptr + a * C * B + c2 * B + b2, y)


def test_trans_without_dims_swaps_the_last_two_of_a_batch():
    x = _iota(2, 4, 8)
    out = np.zeros(64, np.int32)
    _batched_trans[(1,)](x, out, A=2, B=4, C=8)
    np.testing.assert_array_equal(out.reshape(2, 8, 4), np.swapaxes(x, 1, 2))


@kiln.jit
def _trans_of_a_vector(x_ptr):
    tl.store(x_ptr + tl.arange(0, 4), tl.trans(tl.load(x_ptr + tl.arange(0, 4))))


def test_trans_of_a_vector_is_refused_at_its_line():
    import pytest
    with pytest.raises(kiln.CompilationError, match="0- or 1-dimensional"):
        _trans_of_a_vector[(1,)](np.zeros(4, np.int32))


@kiln.jit
def _broadcasts(x_ptr, y_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    col = tl.load(x_ptr + tl.arange(0, M))
    row = tl.load(y_ptr + tl.arange(0, N))
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    a, b = tl.broadcast(col[:, None], row[None, :])
    tl.static_assert(a.shape[0] == M and a.shape[1] == N and b.shape[0] == M)
    tl.store(out_ptr + offs, a * 100 + b)
    c = tl.broadcast_to(row[None, :], (M, N))
    tl.store(out_ptr + M * N + offs, c)
    d = tl.broadcast_to(tl.expand_dims(col, 1), M, N)
    tl.store(out_ptr + 2 * M * N + offs, d)
    e = col.expand_dims(1) + row.expand_dims(0) * 0
    tl.store(out_ptr + 3 * M * N + offs, e)
    f = tl.expand_dims(row, (0, 2))
    tl.static_assert(len(f.shape) == 3 and f.shape[0] == 1 and f.shape[1] == N and f.shape[2] == 1)
    tl.store(out_ptr + 4 * M * N + offs, tl.reshape(f, (1, N)) + col[:, None] * 0)


def test_broadcast_broadcast_to_expand_dims():
    col = np.array([1, 2, 3, 4], np.int32)
    row = np.arange(8, dtype=np.int32) + 10
    out = np.zeros(5 * 32, np.int32).reshape(5, 4, 8)
    _broadcasts[(1,)](col, row, out, M=4, N=8)
    np.testing.assert_array_equal(out[0], col[:, None] * 100 + row[None, :])
    np.testing.assert_array_equal(out[1], np.broadcast_to(row, (4, 8)))
    np.testing.assert_array_equal(out[2], np.broadcast_to(col[:, None], (4, 8)))
    np.testing.assert_array_equal(out[3], np.broadcast_to(col[:, None], (4, 8)))
    np.testing.assert_array_equal(out[4], np.broadcast_to(row, (4, 8)))


@kiln.jit
def _scalar_broadcast(x_ptr, out_ptr, s, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), x + s + 2)


def test_scalars_broadcast_against_blocks():
    x = np.arange(8, dtype=np.int32)
    out = np.zeros(8, np.int32)
    _scalar_broadcast[(1,)](x, out, 40, N=8)
    np.testing.assert_array_equal(out, x + 42)


@kiln.jit
def _scalar_subscripts(x_ptr, out_ptr, n, N: tl.constexpr):
    s = tl.where(n > 3, 2.0, 1.0)  # a scalar tensor (sglang's grouped decode: `qk *= temperature[:, None]`)
    tl.static_assert(len(s[:, None].shape) == 1 and s[:, None].shape[0] == 1)
    tl.static_assert(len(s[None, :].shape) == 1 and len(s[:, :, None].shape) == 1)
    rows = tl.arange(0, N)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + rows, tl.load(x_ptr + rows) * s[:, None])


def test_a_scalar_subscripted_past_its_rank_is_a_block_of_one():
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    out = np.zeros_like(x)
    _scalar_subscripts[(1,)](x, out, 5, N=4)
    np.testing.assert_array_equal(out, x * 2)


def test_a_block_subscripted_past_its_rank_is_refused():
    @kiln.jit
    def past(x_ptr):
        x = tl.load(x_ptr + tl.arange(0, 4))
        tl.store(x_ptr + tl.arange(0, 4), x[:, :, None])

    with pytest.raises(kiln.CompilationError, match="too many indices"):
        past[(1,)](np.zeros(4, np.float32))


@kiln.jit
def _join_split_cat(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    j = tl.join(x, y)  # (N, 2)
    tl.static_assert(j.shape[0] == N and j.shape[1] == 2)
    offs2 = offs[:, None] * 2 + tl.arange(0, 2)[None, :]
    tl.store(out_ptr + offs2, j)
    a, b = tl.split(j)
    tl.store(out_ptr + 2 * N + offs, b)
    tl.store(out_ptr + 3 * N + offs, a)
    c = tl.cat(x, y, can_reorder=True)
    tl.static_assert(c.shape[0] == 2 * N)
    tl.store(out_ptr + 4 * N + tl.arange(0, 2 * N), c)
    a2, b2 = j.split()
    tl.store(out_ptr + 6 * N + offs, a2 - b2)


def test_join_split_cat():
    x = np.arange(8, dtype=np.int32)
    y = np.arange(8, dtype=np.int32) * 10 + 100
    out = np.zeros(7 * 8, np.int32)
    _join_split_cat[(1,)](x, y, out, N=8)
    np.testing.assert_array_equal(out[:16].reshape(8, 2), np.stack([x, y], axis=-1))
    np.testing.assert_array_equal(out[16:24], y)
    np.testing.assert_array_equal(out[24:32], x)
    # cat with can_reorder=True may order elements freely: compare the multiset
    np.testing.assert_array_equal(np.sort(out[32:48]), np.sort(np.concatenate([x, y])))
    np.testing.assert_array_equal(out[48:], x - y)


@kiln.jit
def _join_2d(x_ptr, out_ptr):
    r = tl.arange(0, 2)[:, None] * 4 + tl.arange(0, 4)[None, :]
    x = tl.load(x_ptr + r)
    j = tl.join(x, x + 100)  # (2, 4, 2)
    i0 = tl.arange(0, 2)[:, None, None]
    i1 = tl.arange(0, 4)[None, :, None]
    i2 = tl.arange(0, 2)[None, None, :]
    tl.store(out_ptr + i0 * 8 + i1 * 2 + i2, j)
    tl.store(out_ptr + 16 + tl.arange(0, 16), tl.interleave(tl.ravel(x), tl.ravel(x) + 100))


def test_join_of_2d_blocks_and_interleave():
    x = _iota(2, 4)
    out = np.zeros(32, np.int32)
    _join_2d[(1,)](x, out)
    np.testing.assert_array_equal(out[:16].reshape(2, 4, 2), np.stack([x, x + 100], -1))
    np.testing.assert_array_equal(out[16:], np.stack([x.ravel(), x.ravel() + 100], -1).ravel())
