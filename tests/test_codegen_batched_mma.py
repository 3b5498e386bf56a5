"""A batched `tl.dot` ([B, M, K] x [B, K, N]) runs on mma.sync, as Triton's does: its accumulator one
2-D mma layout a batch, warps on the batch dim first (`layout.mma_layout`), its operands staged one
batch's tile after another and each batch a thread holds run as a 2-D dot (lower/mma.py). Before,
each thread's FMAs (and fp32 at exact precision where Triton rounds to tf32)."""
import re

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl
from bench_support import needs_cuda
from kiln.ir.layout import Blocked, is_mma_layout, mma_layout
from test_codegen_emulate import warmed_and_emulated


@kiln.jit
def batched_dot(X, Y, A, Z, steps, BT: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                B_TRANSPOSED: tl.constexpr):
    """Z[b] = A[b] + sum over the steps of X[step, b] @ Y[step, b] (Y stored [N, K] where B_TRANSPOSED)."""
    rb, rm = tl.arange(0, BT)[:, None, None], tl.arange(0, M)[None, :, None]
    rn, rk = tl.arange(0, N)[None, None, :], tl.arange(0, K)
    acc = tl.load(A + rb * M * N + rm * N + rn)
    for step in range(steps):
        x = tl.load(X + step * BT * M * K + rb * M * K + rm * K + rk[None, None, :])
        if B_TRANSPOSED:
            y = tl.permute(tl.load(Y + step * BT * N * K + rb * N * K + tl.arange(0, N)[None, :, None] * K
                                   + rk[None, None, :]), (0, 2, 1))
        else:
            y = tl.load(Y + step * BT * K * N + rb * K * N + rk[None, :, None] * N + rn)
        acc = tl.dot(x, y, acc)
    tl.store(Z + rb * M * N + rm * N + rn, acc)


def _arrays(bt, m, n, k, dtype, steps=1, b_transposed=False, seed=0):
    """Small integers: every product and sum exact in every type, so the results equal NumPy's."""
    rng = np.random.default_rng(seed)
    acc = np.int32 if dtype == np.int8 else np.float32
    x = rng.integers(-3, 4, (steps, bt, m, k)).astype(dtype)
    y = rng.integers(-3, 4, (steps, bt, n, k) if b_transposed else (steps, bt, k, n)).astype(dtype)
    return x, y, rng.integers(-3, 4, (bt, m, n)).astype(acc), np.zeros((bt, m, n), acc)


def _want(x, y, a, b_transposed):
    y = y.astype(np.int64)
    products = np.matmul(x.astype(np.int64), np.swapaxes(y, -1, -2) if b_transposed else y)
    return a.astype(np.int64) + products.sum(axis=0)


def _build(bt, m, n, k, dtype, warps, target, b_transposed=False):
    return batched_dot.warmup(*_arrays(bt, m, n, k, dtype, b_transposed=b_transposed), 1, BT=bt, M=m, N=n, K=k,
                              B_TRANSPOSED=b_transposed, num_warps=warps, grid=(1,), target=target)


def test_warps_go_to_the_batch_dim_first():
    assert mma_layout((8, 64, 64), 4) == Blocked((1, 1, 2), (1, 8, 4), (4, 1, 1), (2, 1, 0))
    assert mma_layout((2, 64, 32), 8) == Blocked((1, 1, 2), (1, 8, 4), (2, 2, 2), (2, 1, 0))
    # fewer tiles than warps: every warp on the batch dim, those past the batches holding copies (Triton's way)
    assert mma_layout((2, 16, 8), 4) == Blocked((1, 1, 2), (1, 8, 4), (4, 1, 1), (2, 1, 0))
    assert mma_layout((1, 8, 8), 4) is None  # not a tile: each thread's FMAs
    assert mma_layout((2, 16, 16), 4, rows_only=True) is None
    layout = mma_layout((4, 32, 16), 4)
    assert is_mma_layout(layout, (4, 32, 16), 4) and not is_mma_layout(layout, (2, 32, 16), 8)
    assert is_mma_layout(Blocked((1, 1, 2), (1, 8, 4), (4, 1, 1), (2, 1, 0)), (2, 16, 16), 4)  # copies
    assert not is_mma_layout(Blocked((1, 1, 2), (1, 8, 4), (1, 1, 4), (2, 1, 0)), (2, 16, 16), 4)  # N < 4 tiles


