"""Layer normalization over the last axis, forward and backward.

Forward: one program per row; one sweep over the row gathers its moments, a second writes
y = (x - mean) * rstd * w + b and keeps mean and rstd for the backward pass.

Backward: dx needs only its own row, but dw and db sum over all rows. Instead of having
every row add into shared buffers, each program of the first kernel owns a chunk of rows
and sums their contributions in registers, writing one partial row per chunk; a second
kernel adds up the partial rows, column block by column block.
"""
import numpy as np

import kiln as triton
import kiln.language as tl

ROWS_PER_PROGRAM = 4  # rows whose dw/db contributions one backward program sums in registers


def _fp32_pointers(*names):
    return {name: "*fp32:16" for name in names}


# Every kernel declares main()'s launch (a 19 x 300 fp32 problem) for `kiln prewarm`.
@triton.jit(prewarm=[{**_fp32_pointers("x_ptr", "y_ptr", "w_ptr", "b_ptr", "mean_ptr", "rstd_ptr"),
                      "row_stride": "i32", "N": "i32", "eps": "fp32", "BLOCK_SIZE": 256, "num_warps": 4}])
def _layer_norm_fwd_fused(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, row_stride, N, eps,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    src = x_ptr + row * row_stride
    dst = y_ptr + row * row_stride
    # Moments of d = x - x[0] in one sweep. The shift by a value of the row keeps
    # E[d^2] - E[d]^2 from cancelling away its digits when |mean| is large next to the spread.
    pivot = tl.load(src).to(tl.float32)
    sum_d = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    sum_dd = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        col = start + tl.arange(0, BLOCK_SIZE)
        inside = col < N
        d = tl.where(inside, tl.load(src + col, mask=inside).to(tl.float32) - pivot, 0.0)
        sum_d += d
        sum_dd += d * d
    mean_d = tl.sum(sum_d, axis=0) / N
    variance = tl.maximum(tl.sum(sum_dd, axis=0) / N - mean_d * mean_d, 0.0)
    mean = pivot + mean_d
    rstd = tl.rsqrt(variance + eps)
    for start in range(0, N, BLOCK_SIZE):
        col = start + tl.arange(0, BLOCK_SIZE)
        inside = col < N
        scale = tl.load(w_ptr + col, mask=inside).to(tl.float32) * rstd
        shift = tl.load(b_ptr + col, mask=inside).to(tl.float32)
        v = tl.load(src + col, mask=inside, other=0.0).to(tl.float32)
        tl.store(dst + col, (v - mean) * scale + shift, mask=inside)
    tl.store(mean_ptr + row, mean)  # kept for the backward pass
    tl.store(rstd_ptr + row, rstd)


@triton.jit(prewarm=[{**_fp32_pointers("dx_ptr", "dy_ptr", "x_ptr", "w_ptr", "mean_ptr", "rstd_ptr", "dw_part",
                                       "db_part"),
                      "row_stride": "i32", "M": "i32", "N": "i32", "ROWS": ROWS_PER_PROGRAM, "BLOCK_N": 512}])
def _layer_norm_bwd_dx(dx_ptr, dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dw_part, db_part, row_stride, M, N,
                       ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    """dx for rows [ROWS * p, ROWS * p + ROWS) of program p, and those rows' sums of
    dy * xhat and of dy as row p of dw_part and db_part. A row is one block (BLOCK_N >= N)."""
    chunk = tl.program_id(0)
    col = tl.arange(0, BLOCK_N)
    inside = col < N
    w = tl.load(w_ptr + col, mask=inside, other=0.0).to(tl.float32)
    dw_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    db_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    first = chunk * ROWS
    for row in range(first, tl.minimum(first + ROWS, M)):
        at = row * row_stride + col
        rstd = tl.load(rstd_ptr + row)
        x = tl.load(x_ptr + at, mask=inside, other=0.0).to(tl.float32)
        xhat = tl.where(inside, (x - tl.load(mean_ptr + row)) * rstd, 0.0)
        dy = tl.load(dy_ptr + at, mask=inside, other=0.0).to(tl.float32)
        g = dy * w  # the gradient with respect to xhat
        # xhat has mean 0 and mean square 1 over the row: remove g's components along 1 and xhat.
        along_one = tl.sum(g, axis=0) / N
        along_xhat = tl.sum(g * xhat, axis=0) / N
        tl.store(dx_ptr + at, rstd * (g - along_one - xhat * along_xhat), mask=inside)
        dw_sum += dy * xhat
        db_sum += dy
    tl.store(dw_part + chunk * N + col, dw_sum, mask=inside)
    tl.store(db_part + chunk * N + col, db_sum, mask=inside)


@triton.jit(prewarm=[{**_fp32_pointers("dw_part", "db_part", "dw_ptr", "db_ptr"), "parts": "i32", "N": "i32",
                      "BLOCK_N": 128}])
def _layer_norm_bwd_sum_parts(dw_part, db_part, dw_ptr, db_ptr, parts, N, BLOCK_N: tl.constexpr):
    """dw and db for BLOCK_N columns: the sums of those columns over the `parts` partial rows."""
    col = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = col < N
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    for part in range(0, parts):
        dw += tl.load(dw_part + part * N + col, mask=inside, other=0.0)
        db += tl.load(db_part + part * N + col, mask=inside, other=0.0)
    tl.store(dw_ptr + col, dw.to(dw_ptr.dtype.element_ty), mask=inside)
    tl.store(db_ptr + col, db.to(db_ptr.dtype.element_ty), mask=inside)


def forward(x, w, b, eps):
    """Returns y and the per-row mean and rstd that backward() takes."""
    rows, n = x.shape
    y = np.empty_like(x)
    mean, rstd = np.empty(rows, np.float32), np.empty(rows, np.float32)
    block = min(triton.next_power_of_2(n), 256)  # N = 300 takes two blocks per sweep
    _layer_norm_fwd_fused[(rows,)](x, y, w, b, mean, rstd, x.strides[0] // x.itemsize, n, eps,
                                   BLOCK_SIZE=block, num_warps=4)
    return y, mean, rstd


def backward(dy, x, w, mean, rstd):
    """Returns dx, dw, db."""
    rows, n = x.shape
    chunks = triton.cdiv(rows, ROWS_PER_PROGRAM)
    dx = np.empty_like(x)
    dw_part = np.empty((chunks, n), np.float32)
    db_part = np.empty((chunks, n), np.float32)
    _layer_norm_bwd_dx[(chunks,)](dx, dy, x, w, mean, rstd, dw_part, db_part, x.strides[0] // x.itemsize,
                                  rows, n, ROWS=ROWS_PER_PROGRAM, BLOCK_N=triton.next_power_of_2(n))
    dw, db = np.empty_like(w), np.empty_like(w)
    column_block = 128
    _layer_norm_bwd_sum_parts[(triton.cdiv(n, column_block),)](dw_part, db_part, dw, db, chunks, n,
                                                               BLOCK_N=column_block)
    return dx, dw, db


def numpy_layer_norm(x, w, b, dy, eps):
    """y, dx, dw, db in float64, written as the chain rule through mean and variance."""
    x, w, b, dy = (a.astype(np.float64) for a in (x, w, b, dy))
    centered = x - x.mean(axis=1, keepdims=True)
    variance = (centered ** 2).mean(axis=1, keepdims=True)
    rstd = (variance + eps) ** -0.5
    xhat = centered * rstd
    dxhat = dy * w
    dvariance = (dxhat * centered).sum(axis=1, keepdims=True) * -0.5 * rstd ** 3
    dcentered = dxhat * rstd + dvariance * 2 * centered / x.shape[1]
    dx = dcentered - dcentered.mean(axis=1, keepdims=True)
    return xhat * w + b, dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def main():
    rng = np.random.default_rng(5)
    rows, n, eps = 19, 300, 1e-5
    x = (4.0 + 0.3 * rng.standard_normal((rows, n))).astype(np.float32)  # a mean far from 0
    w = rng.uniform(0.5, 1.5, n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    dy = rng.standard_normal((rows, n)).astype(np.float32)
    y, mean, rstd = forward(x, w, b, eps)
    dx, dw, db = backward(dy, x, w, mean, rstd)
    for name, got, want in zip(("y", "dx", "dw", "db"), (y, dx, dw, db), numpy_layer_norm(x, w, b, dy, eps)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
    print("layer_norm: forward and backward match NumPy")


if __name__ == "__main__":
    main()
