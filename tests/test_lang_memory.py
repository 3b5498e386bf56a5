"""Conformance: load/store with masks and other, cache hints, atomics (interpreter vs NumPy)."""
import os

import numpy as np
import pytest

import kiln
import kiln.language as tl
try:
    import torch
except ImportError:  # PyTorch is optional; the tests that use it skip without it
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch")


@kiln.jit
def _masked_copy(x_ptr, y_ptr, n, OTHER: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=OTHER)
    tl.store(y_ptr + offs, x)


def test_masked_load_fills_other_and_grid_covers_tail():
    x = np.arange(10, dtype=np.float32) + 1
    y = np.zeros(12, np.float32)
    _masked_copy[(kiln.cdiv(12, 4),)](x, y, 10, OTHER=-7.0, BLOCK=4)
    np.testing.assert_array_equal(y, np.concatenate([x, [-7.0, -7.0]]))


@kiln.jit
def _masked_store(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    # (ptxas refuses .cg or .cs together with an eviction policy, so each hint comes alone)
    x = tl.load(x_ptr + offs, mask=mask, other=0, cache_modifier=".cg")
    x += tl.load(x_ptr + offs, mask=mask, other=0, eviction_policy="evict_last")
    x -= tl.load(x_ptr + offs, mask=mask, other=0, volatile=True)
    x += tl.load(x_ptr + offs, mask=mask, other=0)
    tl.store(y_ptr + offs, x * 3, mask=mask, cache_modifier=".cs")
    tl.store(y_ptr + offs, x * 3, mask=mask, eviction_policy="evict_first")


def test_masked_store_leaves_other_lanes_and_hints_are_accepted():
    x = np.arange(7, dtype=np.int32)
    y = np.full(7, -1, np.int32)
    _masked_store[(2,)](x, y, 7, BLOCK=4)
    np.testing.assert_array_equal(y, x * 6)


@kiln.jit
def _masked_2d(x_ptr, y_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.arange(0, BM)[:, None]
    cols = tl.arange(0, BN)[None, :]
    mask = (rows < M) & (cols < N)
    x = tl.load(x_ptr + rows * stride + cols, mask=mask, other=0.0)
    tl.store(y_ptr + rows * BN + cols, x + 1.0)


def test_two_dimensional_mask_by_broadcasting():
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    y = np.zeros((4, 8), np.float32)
    _masked_2d[(1,)](x, y, 3, 5, 5, BM=4, BN=8)
    expect = np.ones((4, 8), np.float32)
    expect[:3, :5] += x
    np.testing.assert_array_equal(y, expect)


@kiln.jit
def _scalar_mask(x_ptr, y_ptr, flag):
    offs = tl.arange(0, 4)
    v = tl.load(x_ptr + offs, mask=flag > 0, other=9)
    tl.store(y_ptr + offs, v)


def test_scalar_mask_broadcasts_over_the_block():
    x = np.array([1, 2, 3, 4], np.int16)
    y = np.zeros(4, np.int16)
    _scalar_mask[(1,)](x, y, 1)
    np.testing.assert_array_equal(y, x)
    _scalar_mask[(1,)](x, y, 0)
    np.testing.assert_array_equal(y, [9, 9, 9, 9])


@kiln.jit
def _oob(x_ptr, y_ptr):
    offs = tl.arange(0, 16)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


@pytest.mark.interpreter_only
def test_unmasked_out_of_bounds_load_names_the_kernel():
    x = np.zeros(8, np.float32)
    y = np.zeros(16, np.float32)
    with pytest.raises(Exception) as info:
        _oob[(1,)](x, y)
    msg = str(info.value)
    assert "_oob" in msg
    assert "test_lang_memory.py" in msg


@kiln.jit
def _gather(x_ptr, idx_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    idx = tl.load(idx_ptr + offs)
    tl.store(y_ptr + offs, tl.load(x_ptr + idx))


def test_gather_through_loaded_indices():
    x = np.arange(100, 116, dtype=np.int64)
    idx = np.array([15, 0, 3, 3, 7, 1, 2, 9], np.int32)
    y = np.zeros(8, np.int64)
    _gather[(1,)](x, idx, y, N=8)
    np.testing.assert_array_equal(y, x[idx])


# --- atomics ------------------------------------------------------------------------

@kiln.jit
def _histogram(x_ptr, hist_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    bins = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(hist_ptr + bins, 1, mask=mask)


def test_histogram_with_atomic_add_across_programs():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 8, 203).astype(np.int32)
    hist = np.zeros(8, np.int32)
    _histogram[(kiln.cdiv(203, 32),)](x, hist, 203, BLOCK=32)
    np.testing.assert_array_equal(hist, np.bincount(x, minlength=8))


@kiln.jit
def _atomic_ops(buf_ptr, old_ptr, vals_ptr, N: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, N)
    v = tl.load(vals_ptr + pid * N + offs)
    old = tl.atomic_max(buf_ptr + offs, v)
    tl.store(old_ptr + pid * 7 * N + offs, old)
    old = tl.atomic_min(buf_ptr + N + offs, v, sem="relaxed")
    tl.store(old_ptr + pid * 7 * N + N + offs, old)
    old = tl.atomic_and(buf_ptr + 2 * N + offs, v, sem="acquire")
    tl.store(old_ptr + pid * 7 * N + 2 * N + offs, old)
    old = tl.atomic_or(buf_ptr + 3 * N + offs, v, sem="release")
    tl.store(old_ptr + pid * 7 * N + 3 * N + offs, old)
    old = tl.atomic_xor(buf_ptr + 4 * N + offs, v, sem="acq_rel", scope="gpu")
    tl.store(old_ptr + pid * 7 * N + 4 * N + offs, old)
    old = tl.atomic_xchg(buf_ptr + 5 * N + offs, v)
    tl.store(old_ptr + pid * 7 * N + 5 * N + offs, old)
    old = tl.atomic_add(buf_ptr + 6 * N + offs, v, mask=offs % 2 == 0)
    tl.store(old_ptr + pid * 7 * N + 6 * N + offs, old, mask=offs % 2 == 0)


def test_atomic_rmw_ops_across_programs():
    # The order in which programs reach an address is unspecified: check what every order agrees on
    P, N = 4, 4
    rng = np.random.default_rng(2)
    vals = rng.permutation(np.arange(1, P * N + 1)).reshape(P, N).astype(np.int32) * 3  # distinct, > 0
    init = rng.integers(-50, 50, (7, N)).astype(np.int32)
    buf = init.copy()
    old = np.zeros((P, 7, N), np.int32)
    _atomic_ops[(P,)](buf, old, vals, N=N)
    even = np.arange(N) % 2 == 0
    np.testing.assert_array_equal(buf[0], np.maximum(init[0], vals.max(0)))
    np.testing.assert_array_equal(buf[1], np.minimum(init[1], vals.min(0)))
    np.testing.assert_array_equal(buf[2], init[2] & np.bitwise_and.reduce(vals, 0))
    np.testing.assert_array_equal(buf[3], init[3] | np.bitwise_or.reduce(vals, 0))
    np.testing.assert_array_equal(buf[4], init[4] ^ np.bitwise_xor.reduce(vals, 0))
    np.testing.assert_array_equal(buf[6], np.where(even, init[6] + vals.sum(0), init[6]))
    for lane in range(N):
        # xchg: the old values and the final value chain through init and every program's value
        assert sorted(old[:, 5, lane].tolist() + [buf[5, lane]]) == sorted([init[5, lane]] + vals[:, lane].tolist())
        if even[lane]:  # add: the old values climb from init to the final sum by every program's value
            chain = sorted(old[:, 6, lane].tolist() + [buf[6, lane]])
            assert chain[0] == init[6, lane]
            assert sorted(np.diff(chain).tolist()) == sorted(vals[:, lane].tolist())


def test_atomic_rmw_ops_return_old_values_in_one_program():
    N = 4
    vals = np.array([[5, -3, 12, 0]], np.int32)
    init = np.arange(28, dtype=np.int32).reshape(7, N) - 10
    buf = init.copy()
    old = np.zeros((1, 7, N), np.int32)
    _atomic_ops[(1,)](buf, old, vals, N=N)
    even = np.arange(N) % 2 == 0
    np.testing.assert_array_equal(old[0, :6], init[:6])
    np.testing.assert_array_equal(old[0, 6][even], init[6][even])
    v = vals[0]
    expect = [np.maximum(init[0], v), np.minimum(init[1], v), init[2] & v, init[3] | v, init[4] ^ v, v,
              np.where(even, init[6] + v, init[6])]
    np.testing.assert_array_equal(buf, np.array(expect))


@kiln.jit
def _atomic_float_add(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + tl.program_id(0) * N + offs)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))
    tl.atomic_max(out_ptr + 1, tl.max(x, axis=0))


def test_atomic_add_and_max_on_floats_into_a_scalar():
    x = (np.arange(32, dtype=np.float32) - 10) / 4
    out = np.array([0.0, -1e9], np.float32)
    _atomic_float_add[(4,)](x, out, N=8)
    assert out[0] == pytest.approx(x.sum())
    assert out[1] == x.max()


@kiln.jit
def _spin_lock_counter(lock_ptr, count_ptr, log_ptr):
    pid = tl.program_id(0)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    c = tl.load(count_ptr)
    tl.store(log_ptr + pid, c)
    tl.store(count_ptr, c + 1)
    tl.atomic_xchg(lock_ptr, 0)


def test_atomic_cas_spin_lock_counter():
    lock = np.zeros(1, np.int32)
    count = np.zeros(1, np.int32)
    log = np.full(6, -1, np.int32)
    _spin_lock_counter[(6,)](lock, count, log)
    assert count[0] == 6 and lock[0] == 0
    assert sorted(log.tolist()) == list(range(6))


@kiln.jit
def _cas_block(x_ptr, old_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    old = tl.atomic_cas(x_ptr + offs, offs % 3, offs * 10, sem="acq_rel")
    tl.store(old_ptr + offs, old)


def test_atomic_cas_on_a_block_swaps_only_matching_lanes():
    x = np.array([0, 0, 2, 0, 1, 2, 5, 1], np.int32)
    before = x.copy()
    old = np.zeros(8, np.int32)
    _cas_block[(1,)](x, old, N=8)
    i = np.arange(8)
    np.testing.assert_array_equal(old, before)
    np.testing.assert_array_equal(x, np.where(before == i % 3, i * 10, before))


# a torch CPU tensor launched on a GPU is Triton's ValueError ('cpu tensor?'): interpreter only
@pytest.mark.interpreter_only
@needs_torch
def test_atomics_on_torch_tensors():
    x = torch.randint(0, 4, (64,), dtype=torch.int32)
    hist = torch.zeros(4, dtype=torch.int32)
    _histogram[(2,)](x, hist, 64, BLOCK=32)
    assert torch.equal(hist, torch.bincount(x, minlength=4).to(torch.int32))


@kiln.jit
def _same_address_in_one_block(c_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    zero = offs * 0
    tl.store(o_ptr + offs, tl.atomic_add(c_ptr + zero, 1))
    tl.store(o_ptr + N + offs, tl.atomic_cas(c_ptr + 1 + zero, zero, offs + 10))
    tl.store(o_ptr + 2 * N + offs, tl.atomic_xchg(c_ptr + 2 + zero, offs + 100))
    tl.store(o_ptr + 3 * N + offs, tl.atomic_max(c_ptr + 3 + offs % 2, offs))


def test_atomics_on_one_address_from_every_lane_of_a_block():
    N = 8
    c = np.zeros(5, np.int32)
    o = np.zeros(4 * N, np.int32)
    _same_address_in_one_block[(1,)](c, o, N=N)
    # add: every lane saw a distinct old value; cas: exactly one lane won; xchg: a chain of values
    assert c[0] == N and sorted(o[:N].tolist()) == list(range(N))
    winners = np.flatnonzero(o[N:2 * N] == 0)
    assert len(winners) == 1 and c[1] == winners[0] + 10 and set(o[N:2 * N].tolist()) == {0, c[1]}
    assert sorted(o[2 * N:3 * N].tolist() + [c[2]]) == [0] + list(range(100, 100 + N))
    assert c[3] == 6 and c[4] == 7


@kiln.jit
def _atomic_fp16_and_masked_scalar(h_ptr, f_ptr, flag):
    offs = tl.arange(0, 4)
    tl.atomic_add(h_ptr + offs, tl.full((4,), 0.5, tl.float16))
    tl.atomic_add(f_ptr, 1.0, mask=flag > 0)
    tl.atomic_min(f_ptr + 1, -2.5)
    tl.atomic_max(f_ptr + 2, -2.5)


def test_fp16_atomic_add_and_float_min_max_with_negatives():
    h = np.array([1, 2, 3, 4], np.float16)
    f = np.array([0.0, -1.0, -3.0], np.float32)
    _atomic_fp16_and_masked_scalar[(3,)](h, f, 0)
    _atomic_fp16_and_masked_scalar[(2,)](h, f, 5)  # not 1: Triton makes an argument equal to 1 a constexpr
    np.testing.assert_array_equal(h, np.array([1, 2, 3, 4], np.float16) + np.float16(2.5))
    np.testing.assert_array_equal(f, [2.0, -2.5, -2.5])


@kiln.jit
def _strided_2d(x_ptr, y_ptr, stride_xm, stride_xn, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :] * stride_xn)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], x)