@pytest.mark.parametrize("dtype, target, instr", [
    (np.float16, "sm_80", "m16n8k16.row.col.f32.f16.f16.f32"),
    (ml_dtypes.bfloat16, "sm_90a", "m16n8k16.row.col.f32.bf16.bf16.f32"),
    (np.float32, "sm_90a", "m16n8k8.row.col.f32.tf32.tf32.f32"),  # tl.dot's default for fp32: tf32, as Triton's
    (np.int8, "sm_80", "m16n8k32.row.col.satfinite.s32.s8.s8.s32"),
    (ml_dtypes.float8_e4m3fn, "sm_89", "m16n8k32.row.col.f32.e4m3.e4m3.f32"),
])
def test_a_batched_dot_runs_on_mma_sync(dtype, target, instr):
    kernel = _build(2, 32, 32, 32, dtype, 4, target)
    ptx = kernel.asm["ptx"]
    assert set(re.findall(r"mma\.sync\.aligned\.(\S+)", ptx)) == {instr}
    assert "fma.rn" not in ptx and "wgmma" not in ptx and kernel.n_spills == 0
    # two warps a batch, each half its columns: 2 row pairs x 2 column tiles x the k-steps
    assert ptx.count("mma.sync") == 4 * (32 * dtype(0).itemsize // 32)


@pytest.mark.parametrize("bt, m, n, k, dtype, warps, target, steps, b_transposed", [
    (2, 32, 32, 32, np.float16, 4, "sm_80", 1, False),
    (8, 16, 64, 16, np.float16, 8, "sm_90a", 1, False),  # a warp a batch
    (2, 64, 32, 64, ml_dtypes.bfloat16, 1, "sm_80", 2, True),  # one warp over both batches, B^T, a loop
    (4, 16, 8, 32, np.float32, 2, "sm_90a", 3, True),
    (4, 32, 16, 64, np.int8, 4, "sm_80", 2, False),
    (2, 32, 32, 64, ml_dtypes.float8_e4m3fn, 4, "sm_89", 1, False),
    (2, 16, 8, 16, np.float16, 4, "sm_90a", 2, True),  # two warps a batch, each the whole tile
    (1, 16, 8, 32, np.float32, 4, "sm_80", 1, False),
])
def test_batched_dots_on_the_emulator_equal_numpys(bt, m, n, k, dtype, warps, target, steps, b_transposed):
    args = _arrays(bt, m, n, k, dtype, steps, b_transposed)
    got = warmed_and_emulated(batched_dot, (*args, steps), target, warps, BT=bt, M=m, N=n, K=k,
                              B_TRANSPOSED=b_transposed)
    np.testing.assert_array_equal(got[3], _want(*args[:3], b_transposed))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("bt, m, n, k, dtype, warps, b_transposed", [
    (2, 32, 32, 32, "float16", 4, False), (8, 16, 64, 16, "bfloat16", 8, True), (4, 16, 8, 32, "float32", 2, True),
    (4, 32, 16, 64, "int8", 4, False), (2, 64, 64, 64, "float8_e4m3fn", 4, False),
])
def test_batched_dots_on_the_gpu(bt, m, n, k, dtype, warps, b_transposed):
    import torch
    np_type = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "int8": np.int8,
               "float8_e4m3fn": ml_dtypes.float8_e4m3fn}[dtype]
    x, y, a, _ = _arrays(bt, m, n, k, np_type, 2, b_transposed)
    want = _want(x, y, a, b_transposed)
    on_gpu = [torch.from_numpy(v.astype(np.float32)).to(getattr(torch, dtype)).cuda() for v in (x, y)]
    acc = torch.from_numpy(a).cuda()
    z = torch.zeros_like(acc)
    batched_dot[(1,)](*on_gpu, acc, z, 2, BT=bt, M=m, N=n, K=k, B_TRANSPOSED=b_transposed, num_warps=warps)
    np.testing.assert_array_equal(z.cpu().numpy(), want)
