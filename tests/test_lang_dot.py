"""Conformance: tl.dot (interpreter vs NumPy)."""
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def _matmul(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, OUT: tl.constexpr,
            PREC: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    if PREC == "default":
        c = tl.dot(a, b, out_dtype=OUT)
    else:
        c = tl.dot(a, b, input_precision=PREC, out_dtype=OUT)
    tl.static_assert(c.dtype == OUT)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


def test_dot_fp16_accumulates_in_fp32():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 32)).astype(np.float16)
    b = rng.standard_normal((32, 16)).astype(np.float16)
    c = np.zeros((16, 16), np.float32)
    _matmul[(1,)](a, b, c, M=16, N=16, K=32, OUT=tl.float32, PREC="default")
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-4)


def test_dot_fp16_out_dtype_fp16():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 32)).astype(np.float16)
    c = np.zeros((16, 32), np.float16)
    _matmul[(1,)](a, b, c, M=16, N=32, K=16, OUT=tl.float16, PREC="default")
    np.testing.assert_allclose(c.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2,
                               atol=2e-2)


@pytest.mark.parametrize("prec", ["ieee", "tf32", "default"])
def test_dot_fp32(prec):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)
    c = np.zeros((32, 16), np.float32)
    _matmul[(1,)](a, b, c, M=32, N=16, K=16, OUT=tl.float32, PREC=prec)
    tol = 1e-5 if prec == "ieee" else 1e-2  # tf32 keeps 10 mantissa bits
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=tol, atol=tol)


def test_dot_int8_gives_exact_int32():
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (16, 64)).astype(np.int8)
    b = rng.integers(-128, 128, (64, 16)).astype(np.int8)
    c = np.zeros((16, 16), np.int32)
    _matmul[(1,)](a, b, c, M=16, N=16, K=64, OUT=tl.int32, PREC="default")
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@kiln.jit
def _matmul_acc(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        rk = k * BK + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def test_tiled_matmul_with_acc_and_masks():
    rng = np.random.default_rng(4)
    M, N, K = 40, 24, 50
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float16)
    grid = lambda meta: (kiln.cdiv(M, meta["BM"]), kiln.cdiv(N, meta["BN"]))  # noqa: E731
    _matmul_acc[grid](a, b, c, M, N, K, BM=16, BN=16, BK=16)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c.astype(np.float32), ref, rtol=1e-2, atol=2e-2)


@kiln.jit
def _matmul_k_from_memory(a_ptr, b_ptr, c_ptr, sizes, M, N, lda, BM: tl.constexpr, BN: tl.constexpr,
                          BK: tl.constexpr):
    k_size = tl.load(sizes)  # nothing is known of K: its edge may fall on any element
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(k_size, BK)):
        rk = k * BK + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * lda + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < k_size), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=rk[:, None] < k_size, other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=rm[:, None] < M)


@pytest.mark.parametrize("K", [100, 77])
@pytest.mark.parametrize("BM, BN, BK, warps", [(128, 128, 64, 4), (64, 64, 16, 8)])
def test_matmul_with_k_read_from_memory(K, BM, BN, BK, warps):
    """A K edge known only at run time: on Hopper, A's edge columns come by cp.async copies
    of 16 bytes (8 at 8 warps and BK=16) that zero-fill past K (src-size), B's edge rows by
    copies skipped whole. What lies past K in memory is NaN, so a copy that read it would show."""
    rng = np.random.default_rng(K)
    M, N, lda = 150, 128, 128
    a = np.full((M, lda), np.nan, np.float16)
    a[:, :K] = rng.standard_normal((M, K))
    b = np.full((128, N), np.nan, np.float16)
    b[:K] = rng.standard_normal((K, N))
    c = np.zeros((M, N), np.float32)
    _matmul_k_from_memory[(kiln.cdiv(M, BM), kiln.cdiv(N, BN))](a, b, c, np.array([K], np.int32), M, N, lda, BM=BM,
                                                                BN=BN, BK=BK, num_warps=warps, num_stages=3)
    np.testing.assert_allclose(c, a[:, :K].astype(np.float32) @ b[:K].astype(np.float32), rtol=1e-2, atol=5e-2)


