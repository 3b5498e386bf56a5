"""Layer normalization, forward and backward, with fused dW/dB accumulation (Triton tutorial 05)."""
import numpy as np

import kiln as triton
import kiln.language as tl


# Each kernel declares the specialization main() launches (19 x 300 fp32), for `kiln prewarm`.
@triton.jit(prewarm=[{**{p: "*fp32:16" for p in ("X", "Y", "W", "B", "Mean", "Rstd")}, "stride": "i32", "N": "i32",
                      "eps": "fp32", "BLOCK_SIZE": 512, "num_warps": 4}])
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    # Mean, then variance, each in blocks of BLOCK_SIZE columns.
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


@triton.jit(prewarm=[{**{p: "*fp32:16" for p in ("DX", "DY", "DW", "DB", "X", "W", "Mean", "Rstd")}, "Lock": "*i32:16",
                      "stride": "i32", "N": "i32", "GROUP_SIZE_M": 4, "BLOCK_SIZE_N": 512}])
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP_SIZE_M: tl.constexpr,
                             BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    # Rows share GROUP_SIZE_M partial dW/dB buffers; a spin lock per buffer serializes the adds.
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = tl.where(mask, xhat, 0.)
    wdy = tl.where(mask, wdy, 0.)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = (dy).to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:  # the first row of this group initializes the buffer
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.debug_barrier()
    tl.atomic_xchg(Lock, 0)


@triton.jit(prewarm=[{**{p: "*fp32:16" for p in ("DW", "DB", "FINAL_DW", "FINAL_DB")}, "M": "i32", "N": "i32",
                      "BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 128}])
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.)
        db += tl.load(DB + offs, mask=mask, other=0.)
    sum_dw = tl.sum(dw, axis=0)
    sum_db = tl.sum(db, axis=0)
    tl.store(FINAL_DW + cols, sum_dw, mask=cols < N)
    tl.store(FINAL_DB + cols, sum_db, mask=cols < N)


def layer_norm_forward(x, weight, bias, eps):
    M, N = x.shape
    y = np.empty_like(x)
    mean = np.empty(M, dtype=np.float32)
    rstd = np.empty(M, dtype=np.float32)
    BLOCK_SIZE = min(triton.next_power_of_2(N), 1024)
    _layer_norm_fwd_fused[(M,)](x, y, weight, bias, mean, rstd, x.strides[0] // x.itemsize, N, eps,
                                BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return y, mean, rstd


def layer_norm_backward(dy, x, weight, mean, rstd, group_size_m=4):
    M, N = x.shape
    dx = np.empty_like(dy)
    locks = np.zeros(2 * group_size_m, dtype=np.int32)
    partial_dw = np.zeros((group_size_m, N), dtype=weight.dtype)
    partial_db = np.zeros((group_size_m, N), dtype=weight.dtype)
    dw = np.empty(N, dtype=weight.dtype)
    db = np.empty(N, dtype=weight.dtype)
    BLOCK_SIZE_N = triton.next_power_of_2(N)
    _layer_norm_bwd_dx_fused[(M,)](dx, dy, partial_dw, partial_db, x, weight, mean, rstd, locks,
                                   x.strides[0] // x.itemsize, N, GROUP_SIZE_M=group_size_m,
                                   BLOCK_SIZE_N=BLOCK_SIZE_N)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_SIZE_N"]),)
    _layer_norm_bwd_dwdb[grid](partial_dw, partial_db, dw, db, min(group_size_m, M), N, BLOCK_SIZE_M=32,
                               BLOCK_SIZE_N=128)
    return dx, dw, db


def reference(x, w, b, dy, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    y = xhat * w + b
    wdy = w * dy
    dx = (wdy - xhat * (xhat * wdy).mean(axis=1, keepdims=True) - wdy.mean(axis=1, keepdims=True)) * rstd
    return y, dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def main():
    rng = np.random.default_rng(0)
    M, N, eps = 19, 300, 1e-5
    x = (-2.3 + 0.5 * rng.standard_normal((M, N))).astype(np.float32)
    w = rng.random(N, dtype=np.float32)
    b = rng.random(N, dtype=np.float32)
    dy = (0.1 * rng.standard_normal((M, N))).astype(np.float32)
    y, mean, rstd = layer_norm_forward(x, w, b, eps)
    dx, dw, db = layer_norm_backward(dy, x, w, mean, rstd)
    y_ref, dx_ref, dw_ref, db_ref = reference(x, w, b, dy, eps)
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(dw, dw_ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(db, db_ref, rtol=1e-3, atol=1e-4)
    print("layer_norm: forward and backward match NumPy")


if __name__ == "__main__":
    main()