def test_strided_and_transposed_2d_access():
    base = np.arange(64, dtype=np.float32).reshape(8, 8)
    y = np.zeros((4, 8), np.float32)
    _strided_2d[(1,)](base, y, 16, 1, M=4, N=8)  # every other row
    np.testing.assert_array_equal(y, base[::2])
    yt = np.zeros((8, 8), np.float32)
    _strided_2d[(1,)](base, yt, 1, 8, M=8, N=8)  # the transpose
    np.testing.assert_array_equal(yt, base.T)
    if torch is None or os.environ.get("KILN_TEST_GPU_CONFORMANCE") == "1":
        return  # on a GPU a torch CPU tensor is Triton's ValueError
    t = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    view = t[:, 2:6]  # a non-contiguous torch view: pointer at element 2, strides (8, 1)
    out = np.zeros((8, 4), np.float32)
    _strided_2d[(1,)](view, out, view.stride(0), view.stride(1), M=8, N=4)
    np.testing.assert_array_equal(out, view.numpy())


@kiln.jit
def _int64_offsets(x_ptr, y_ptr, base):
    offs = base + tl.arange(0, 4).to(tl.int64)
    tl.static_assert(offs.dtype == tl.int64)
    tl.store(y_ptr + tl.arange(0, 4), tl.load(x_ptr + offs))


