"""Combine functions that make blocks of their own, under the interpreter.

Inductor's `triton_helpers.max2` reduces with a combine function that calls `promote_to_tensor(x)`
(`x + tl.zeros((1,), tl.int1)`) to ask whether its scalar argument is a float. The interpreter runs
a combine region once for all lanes, so a "scalar" there holds an array of lanes, and a block made
from it carries those lanes in front of its own shape: splat, broadcast, reshape, expand_dims,
permute, cat and nested reductions must look past them (they failed with "splat ... axis remapping").
"""
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def promote_to_tensor(x):
    return x + tl.zeros((1,), tl.int1)


@kiln.jit
def is_floating(x):
    return promote_to_tensor(x).dtype.is_floating()


@kiln.jit
def maximum(a, b):
    mask = a > b
    if is_floating(a):
        mask |= a != a
    return tl.where(mask, a, b)


@kiln.jit
def max2(a, dim):
    return tl.reduce(a, dim, maximum)


@kiln.jit
def persistent_max_kernel(in_ptr, out_ptr, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    """Inductor's shape of a persistent reduction: x - max(x, axis=1), masked."""
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    rindex = tl.arange(0, RBLOCK)[None, :]
    mask = (rindex < rnumel) & (xindex < xnumel)
    tmp0 = tl.load(in_ptr + (rindex + rnumel * xindex), mask, other=0.0)
    tmp1 = tl.where(mask, tl.broadcast_to(tmp0, [XBLOCK, RBLOCK]), float("-inf"))
    tmp2 = max2(tmp1, 1)[:, None]
    tl.store(out_ptr + (rindex + rnumel * xindex), tmp0 - tmp2, mask)


def test_inductor_style_max2_persistent_reduction_runs_in_the_interpreter():
    x = np.random.default_rng(0).standard_normal((8, 30)).astype(np.float32)
    x[3, 5] = np.nan  # max2 propagates NaN, as its combine function says
    out = np.empty_like(x)
    persistent_max_kernel[(2,)](x, out, 8, 30, XBLOCK=4, RBLOCK=32)
    expected = x - np.max(x, axis=1, keepdims=True)
    np.testing.assert_allclose(out, expected, equal_nan=True)
    assert np.isnan(out[3]).all() and not np.isnan(out[2]).any()


@kiln.jit
def blocky_add(a, b):
    """A combine function that builds blocks from its scalars and comes back to a scalar."""
    pair = tl.join(a + tl.zeros((2,), a.dtype), b + tl.zeros((2,), b.dtype))  # [2, 2]
    flat = tl.reshape(tl.permute(pair, (1, 0)), (4,))
    wide = tl.broadcast_to(tl.expand_dims(flat, 0), (2, 4))
    both = tl.cat(flat, flat, can_reorder=True)
    return (tl.sum(wide, axis=1) + tl.sum(both, axis=0)).max(axis=0) / 6  # a row of wide: 2a + 2b; both: 4a + 4b


@kiln.jit
def blocky_kernel(x_ptr, sum_ptr, scan_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(sum_ptr + tl.arange(0, N), tl.reduce(x, 1, blocky_add))
    tl.store(scan_ptr + tl.arange(0, N)[:, None] * N + tl.arange(0, N)[None, :],
             tl.associative_scan(x, 0, blocky_add))


def test_shape_ops_inside_combine_functions_keep_each_lane_apart():
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    sums, scans = np.empty(8, np.float32), np.empty_like(x)
    blocky_kernel[(1,)](x, sums, scans, N=8)
    np.testing.assert_allclose(sums, x.sum(axis=1))
    np.testing.assert_allclose(scans, np.cumsum(x, axis=0))


@pytest.mark.timeout(120)
def test_the_max2_kernel_also_compiles():
    x = np.zeros((8, 30), np.float32)
    compiled = persistent_max_kernel.warmup(x, x, 8, 30, XBLOCK=4, RBLOCK=32, grid=(2,), target="sm_90a")
    assert "persistent_max_kernel" in compiled.asm["ptx"]