@kiln.jit
def _dot_acc_kw(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    offs = r[:, None] * N + r[None, :]
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    acc = tl.full((N, N), 1.0, tl.float32)
    c = tl.dot(a, b, acc=acc, allow_tf32=False)
    tl.store(c_ptr + offs, c)


def test_dot_acc_keyword_and_allow_tf32():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)
    c = np.zeros((16, 16), np.float32)
    _dot_acc_kw[(1,)](a, b, c, N=16)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b + 1.0, rtol=1e-5, atol=1e-5)


@kiln.jit
def _dot_dtypes(a_ptr, c_ptr, DT: tl.constexpr, OUT: tl.constexpr, EXPECT: tl.constexpr, N: tl.constexpr):
    r = tl.arange(0, N)
    offs = r[:, None] * N + r[None, :]
    a = tl.load(a_ptr + offs).to(DT)
    c = tl.dot(a, a, out_dtype=OUT)
    tl.static_assert(c.dtype == EXPECT)
    tl.store(c_ptr + offs, c)


@pytest.mark.parametrize("dt,out,expect", [
    (tl.float16, tl.float32, tl.float32), (tl.float16, tl.float16, tl.float16),
    (tl.bfloat16, tl.float16, tl.float32),  # out_dtype only applies to fp16/fp8 inputs
    (tl.float32, tl.float16, tl.float32), (tl.float64, tl.float32, tl.float64), (tl.int8, tl.float32, tl.int32),
])
def test_dot_result_dtypes(dt, out, expect):
    a = (np.arange(32 * 32) % 7 - 3).astype(np.float32).reshape(32, 32)  # K >= 32 for int8 on the GPU
    npout = {tl.float32: np.float32, tl.float16: np.float16, tl.float64: np.float64, tl.int32: np.int32}[expect]
    c = np.zeros((32, 32), npout)
    _dot_dtypes[(1,)](a, c, DT=dt, OUT=out, EXPECT=expect, N=32)
    np.testing.assert_array_equal(c, (a.astype(np.float64) @ a).astype(npout))  # small integers: exact


@kiln.jit
def _dot_acc_mismatch(a_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    acc = tl.zeros((N, N), tl.float16)
    # without out_dtype the result takes acc's type (Triton 3.9; 3.6 refused this call)
    tl.store(a_ptr + r[:, None] * N + r[None, :], tl.dot(a, a, acc, out_dtype=tl.float32))


def test_dot_acc_must_have_the_result_dtype():
    a = np.zeros((16, 16), np.float16)
    with pytest.raises(kiln.CompilationError, match="acc"):
        _dot_acc_mismatch[(1,)](a, N=16)


@kiln.jit
def _batched_dot(a_ptr, b_ptr, c_ptr, B: tl.constexpr, N: tl.constexpr):
    bi = tl.arange(0, B)[:, None, None]
    ri = tl.arange(0, N)[None, :, None]
    ci = tl.arange(0, N)[None, None, :]
    offs = bi * N * N + ri * N + ci
    c = tl.dot(tl.load(a_ptr + offs), tl.load(b_ptr + offs))
    tl.store(c_ptr + offs, c)


def test_batched_3d_dot():
    rng = np.random.default_rng(9)
    a = rng.standard_normal((2, 16, 16)).astype(np.float16)
    b = rng.standard_normal((2, 16, 16)).astype(np.float16)
    c = np.zeros((2, 16, 16), np.float32)
    _batched_dot[(1,)](a, b, c, B=2, N=16)
    np.testing.assert_allclose(c, np.matmul(a.astype(np.float32), b.astype(np.float32)), rtol=1e-3, atol=1e-3)


@kiln.jit
def _small_dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


@pytest.mark.parametrize("M, N, K, dtype", [(1, 16, 16, np.float16), (8, 8, 16, np.float16),
                                            (16, 2, 32, np.float32), (4, 4, 32, np.int8)])
def test_dot_small_m_and_n(M, N, K, dtype):
    rng = np.random.default_rng(M * N)
    a = (rng.random((M, K)) * 4).astype(dtype)
    b = (rng.random((K, N)) * 4).astype(dtype)
    c = np.zeros((M, N), np.int32 if dtype == np.int8 else np.float32)
    _small_dot[(1,)](a, b, c, M=M, N=N, K=K)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize("K, dtype", [(8, np.float16), (2, np.float32), (1, np.float32), (4, np.int8)])
def test_dot_k_below_the_mma_minimum(K, dtype):
    # Triton's interpreter takes any K: kiln pads K with zeros up to what the instruction takes
    rng = np.random.default_rng(K)
    a = (rng.random((16, K)) * 4).astype(dtype)
    b = (rng.random((K, 16)) * 4).astype(dtype)
    c = np.zeros((16, 16), np.int32 if dtype == np.int8 else np.float32)
    _small_dot[(1,)](a, b, c, M=16, N=16, K=K)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-2, atol=1e-1)