def test_int64_offsets():
    x = np.arange(16, dtype=np.int16)
    y = np.zeros(4, np.int16)
    _int64_offsets[(1,)](x, y, 5)
    np.testing.assert_array_equal(y, x[5:9])


@kiln.jit
def _atomic_methods(p_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    p = p_ptr + offs
    p.atomic_add(1)
    p.atomic_max(offs)
    p.atomic_xor(3)
    p.atomic_cas(offs ^ 3, offs * 0 + 100)  # Triton's atomic_cas does not broadcast a scalar value
    q = p_ptr + N + offs
    q.atomic_min(offs - 1)
    q.atomic_or(16)
    q.atomic_and(31)
    q.atomic_xchg(tl.load(q) + 1)
    tl.store(p_ptr + 2 * N + offs, tl.load(p_ptr + 2 * N + offs).to(tl.float32).sqrt_rn().to(tl.int32))


def test_atomics_as_pointer_methods():
    p = np.array([0, 0, 0, 0, 5, 5, 5, 5, 0, 1, 4, 9], np.int32)
    _atomic_methods[(1,)](p, N=4)
    i = np.arange(4)
    first = np.bitwise_xor(np.maximum(np.ones(4, np.int32), i), 3)
    first = np.where(first == i ^ 3, 100, first)
    second = (np.minimum(5, i - 1) | 16) & 31
    np.testing.assert_array_equal(p, np.concatenate([first, second + 1, [0, 1, 2, 3]]))