@kiln.jit
def _tiled_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr):
    """Tutorial 03's loop: rows and columns wrapped (`% M`, `% N`), the K edge masked."""
    offs_m = (tl.program_id(0) * BM + tl.arange(0, BM)) % M
    offs_n = (tl.program_id(1) * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("M, N, K", [(150, 200, 100), (64, 48, 77), (130, 257, 64)])
def test_tiled_matmul_with_wrapped_rows_and_a_ragged_k(M, N, K):
    """On Hopper these loads are TMA boxes of maps the launcher derives from the arguments
    (kiln.codegen.passes.pointer_tma): past K and past N what memory holds is NaN, which TMA
    must read as zeros where the pointers are masked; past M the pointers wrap to row 0
    where TMA reads zeros, rows the store's mask drops. The grid has one row of programs
    too many: all its rows wrap."""
    rng = np.random.default_rng(M + N + K)
    lda, ldb = 128 * kiln.cdiv(K, 128), 16 * kiln.cdiv(N + 5, 16)
    a = np.full((M, lda), np.nan, np.float16)
    a[:, :K] = rng.standard_normal((M, K))
    b = np.full((128 * kiln.cdiv(K, 128), ldb), np.nan, np.float16)
    b[:K, :N] = rng.standard_normal((K, N))
    c = np.full((M, N), -7.0, np.float32)
    BM, BN, BK = 64, 128, 64
    _tiled_matmul[(kiln.cdiv(M, BM) + 1, kiln.cdiv(N, BN))](a, b, c, M, N, K, lda, ldb, N, BM=BM, BN=BN, BK=BK,
                                                             num_warps=4, num_stages=3)
    np.testing.assert_allclose(c, a[:, :K].astype(np.float32) @ b[:K, :N].astype(np.float32), rtol=1e-2, atol=5e-2)


def test_tiled_matmul_over_overlapping_rows_reads_through_its_pointers():
    """Rows 16 elements apart, 64 long: no TMA map describes them (they overlap), so on
    Hopper the launch takes the build without derived maps; the result is the same."""
    rng = np.random.default_rng(3)
    M, N, K, step = 96, 64, 64, 16
    flat = rng.standard_normal(step * (M - 1) + K).astype(np.float16)
    a = np.lib.stride_tricks.as_strided(flat, (M, K), (2 * step, 2))
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float32)
    _tiled_matmul[(kiln.cdiv(M, 64), kiln.cdiv(N, 64))](flat, b, c, M, N, K, step, N, N, BM=64, BN=64, BK=32,
                                                         num_warps=4, num_stages=3)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=5e-2)
